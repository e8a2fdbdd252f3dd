"""4-bit weights: file size of torchao's int4 weight-only models, and ONNX Runtime latency of the fused form.

An MLP (Linear 1024 -> 4096 -> 1024, ReLU) quantized with ``IntxWeightOnlyConfig(weight_dtype=torch.int4)``,
per group of 32 and per channel, exported by onnxsight; per model the saved file's size at opset 21 (INT4
initializers, two a byte) and, per channel, at opset 20 (no INT4 in ONNX before 21: int8 initializers), and
ONNX Runtime CPU latency (1 thread, batch 16) of the opset-21 model: the default session (ORT_ENABLE_ALL,
MatMulNBits where the group-wise weights fuse) and one whose MatMulNBits computes in float32
(``session.qdq_matmulnbits_accuracy_level=1``), with the largest output difference from eager.
Median and spread (min..max) of ``--runs`` timed runs after an untimed warm-up.

    python bench/int4_weights.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from typing import Any

import numpy as np
import torch


def _model(granularity: str) -> torch.nn.Module:
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).eval()
    quantize_(model, IntxWeightOnlyConfig(weight_dtype=torch.int4,
                                          granularity=PerGroup(32) if granularity == "group32" else PerAxis(0)))
    return model


def _size(model: torch.nn.Module, x: torch.Tensor, opset: int, folder: str) -> tuple[int, str]:
    import onnxsight

    path = os.path.join(folder, f"m{opset}.onnx")
    onnxsight.export(model, (x,), opset_version=opset).save(path)
    return os.path.getsize(path), path


def _latency(path: str, x: torch.Tensor, expected: np.ndarray, runs: int, level: str | None) -> dict[str, Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    if level is not None:
        options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", level)
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    feed = {session.get_inputs()[0].name: x.numpy()}
    out = session.run(None, feed)[0]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "max_abs_diff": float(np.abs(out - expected).max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    x = torch.randn(16, 1024)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for granularity in ("group32", "channel"):
            model = _model(granularity)
            expected = model(x).detach().numpy()
            row: dict[str, Any] = {"granularity": granularity}
            row["opset21_bytes"], path = _size(model, x, 21, folder)
            if granularity == "channel":
                row["opset20_bytes"], _ = _size(model, x, 20, folder)
            row["default_session"] = _latency(path, x, expected, args.runs, None)
            row["float32_matmulnbits"] = _latency(path, x, expected, args.runs, "1")
            rows.append(row)
            print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
