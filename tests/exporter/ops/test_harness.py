"""The OpInfo harness itself: its comparison, tolerance table, exporters and sweep bookkeeping."""

from __future__ import annotations

import argparse
import json

import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tests.exporter.ops import coverage, exporters, op_tolerances, parity_report
from tests.exporter.ops.opinfo_harness import check_exported, check_op, compare, opinfo_table, prepare, samples
from tests.exporter.ops.op_tolerances import DTYPE_TOLERANCES, OVERRIDES, tolerance_for


@pytest.mark.parametrize("dtype, relative_error, passes", [
    (torch.float32, 9e-4, False),     # 0.09% off: rtol 1e-3 let this pass
    (torch.float32, 1e-5, False),
    (torch.float32, 1e-6, True),      # within torch.testing's rtol 1.3e-6
    (torch.float32, 0.0, True),
    (torch.float64, 1e-6, False),
    (torch.float16, 2e-3, False),
    (torch.float16, 4e-4, True),
    (torch.bfloat16, 3e-2, False),
    (torch.bfloat16, 0.0, True),
])
def test_relative_error_against_torch_testing_defaults(dtype: torch.dtype, relative_error: float,
                                                       passes: bool) -> None:
    want = torch.linspace(10.0, 20.0, 16).to(dtype)    # |want| >= 10: atol plays no part
    got = (want.double() * (1 + relative_error)).to(dtype)
    problem = compare(want, got)
    assert (problem == "") is passes, problem
    if not passes:
        assert "max rel diff" in problem and f"rtol {DTYPE_TOLERANCES[dtype].rtol:g}" in problem


@pytest.mark.parametrize("want, got, fragment", [
    (torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), "1 of 3 elements differ"),
    (torch.tensor([True, False]), torch.tensor([True, True]), "1 of 2 elements differ"),
    (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0, 3.0]), "shape (3,), expected (2,)"),
    (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.0], dtype=torch.float64), "dtype torch.float64"),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 0.0]), "1 of 2 elements differ"),
    (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), ""),
    (torch.tensor([7, -1]), torch.tensor([7, -1]), ""),
    (torch.tensor([1 + 2j]), torch.tensor([[1.0, 2.0]]), ""),                       # real pairs for complex
])
def test_compare_cases(want: torch.Tensor, got: torch.Tensor, fragment: str) -> None:
    problem = compare(want, got)
    assert (fragment in problem) if fragment else problem == ""


def test_defaults_are_torch_testings() -> None:
    from torch.testing._comparison import _DTYPE_PRECISIONS

    for dtype, tolerance in DTYPE_TOLERANCES.items():
        assert (tolerance.rtol, tolerance.atol) == _DTYPE_PRECISIONS[dtype], dtype
    assert tolerance_for("add", torch.int64) == op_tolerances.EXACT


@pytest.mark.parametrize("op", sorted(OVERRIDES) or ["(none)"])
def test_overrides_name_real_ops_and_say_why(op: str) -> None:
    if op == "(none)":
        pytest.skip("no overrides: every op is held to torch.testing's defaults")
    override = OVERRIDES[op]
    assert op in opinfo_table(), f"{op} is no OpInfo op"
    assert len(override.reason.split()) >= 8, f"{op}: the reason must say why, got {override.reason!r}"
    for dtype in override.dtypes or (torch.float32,):
        base = DTYPE_TOLERANCES[dtype]
        assert (override.tolerance.rtol, override.tolerance.atol) > (base.rtol, base.atol), op
        assert tolerance_for(op, dtype) != base


