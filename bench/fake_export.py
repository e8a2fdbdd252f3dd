"""Fake-mode export benchmark: a LLaMA-shaped model of about 7B parameters that never exists in memory.

LlamaConfig(hidden 4096, intermediate 11008, 32 layers, 32 heads, vocab 32000):
6.7B parameters, 27 GB of float32 weights. The model is built under fake
tensors (random init costs nothing, no hub download) and exported by
``onnxsight.export`` and by ``torch.onnx.export(..., dynamo=True)`` (torch.onnx's
own ``enable_fake_mode`` where this torch has it; torch 2.13 removed it, so its
documented replacement: the model built under torch's ``FakeTensorMode``), with
its default passes and with ``optimize=False`` (the default optimizer folds
constants, which reads the fake weights' data).
An export that fails is recorded with its error class and message.

Each measurement is a fresh process: the time of the export call, and the peak
resident set of the whole process (``ru_maxrss``: imports, the fake model, the
export), next to the RSS after the imports. The first round is an untimed
warm-up (page cache, lazy imports); then ``--runs`` rounds, the tools
interleaved, reported as median and min-max. ``--layers`` scales the model
down (the full 32 layers take minutes per export on a 2-core machine).

    python bench/fake_export.py [--layers 32] [--runs 5] [--tools onnxsight,torch.onnx,torch.onnx-optimize=False] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIG = {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
          "vocab_size": 32000}
SEQ = 16


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _build(layers: int, mode_factory):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(num_hidden_layers=layers, **CONFIG)
    with mode_factory():
        model = LlamaForCausalLM(config).eval()
        ids = torch.zeros(1, SEQ, dtype=torch.long)
    return model, ids


def _child(tool: str, layers: int) -> dict:
    import torch
    from transformers import LlamaForCausalLM  # noqa: F401 - imported before the baseline, like torch

    result: dict = {"tool": tool, "layers": layers}
    if tool == "onnxsight":
        import onnxsight

        result["rss_imports_mb"] = round(_peak_mb())
        start = time.perf_counter()
        model, ids = _build(layers, onnxsight.fake_mode)
        result["build_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        program = onnxsight.export(model, (ids,), kwargs={"use_cache": False})
        result["export_s"] = round(time.perf_counter() - start, 2)
        result["nodes"] = len(program.model_structure().graph.node)
        result["fake_weights"] = len(program.fake_weights)
    else:
        from torch._subclasses.fake_tensor import FakeTensorMode

        result["rss_imports_mb"] = round(_peak_mb())
        enable = getattr(torch.onnx, "enable_fake_mode", None)
        result["fake_mode"] = "torch.onnx.enable_fake_mode" if enable else "torch FakeTensorMode"
        if enable is None:
            result["enable_fake_mode_error"] = "AttributeError: module 'torch.onnx' has no attribute 'enable_fake_mode'"
        start = time.perf_counter()
        model, ids = _build(layers, enable or (lambda: FakeTensorMode(allow_non_fake_inputs=True)))
        result["build_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        try:
            options = {"optimize": False} if tool == "torch.onnx-optimize=False" else {}
            program = torch.onnx.export(model, (ids,), kwargs={"use_cache": False}, dynamo=True, verbose=False,
                                        **options)
            result["nodes"] = len(program.model.graph)
        except Exception as exc:  # noqa: BLE001 - the error is the measurement
            result["error"] = _describe(exc)
        result["export_s"] = round(time.perf_counter() - start, 2)
    result["params"] = sum(p.numel() for p in model.parameters())
    result["weights_gb"] = round(result["params"] * 4 / 1e9, 1)
    result["peak_rss_mb"] = round(_peak_mb())
    return result


def _describe(exc: BaseException) -> str:
    """The error and its innermost cause, first lines only (torch.onnx wraps the real error in PassError)."""
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
    cause = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__
    if cause is not exc:
        text += f" <- {type(cause).__name__}: {str(cause).strip().splitlines()[0][:300]}"
    return text


def _run(tool: str, layers: int) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, __file__, "--child", tool, "--layers", str(layers)],
                          capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"tool": tool, "layers": layers, "error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def _summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if "error" not in r]
    out = {k: rows[0].get(k) for k in ("tool", "layers", "params", "weights_gb", "fake_mode", "nodes")}
    if not ok:
        out["error"] = rows[0].get("error")
        return out
    for key in ("export_s", "peak_rss_mb", "rss_imports_mb", "build_s"):
        values = [r[key] for r in ok]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    out["runs"] = len(ok)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tools", default="onnxsight,torch.onnx,torch.onnx-optimize=False")
    parser.add_argument("--json", default=None, help="write the summary here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(_child(options.child, options.layers)))
        return
    tools = options.tools.split(",")
    for tool in tools:   # untimed warm-up
        _run(tool, options.layers)
    rows: dict[str, list[dict]] = {tool: [] for tool in tools}
    for n in range(options.runs):
        for tool in tools:
            rows[tool].append(_run(tool, options.layers))
            print(f"run {n + 1}/{options.runs} {tool}: {json.dumps(rows[tool][-1])}", file=sys.stderr, flush=True)
    summary = {"layers": options.layers, "runs": options.runs, "cpus": os.cpu_count(),
               "results": [_summary(rows[tool]) for tool in tools]}
    print(json.dumps(summary, indent=1))
    if options.json:
        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=1)


if __name__ == "__main__":
    main()
