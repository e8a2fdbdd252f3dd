"""Export benchmark: onnxsight vs torch.onnx.export(dynamo=True), same models, same run.

Each (model, exporter) pair runs in a fresh process so peak RSS is its own,
and both exporters target the same opset. Prints, per model: export wall time
("warm": the libraries both exporters load lazily on first use -- torch.export's
tracer, onnxscript -- are imported before timing, so it is the cost of one
export; "cold": the first export in a fresh process, imports included), peak
RSS, and the ONNX Runtime latency of each exported model.

    python bench/export.py [--models mlp12,resnet50] [--runs 20] [--opset 18]
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


def _latency(path: str, model_name: str, runs: int) -> float:
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
    return statistics.median(times) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp12,resnet50,bert-small,gpt2-small")
    parser.add_argument("--runs", type=int, default=20)
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
                for mode in ("cold", "warm"):
                    proc = subprocess.run([sys.executable, __file__, "--opset", str(options.opset), "--child", name,
                                           tool, out, mode], capture_output=True, text=True)
                    if proc.returncode != 0:
                        row[tool] = {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:160]}
                        break
                    result = json.loads(proc.stdout.strip().splitlines()[-1])
                    row.setdefault(tool, {}).update(result if mode == "warm" else {"cold_seconds": result["seconds"]})
                if "error" not in row[tool]:
                    row[tool]["ort_ms"] = _latency(out, name, options.runs)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"opset {options.opset}, ONNX Runtime CPU, 1 thread, median of {options.runs} runs")
    print(_table(rows))
    return 0


def _table(rows: list[dict]) -> str:
    lines = ["| model | export s (warm): onnxsight / torch.onnx | ratio | export s (cold): onnxsight / torch.onnx "
             "| ratio | peak RSS MB: onnxsight / torch.onnx | ORT ms: onnxsight / torch.onnx |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        ours, theirs = row.get("onnxsight", {}), row.get("torch.onnx", {})
        if "error" in ours or "error" in theirs:
            lines.append(f"| {row['model']} | {ours.get('error', '')} | | {theirs.get('error', '')} | | | |")
            continue
        lines.append(
            f"| {row['model']} | {ours['seconds']:.2f} / {theirs['seconds']:.2f} | "
            f"{ours['seconds'] / theirs['seconds']:.2f}x | {ours['cold_seconds']:.2f} / {theirs['cold_seconds']:.2f} | "
            f"{ours['cold_seconds'] / theirs['cold_seconds']:.2f}x | {ours['peak_rss_mb']:.0f} / "
            f"{theirs['peak_rss_mb']:.0f} | {ours['ort_ms']:.2f} / {theirs['ort_ms']:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