def _scaled_model(scale: float, dtype: int = TensorProto.FLOAT) -> onnx.ModelProto:
    """``x * scale``: a translation that is off by ``scale - 1``."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["y"])], "g",
        [helper.make_tensor_value_info("x", dtype, None)], [helper.make_tensor_value_info("y", dtype, None)],
        [helper.make_tensor("s", dtype, [], [scale] if dtype != TensorProto.BFLOAT16 else
                            [int(torch.tensor(scale, dtype=torch.bfloat16).view(torch.int16))])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("scale, dtype, status", [
    (1.0009, torch.float32, "mismatch"),
    (1.0, torch.float32, "passed"),
    (1.0, torch.bfloat16, "no-kernel"),     # ONNX Runtime's CPU provider has no bfloat16 Mul
])
def test_a_translation_off_by_0_09_percent_fails(monkeypatch: pytest.MonkeyPatch, scale: float,
                                                  dtype: torch.dtype, status: str) -> None:
    onnx_dtype = {torch.float32: TensorProto.FLOAT, torch.bfloat16: TensorProto.BFLOAT16}[dtype]
    monkeypatch.setitem(exporters.EXPORTERS, "fake", lambda module, tensors, opset: (
        _scaled_model(scale, onnx_dtype), ["x"]))
    info = opinfo_table()["abs"]
    prepared = prepare(info, next(samples(info, 1, dtype)))
    assert not isinstance(prepared, str)
    prepared.expected = list(prepared.tensors)    # what a model computing x * 1 gives
    result = check_exported("abs", 0, prepared, exporter="fake")
    assert result.status == status, result.detail


@pytest.mark.parametrize("exporter", ["onnxsight", "torch.onnx"])
def test_each_exporter_runs_one_op(exporter: str) -> None:
    results = check_op("abs", limit=2, exporter=exporter)
    assert results and [r.status for r in results] == ["passed"] * len(results), results
    assert all(r.exporter == exporter and r.seconds > 0 for r in results)


def test_samples_are_the_same_for_every_call() -> None:
    info = opinfo_table()["add"]
    first, second = (next(samples(info, 1, torch.float32)).input for _ in range(2))
    assert torch.equal(first, second)


RESULT = {
    "settings": {"exporters": ["onnxsight", "torch.onnx"]},
    "ops": {
        "a": {"float32": {"onnxsight": {"status": "passed"}, "torch.onnx": {"status": "failed", "detail": "x"}}},
        "b": {"float32": {"onnxsight": {"status": "no-kernel"}, "torch.onnx": {"status": "passed"}},
              "float16": {"onnxsight": {"status": "passed"}, "torch.onnx": {"status": "passed"}}},
        "c": {"float32": {"onnxsight": {"status": "error"}, "torch.onnx": {"status": "not-attempted"}}},
        "d": {"float32": {"onnxsight": {"status": "passed"}, "torch.onnx": {"status": "not-run"}}},
    },
}


def test_summary_counts_each_status_once() -> None:
    summary = coverage.summarize(RESULT["ops"], ["onnxsight", "torch.onnx"], ["float32", "float16"])
    assert summary["float32"]["onnxsight"] == {"passed": 2, "failed": 1, "attempted": 3, "no_kernel": 1,
                                               "not_attempted": 0, "coverage": 0.6667}
    assert summary["float32"]["torch.onnx"]["coverage"] == 0.5
    assert summary["float16"]["torch.onnx"] == {"passed": 1, "failed": 0, "attempted": 1, "no_kernel": 0,
                                                "not_attempted": 0, "coverage": 1.0}


def test_a_stopped_sweep_compares_only_the_ops_both_ran() -> None:
    assert "d" not in parity_report.common_ops(RESULT) and "a" in parity_report.common_ops(RESULT)
    assert parity_report.not_run(RESULT) == {"float32": {"torch.onnx": 1}}
    result = dict(RESULT, settings=dict(RESULT["settings"], dtypes=["float32", "float16"]),
                  summary=coverage.summarize(RESULT["ops"], ["onnxsight", "torch.onnx"], ["float32", "float16"]))
    table = "\n".join(parity_report.summary_section(result))
    assert "| float32 | 1 / 2 (50.0%) | 1 / 2 (50.0%) |" in table and "torch.onnx 1 ops not run" in table


def test_only_one_exporter_passes() -> None:
    assert [r[:2] for r in parity_report.only_one(RESULT, "onnxsight", "torch.onnx")] == [("a", "float32")]
    assert [r[:2] for r in parity_report.only_one(RESULT, "torch.onnx", "onnxsight")] == [("b", "float32")]


@pytest.mark.slow
def test_sweep_writes_one_json_for_both_exporters(tmp_path) -> None:
    out, page = tmp_path / "parity.json", tmp_path / "parity.md"
    assert coverage.main(["--exporter", "both", "--dtypes", "float32,int64", "--filter", "bitwise_not",
                          "--limit", "1", "--out", str(out), "--markdown", str(page)]) == 0
    result = json.loads(out.read_text())
    assert result["ops"]["bitwise_not"]["int64"].keys() == {"onnxsight", "torch.onnx"}
    assert result["summary"]["int64"]["onnxsight"]["passed"] == 1
    assert "| int64 | 1 / 1 (100.0%) | 1 / 1 (100.0%)" in page.read_text()


def test_bfloat16_goes_in_and_comes_out_of_onnx_runtime() -> None:
    """InferenceSession.run cannot return bfloat16 (numpy has none): the runner must, for both exporters."""
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16),
         helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = torch.tensor([1.0, 3.14159, -2.5e-3])
    y, z = exporters.run_onnx(model, ["x"], (x,))
    assert y.dtype == torch.bfloat16 and torch.equal(y, x.bfloat16())
    assert torch.equal(z, x.bfloat16().float())


def test_a_stop_file_records_the_ops_not_begun_as_not_run(tmp_path) -> None:
    stop, out = tmp_path / "STOP", tmp_path / "records.jsonl"
    stop.write_text("")
    options = argparse.Namespace(
        jsonl=str(out), ops="add,sub", exporter="onnxsight", dtypes="float32", limit=1, opset=18,
        stop_file=str(stop))
    assert coverage.worker(options) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["op"], r["status"]) for r in records] == [("add", "not-run"), ("sub", "not-run")]


def test_uninitialised_outputs_are_compared_by_shape_and_dtype_only() -> None:
    """``empty_like``'s bytes are whatever memory held: comparing them passed or failed by chance."""
    garbage, other = torch.full((5, 5), 4.5e14), torch.zeros(5, 5)
    assert compare(garbage, other, op="empty_like") == ""
    assert compare(garbage, torch.zeros(5, 4), op="empty_like").startswith("shape")
    assert compare(garbage, other.double(), op="new_empty").startswith("dtype")
    assert compare(garbage, other, op="zeros_like") != ""
