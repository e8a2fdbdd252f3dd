'''The two human-facing files of a repro bundle: ``repro.py`` (standalone) and ``README.md``.'''

from __future__ import annotations

from typing import Any, Mapping

_SCRIPT = '''"""Reproduce one divergence found by onnxsight.verify, with ONNX Runtime only.

Runs model.onnx on test_data_set_0/input_*.pb and compares each output with
test_data_set_0/output_*.pb (what PyTorch computed from the same inputs).
Needs only onnx, onnxruntime and numpy. Exits 1 while the outputs differ.

    python repro.py [--providers CUDAExecutionProvider,CPUExecutionProvider]
"""

import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ATOL, RTOL = {atol!r}, {rtol!r}


def load(path):
    tensor = onnx.TensorProto()
    with open(path, "rb") as handle:
        tensor.ParseFromString(handle.read())
    return numpy_helper.to_array(tensor)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="CPUExecutionProvider")
    options = parser.parse_args()
    model = onnx.load(os.path.join(HERE, "model.onnx"))
    data = os.path.join(HERE, "test_data_set_0")
    feeds = {{info.name: load(os.path.join(data, "input_%d.pb" % i)) for i, info in enumerate(model.graph.input)}}
    # TF32 off, as verification ran it: an Ampere+ GPU's default float32 math is ~1e-3 off otherwise
    providers = [(p, {{"use_tf32": "0"}}) if p == "CUDAExecutionProvider" else p for p in options.providers.split(",")]
    session = ort.InferenceSession(model.SerializeToString(), providers=providers)
    outputs = session.run(None, feeds)
    diverges = False
    for i, (info, actual) in enumerate(zip(model.graph.output, outputs)):
        expected = load(os.path.join(data, "output_%d.pb" % i))
        if actual.shape != expected.shape:
            print("%s: shape %s, expected %s" % (info.name, list(actual.shape), list(expected.shape)))
            diverges = True
            continue
        a, e = actual.astype(np.float64), expected.astype(np.float64)
        diff = np.abs(a - e)
        finite = diff[np.isfinite(diff)]
        bad = ~np.isclose(a, e, atol=ATOL, rtol=RTOL, equal_nan=True)
        print("%s: max abs diff %.6g, %d of %d elements outside atol=%g rtol=%g"
              % (info.name, finite.max() if finite.size else 0.0, int(bad.sum()), bad.size, ATOL, RTOL))
        diverges = diverges or bool(bad.any())
    print("DIVERGES from PyTorch" if diverges else "matches PyTorch")
    return 1 if diverges else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def script(atol: float, rtol: float) -> str:
    """The bundle's ``repro.py``, judging with the tolerance verification used."""
    return _SCRIPT.format(atol=atol, rtol=rtol)


def readme(info: Mapping[str, Any]) -> str:
    """The bundle's ``README.md``: what diverges, where it comes from, how to run it."""
    where = f"{info['file']}:{info['line']}" if info.get("file") else "unknown"
    lines = [
        f"# Repro: `{info['value']}` diverges from PyTorch", "",
        f"- value: `{info['value']}` ({info.get('onnx_op') or 'ONNX value'}, from `{info.get('target') or '?'}`)",
        f"- FX node: `{info.get('fx_node') or '?'}`, user line: `{where}`",
        f"- max abs diff in verification: {info.get('max_abs_diff')}",
    ]
    if "onnx_nodes" in info:
        grown = "the root-cause node group alone" if not info.get("level") else \
            f"grown {info['level']} level(s) of producers"
        state = "diverges" if info.get("reproduced") else "does NOT diverge on its own (see verification)"
        lines.append(f"- subgraph: {info['onnx_nodes']} ONNX node(s), {grown}, fed PyTorch's values; "
                     f"standalone it {state} (max abs diff {info.get('max_abs_diff_standalone', '?')})")
    lines += ["", "| ONNX node | op | FX node | user line |", "|---|---|---|---|"]
    for node in info.get("nodes", ()):
        line = f"{node['file']}:{node['line']}" if node.get("file") else ""
        lines.append(f"| {node['onnx_node']} | {node['op_type']} | {node.get('fx_node') or ''} | {line} |")
    lines += ["", "Inputs (`test_data_set_0/input_N.pb`, ONNX TensorProtos): "
              + ", ".join(f"`{n}`" for n in info.get("inputs", ())) + ".",
              "The expected output (`output_0.pb`) is PyTorch's value.", "",
              "```", "python repro.py            # prints the difference; exits 1 while it diverges", "```", ""]
    return "\n".join(lines)
