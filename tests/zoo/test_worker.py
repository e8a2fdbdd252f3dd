"""The worker's record of one model, run in-process (the supervisor runs the same in a child process)."""

from __future__ import annotations

import os

from onnxsight.zoo._worker import run_model

HERE = os.path.dirname(os.path.abspath(__file__))


def _task(suite: str, model: str, tmp_path) -> dict:
    return {"model": model, "suite": suite, "model_dir": str(tmp_path), "providers": ["CPUExecutionProvider"],
            "per_node": True, "opset": None, "source": {}}


def test_passing_model_record(tmp_path) -> None:
    result = run_model(_task("smoke", "mlp", tmp_path))
    assert (result.status, result.stage) == ("passed", "done")
    assert set(result.timings) == {"build", "eager", "export", "save", "run", "verify"}
    assert [s["name"] for s in result.export_stages][:2] == ["arguments", "capture"]
    assert result.op_counts["Gemm"] == 2 and result.node_count >= 3
    assert result.onnx_bytes == os.path.getsize(tmp_path / "model.onnx")
    assert result.max_abs_diff < 1e-5 and result.outputs_compared == 1 and result.reference_max_abs > 0
    assert result.verification["passed"] is True and result.peak_mb > 0
    assert (tmp_path / "stage").read_text() == "done"


def test_failed_export_names_the_op(tmp_path) -> None:
    result = run_model(_task(os.path.join(HERE, "suites", "unsupported.py"), "custom_op", tmp_path))
    assert (result.status, result.stage) == ("failed", "export")
    assert result.failing_ops == ["zootest.twice.default"] or "zootest" in result.failing_ops[0]
    assert result.root_cause["rule"] == "OPS001"
    assert result.onnx_bytes is None and "export" in result.timings
