"""Large-model benchmark: a model with more than 2 GB of weights, exported and saved with external data.

Measures, in fresh processes, the peak RSS above the model's own footprint for
onnxsight and for torch.onnx.export(dynamo=True): onnxsight streams weights
from the model's tensors to the data file, so it should need no second copy.

    python bench/large_model.py [--gb 2.2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def _child(tool: str, gb: float, out: str) -> dict:
    import torch

    width = 8192
    layers = max(1, round(gb * 1024**3 / (width * width * 4)))
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)]).eval()
    weights_mb = sum(p.numel() * 4 for p in model.parameters()) / 1024**2
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    x = torch.randn(1, width)
    if tool == "onnxsight":
        import onnxsight

        onnxsight.export(model, (x,)).save(out)  # external data chosen automatically above 2 GB
    else:
        program = torch.onnx.export(model, (x,), dynamo=True)
        program.save(out, external_data=True)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    files = {f: os.path.getsize(os.path.join(os.path.dirname(out), f)) for f in os.listdir(os.path.dirname(out))}
    return {"tool": tool, "weights_mb": round(weights_mb), "seconds": round(seconds, 2),
            "rss_before_mb": round(base), "peak_rss_mb": round(peak), "extra_mb": round(peak - base),
            "files_mb": {k: round(v / 1024**2) for k, v in files.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.2)
    parser.add_argument("--child", nargs=2, metavar=("TOOL", "OUT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(_child(options.child[0], options.gb, options.child[1])))
        return 0
    print("| exporter | weights MB | export+save s | RSS before MB | peak RSS MB | extra over model MB | files |")
    print("|---|---|---|---|---|---|---|")
    for tool in ("onnxsight", "torch.onnx"):
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, __file__, "--gb", str(options.gb), "--child", tool,
                                   os.path.join(tmp, "large.onnx")], capture_output=True, text=True)
            if proc.returncode:
                print(f"| {tool} | failed: {(proc.stderr.strip().splitlines() or ['?'])[-1][:120]} | | | | | |")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"| {tool} | {r['weights_mb']} | {r['seconds']} | {r['rss_before_mb']} | {r['peak_rss_mb']} | "
                  f"{r['extra_mb']} | {r['files_mb']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
