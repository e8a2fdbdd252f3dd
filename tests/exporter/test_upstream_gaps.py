"""PyTorch's export tests that torch.onnx passed and onnxsight did not (issue 34): each, as upstream wrote it,
passes with both exporters (tests/exporter/upstream_gaps.py runs them)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.exporter.upstream_gaps import CASES, Case, run_case

TORCH_ONNX = importlib.util.find_spec("onnxscript") is not None  # torch.onnx's dynamo exporter needs it
NOT_YET = {c.name for c in CASES} - {"test_mixed_optional", "test_scatter_reduce_self_rank_zero",
                                   "test_slice_dynamic", "test_embedding_bag", "test_multinomial",
                                   "test_embedding_renorm", "test_baddbmm_dynamic",
                                   "test_export_sym_float",
                                   "test_export_successful_when_dynamic_dimension_is_one",
                                   "test_squeeze_all_dims"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True)) if c.name in NOT_YET else c
                                  for c in CASES], ids=lambda c: c.name)
def test_onnxsight_passes_the_upstream_case(case: Case) -> None:
    outcome = run_case(case, "onnxsight")
    assert outcome.status == "passed", f"{case.name}: {outcome.status}: {outcome.detail}"


@pytest.mark.skipif(not TORCH_ONNX, reason="torch.onnx's exporter needs onnxscript")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_torch_onnx_passes_the_upstream_case(case: Case) -> None:
    outcome = run_case(case, "torch.onnx")
    assert outcome.status == "passed", f"{case.name}: {outcome.status}: {outcome.detail}"
