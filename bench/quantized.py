"""Quantized-model benchmark: PT2E int8 models, onnxsight vs torch.onnx.export(dynamo=True), same run.

Per model (torchao's X86InductorQuantizer, static activations unless the name says dynamic):
- export wall time of the quantized module, onnxsight vs torch.onnx at the same opset, in this
  process after one untimed export of each (warm: imports excluded);
- ONNX Runtime CPU latency (1 thread) of the int8 model onnxsight writes against the float model
  it came from (exported by onnxsight too), the reason people quantize;
- the largest output difference of the int8 ONNX model from the quantized eager model.

Median and spread (min..max) of ``--runs`` timed runs after an untimed warm-up.

    python bench/quantized.py [--models cnn,mlp,transformer,mlp-dynamic] [--runs 5] [--opset 18]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
import warnings
from typing import Any, Callable

import torch

from onnxsight.zoo.suites.quantized import MLP, ResidualCNN, TransformerBlock, quantize  # the zoo suite's models

MODELS: dict[str, tuple[Callable[[], torch.nn.Module], Callable[[], tuple], bool]] = {
    "cnn": (lambda: ResidualCNN(width=64, blocks=3), lambda: (torch.randn(8, 3, 56, 56),), False),
    "mlp": (lambda: MLP(features=512, width=1024), lambda: (torch.randn(64, 512),), False),
    "transformer": (lambda: TransformerBlock(dim=256, heads=4), lambda: (torch.randn(8, 64, 256),), False),
    "mlp-dynamic": (lambda: MLP(features=512, width=1024), lambda: (torch.randn(64, 512),), True),
}


def _stats(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _timed(fn: Callable[[], Any], runs: int) -> tuple[dict[str, float], Any]:
    result = fn()  # untimed warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return _stats(times), result


def _export(tool: str, module: torch.nn.Module, args: tuple, opset: int) -> bytes:
    if tool == "onnxsight":
        import onnxsight

        return onnxsight.export(module, args, opset_version=opset).model_proto.SerializeToString()
    program = torch.onnx.export(module, args, dynamo=True, verbose=False, opset_version=opset)
    return program.model_proto.SerializeToString()


def _latency(model: bytes, args: tuple, runs: int) -> tuple[dict[str, float], Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    for _ in range(3):
        session.run(None, feeds)
    stats, outputs = _timed(lambda: session.run(None, feeds), runs)
    return {k: v * 1000 if k != "n" else v for k, v in stats.items()}, outputs


def measure(name: str, runs: int, opset: int) -> dict[str, Any]:
    build, inputs, dynamic = MODELS[name]
    torch.manual_seed(0)
    model, args = build().eval(), inputs()
    quantized = quantize(model, args, dynamic=dynamic, dynamic_batch=False)
    row: dict[str, Any] = {"model": name}
    for tool in ("onnxsight", "torch.onnx"):
        try:
            row[f"export_s[{tool}]"], proto = _timed(lambda: _export(tool, quantized, args, opset), runs)
            if tool == "onnxsight":
                int8 = proto
        except Exception as exc:  # noqa: BLE001 - a failed export is a result of the benchmark
            first = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip().splitlines()[0][:120]
            row[f"export_s[{tool}]"] = {"error": f"{type(exc).__name__}: {first}"}
    if "error" in row["export_s[onnxsight]"]:
        return row
    import onnxsight

    float_proto = onnxsight.export(model, args, opset_version=opset).model_proto.SerializeToString()
    row["ort_ms[int8]"], outputs = _latency(int8, args, runs)
    row["ort_ms[float]"], _ = _latency(float_proto, args, runs)
    with torch.no_grad():
        expected = quantized(*args)
    row["max_abs_diff_vs_quantized_eager"] = float((torch.as_tensor(outputs[0]) - expected).abs().max())
    return row


def _cell(stats: dict[str, float], digits: int = 2) -> str:
    if "error" in stats:
        return f"failed: {stats['error']}"
    return f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}..{stats['max']:.{digits}f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--runs", type=int, default=5, help="timed runs after an untimed warm-up")
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--json", help="also write the rows to this file")
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("torchao").setLevel(logging.ERROR)
    rows = [measure(name, options.runs, options.opset) for name in options.models.split(",")]
    if options.json:
        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    print(f"opset {options.opset}; median (min..max) of {options.runs} runs after an untimed warm-up; "
          f"ONNX Runtime {__import__('onnxruntime').__version__} CPU, 1 thread; torch {torch.__version__}")
    print("| model | export s: onnxsight | export s: torch.onnx | ORT ms: int8 | ORT ms: float | "
          "speed-up | max abs diff vs quantized eager |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        speedup = (f"{row['ort_ms[float]']['median'] / row['ort_ms[int8]']['median']:.2f}x"
                   if "ort_ms[int8]" in row else "")
        print(f"| {row['model']} | {_cell(row['export_s[onnxsight]'])} | {_cell(row['export_s[torch.onnx]'])} | "
              f"{_cell(row['ort_ms[int8]']) if 'ort_ms[int8]' in row else ''} | "
              f"{_cell(row['ort_ms[float]']) if 'ort_ms[float]' in row else ''} | {speedup} | "
              f"{row.get('max_abs_diff_vs_quantized_eager', float('nan')):.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
