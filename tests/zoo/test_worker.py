"""The worker's record of one model, run in-process (the supervisor runs the same in a child process)."""

from __future__ import annotations

import os

import pytest

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


@pytest.mark.parametrize("model", ["counter", "reads_global", "inf_then_finite"])
def test_export_that_differs_from_eager_fails_with_acc007(model: str, tmp_path) -> None:
    result = run_model(_task(os.path.join(HERE, "suites", "eager_mismatch.py"), model, tmp_path))
    assert (result.status, result.stage) == ("failed", "done")
    assert result.verification["passed"] is True          # ONNX matches the exported program...
    assert result.root_cause["rule"] == "ACC007"            # ...which is not what forward() computes
    message = result.root_cause["message"]
    assert "not what your model computes eagerly" in message and "output" in message
    assert result.root_cause["file"].endswith("eager_mismatch.py")


def test_inf_difference_is_named(tmp_path) -> None:
    result = run_model(_task(os.path.join(HERE, "suites", "eager_mismatch.py"), "inf_then_finite", tmp_path))
    assert "inf" in result.root_cause["message"]
    assert result.max_abs_diff == float("inf")              # recorded as inf, not as the largest float


def test_faithful_stateful_model_passes(tmp_path) -> None:
    result = run_model(_task(os.path.join(HERE, "suites", "eager_mismatch.py"), "buffer_state", tmp_path))
    assert result.status == "passed" and result.root_cause is None
    assert not [d for d in result.diagnostics if d["rule"] == "ACC007"]


@pytest.mark.parametrize("model, scale", [("vanishing", "e-25"), ("all_zero", "largest |value| 0 "), ("empty", "no values")])
def test_degenerate_eager_outputs_fail_with_zoo005(model: str, scale: str, tmp_path) -> None:
    """Eager outputs below the tolerance's atol make any export match: the model fails, it does not pass."""
    result = run_model(_task(os.path.join(HERE, "suites", "degenerate.py"), model, tmp_path))
    assert (result.status, result.stage) == ("failed", "eager")
    assert [d["rule"] for d in result.diagnostics] == ["ZOO005"]
    assert result.root_cause["rule"] == "ZOO005" and result.root_cause["file"].endswith("degenerate.py")
    assert scale in result.root_cause["message"]


def test_small_but_meaningful_outputs_pass(tmp_path) -> None:
    result = run_model(_task(os.path.join(HERE, "suites", "degenerate.py"), "small_but_real", tmp_path))
    assert result.status == "passed" and 1e-3 < result.reference_max_abs < 1e-1


def test_rounding_only_failure_passes_against_the_float64_noise_floor(tmp_path) -> None:
    """16 matmul layers miss a 1e-7 tolerance on rounding alone: the worker judges them again against
    PyTorch's own float32 error and passes them, saying so (ZOO006) with the float32 first divergence."""
    result = run_model(_task(os.path.join(HERE, "suites", "rounding.py"), "deep_tight", tmp_path))
    assert result.status == "passed", result.diagnostics
    notes = [d for d in result.diagnostics if d["rule"] == "ZOO006"]
    assert len(notes) == 1 and "aten.linear.default -> Gemm" in notes[0]["message"]
    assert notes[0]["location"]["file"].endswith("rounding.py")
    assert result.verification["passed"] is True and result.verification["info"]["noise_floor"] == "float64"
    assert not [d for d in result.diagnostics if d["rule"] in ("ACC001", "ACC002")]


def test_wrong_translation_still_fails_beyond_the_noise_floor(tmp_path) -> None:
    result = run_model(_task(os.path.join(HERE, "suites", "rounding.py"), "approximate_gelu", tmp_path))
    assert result.status == "failed"
    assert result.root_cause["rule"] == "ACC002" and "gelu" in result.root_cause["message"]
    assert not [d for d in result.diagnostics if d["rule"] == "ZOO006"]
    assert result.verification["info"]["noise_floor"] is None
