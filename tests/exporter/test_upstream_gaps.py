"""PyTorch's export tests that torch.onnx passed and onnxsight did not (issue 34): each, as upstream wrote it,
passes with both exporters (tests/exporter/upstream_gaps.py runs them)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.exporter.upstream_gaps import CASES, Case, run_case

TORCH_ONNX = importlib.util.find_spec("onnxscript") is not None  # torch.onnx's dynamo exporter needs it


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_onnxsight_passes_the_upstream_case(case: Case) -> None:
    outcome = run_case(case, "onnxsight")
    assert outcome.status == "passed", f"{case.name}: {outcome.status}: {outcome.detail}"


@pytest.mark.skipif(not TORCH_ONNX, reason="torch.onnx's exporter needs onnxscript")
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_torch_onnx_passes_the_upstream_case(case: Case) -> None:
    outcome = run_case(case, "torch.onnx")
    assert outcome.status == "passed", f"{case.name}: {outcome.status}: {outcome.detail}"
