"""Export benchmark: onnxsight vs torch.onnx.export(dynamo=True), same models, same run.

Each (model, exporter) pair runs in a fresh process so peak RSS is its own,
and both exporters target the same opset. Prints, per model: export wall time
("warm": the libraries both exporters load lazily on first use -- torch.export's
tracer, onnxscript -- are imported before timing, so it is the cost of one
export; "cold": the first export in a fresh process, imports included), peak
RSS, and the ONNX Runtime latency of each exported model.

    python bench/export.py [--models mlp12,resnet50] [--runs 5] [--opset 18]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(model_name: str, tool: str, out_path: str, opset: int, warm: bool) -> dict:
    """Export one model with one tool in this (fresh) process."""
    import torch

    sys.path.insert(0, HERE)
    from models import MODELS

    torch.manual_seed(0)
    model, args = MODELS[model_name]()
    if warm:  # what both exporters import lazily on their first export
        import torch.export._trace  # noqa: F401
        if tool == "onnxsight":
            import onnxsight  # noqa: F401
        else:
            import torch.onnx._internal.exporter._core  # noqa: F401  (onnxscript, the torchlib registry)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if tool == "onnxsight":
        import onnxsight

        program = onnxsight.export(model, args, opset_version=opset)
        program.save(out_path)
    else:
        program = torch.onnx.export(model, args, dynamo=True, verbose=False, opset_version=opset)
        program.save(out_path)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": seconds, "peak_rss_mb": peak / 1024, "export_rss_mb": (peak - rss_before) / 1024}


def _latency(path: str, model_name: str, runs: int) -> list[float]:
    import onnxruntime as ort
    import torch

    sys.path.insert(0, HERE)
    from models import MODELS

    torch.manual_seed(0)
    _, args = MODELS[model_name]()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return [t * 1000 for t in times]


def _stats(values: list[float]) -> dict:
    """Median and spread (min..max) of repeated measurements."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _measure(name: str, tool: str, out: str, options: argparse.Namespace) -> dict:
    """One untimed round, then --runs rounds of a cold and a warm export, each in a fresh process; then the
    ONNX Runtime latency of the exported file. ``{"error": ...}`` when an export fails."""
    samples: dict = {"cold": [], "warm": [], "peak": []}
    for _ in range(options.runs + 1):
        for mode in ("cold", "warm"):
            proc = subprocess.run([sys.executable, __file__, "--opset", str(options.opset), "--child", name, tool,
                                   out, mode], capture_output=True, text=True)
            if proc.returncode != 0:
                return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:160]}
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            samples[mode].append(result["seconds"])
            samples["peak"].append(result["peak_rss_mb"])
    return {"warm": _stats(samples["warm"][1:]), "cold": _stats(samples["cold"][1:]),
            "peak_rss_mb": max(samples["peak"]), "ort_ms": _stats(_latency(out, name, options.runs))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp12,resnet50,bert-small,gpt2-small")
    parser.add_argument("--runs", type=int, default=5,
                        help="timed exports per exporter and mode (each in a fresh process, after an untimed one), "
                             "and timed ONNX Runtime runs (after 3 untimed)")
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "TOOL", "OUT", "WARM"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        name, tool, out, warm = options.child
        print(json.dumps(_child(name, tool, out, options.opset, warm == "warm")))
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in options.models.split(","):
            row: dict = {"model": name}
            for tool in ("onnxsight", "torch.onnx"):
                out = os.path.join(tmp, f"{name}-{tool}.onnx")
                row[tool] = _measure(name, tool, out, options)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"opset {options.opset}, ONNX Runtime CPU, 1 thread; export: median (min..max) of {options.runs} fresh "
          f"processes per exporter and mode after an untimed one; ORT: median (min..max) of {options.runs} runs")
    print(_table(rows))
    return 0


def _cell(ours: dict, theirs: dict, digits: int = 2) -> str:
    def one(x: dict) -> str:
        return f"{x['median']:.{digits}f} ({x['min']:.{digits}f}..{x['max']:.{digits}f})"
    return f"{one(ours)} / {one(theirs)}"


def _table(rows: list[dict]) -> str:
    lines = ["| model | export s (warm): onnxsight / torch.onnx | ratio | export s (cold): onnxsight / torch.onnx "
             "| ratio | peak RSS MB: onnxsight / torch.onnx | ORT ms: onnxsight / torch.onnx |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        ours, theirs = row.get("onnxsight", {}), row.get("torch.onnx", {})
        if "error" in ours or "error" in theirs:
            lines.append(f"| {row['model']} | {ours.get('error', '')} | | {theirs.get('error', '')} | | | |")
            continue
        ratio = {m: ours[m]["median"] / theirs[m]["median"] for m in ("warm", "cold")}
        lines.append(
            f"| {row['model']} | {_cell(ours['warm'], theirs['warm'])} | {ratio['warm']:.2f}x "
            f"| {_cell(ours['cold'], theirs['cold'])} | {ratio['cold']:.2f}x "
            f"| {ours['peak_rss_mb']:.0f} / {theirs['peak_rss_mb']:.0f} | {_cell(ours['ort_ms'], theirs['ort_ms'])} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
