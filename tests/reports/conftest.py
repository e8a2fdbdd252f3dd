"""A hand-made run record with a hostile string in every field the model or user controls."""

from __future__ import annotations

from typing import Any

import pytest

from onnxsight.reports._record import RunRecord

HOSTILE = '<script>__pwned=1</script>"\'&|`*_[x](y)'


def diagnostic(code: str, level: str, message: str, **extra: Any) -> dict[str, Any]:
    row = {"rule": code, "rule_name": f"name-of-{code.lower()}", "level": level, "message": message,
           "fields": {}, "location": {"file": f"/src/{HOSTILE}.py", "line": 12, "function": HOSTILE,
                                      "code": f"y = {HOSTILE}"},
           "related": [], "stack": [], "module_path": f"encoder.{HOSTILE}", "properties": {"fx_node": HOSTILE},
           "fix": f"Fix it: {HOSTILE}", "snippet": [[11, "x = 1"], [12, f"y = {HOSTILE}  ```"], [13, "z = 3"]]}
    row.update(extra)
    return row


def hostile_record() -> RunRecord:
    nodes = [{"index": i, "value": f"v{i}{HOSTILE}", "target": "aten.add.Tensor", "max_abs_diff": d,
              "max_rel_diff": d, "passed": d is None or isinstance(d, float) and d < 1e-3,
              "root_cause": i == 3} for i, d in enumerate([1e-7, 2e-7, None, 0.5, "inf", 0.9])]
    verification = {"passed": False, "mode": "propagated", "providers": ["CPUExecutionProvider"], "reference": "torch",
                    "error": "", "nodes_compared": 6, "nodes_failed": 3,
                    "outputs": [{"output": f"out{HOSTILE}", "value": f"out{HOSTILE}", "dtype": "float32",
                                 "shape": [2, "batch"], "max_abs_diff": 0.9, "max_rel_diff": "inf",
                                 "mismatch_fraction": 0.5, "cosine": 0.99, "passed": False}],
                    "root_causes": [{"value": f"v3{HOSTILE}", "fx_node": HOSTILE, "target": "aten.add.Tensor",
                                     "onnx_op": "Add", "max_abs_diff": 0.5, "max_rel_diff": 0.1,
                                     "file": f"/src/{HOSTILE}.py", "line": 12}],
                    "worst_nodes": [dict(nodes[5], onnx_op="Add")], "nodes": nodes}
    return RunRecord(
        model=f"Model{HOSTILE}", created="2025-01-01T00:00:00+00:00", status="export failed", opset=18,
        error={"type": "TranslationError", "stage": "translate", "summary": f"could not translate {HOSTILE}"},
        stages=[{"name": "arguments", "status": "ok", "seconds": 0.01, "detail": ""},
                {"name": "capture", "status": "ok", "seconds": 1.5, "detail": ""},
                {"name": "decompose", "status": "ok", "seconds": 0.2, "detail": ""},
                {"name": "translate", "status": "failed", "seconds": 0.1, "detail": f"ValueError: {HOSTILE}"}],
        attempts=[{"strategy": "torch.export(strict=False)", "success": True, "seconds": 1.5, "error_type": None,
                   "error": None, "rule": None}],
        diagnostics=[diagnostic("OPS001", "error", f"custom operator my.{HOSTILE} has no ONNX translation",
                                fields={"op": f"my.{HOSTILE}"}),
                     diagnostic("CAP001", "warning", f"strategy failed: {HOSTILE}"),
                     diagnostic("VAL005", "note", "a constant was baked")],
        unsupported=[{"op": f"my.{HOSTILE}", "count": 2, "rule": "OPS001",
                      "first_location": {"file": f"/src/{HOSTILE}.py", "line": 12, "code": f"y = {HOSTILE}"}}],
        facts={"opset": 18, "parameters": {"float32": {"tensors": 2, "elements": 10, "bytes": 40}},
               "buffers": {"int64": {"tensors": 1, "elements": 3, "bytes": 24}},
               "inputs": [{"name": f"in{HOSTILE}", "dtype": "float32", "shape": ["batch", 4]}],
               "outputs": [{"name": f"out{HOSTILE}", "dtype": "float32", "shape": None}],
               "aten_ops": {"aten.add.Tensor": 3, f"my.{HOSTILE}": 2, "aten.mul.Tensor": 1},
               "onnx_ops": {"Add": 3}, "onnx_size": 2048, "onnx_nodes": 3},
        environment={"python": "3.11", "torch": "2.13", "providers": ["CPUExecutionProvider"]},
        verification=verification,
        program_text=f"def forward(self, x):\n    # {HOSTILE}\n    ```\n    return x",
        files={"markdown": f"M{HOSTILE}_report.md"})


@pytest.fixture
def record() -> RunRecord:
    return hostile_record()
