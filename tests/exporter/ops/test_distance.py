"""cdist and pdist (_cdist_forward, _pdist_forward): broadcast differences reduced by the p-norm."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.exporter.ops.nn_checks import export_and_compare
from tests.exporter.ops.opinfo_harness import assert_op_passes

OPINFO_OPS = ["cdist", "nn.functional.pdist"]


@pytest.mark.parametrize("name", OPINFO_OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name, limit=12)


P_VALUES = [0.0, 1.0, 2.0, 3.0, 0.5, 1.5, math.inf]


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                  "donot_use_mm_for_euclid_dist"])
def test_cdist(p: float, mode: str) -> None:
    torch.manual_seed(0)
    x1, x2 = torch.randn(2, 30, 4), torch.randn(2, 27, 4)
    x1[:, 0] = 0  # a zero coordinate difference for p=0
    x2[:, 0] = 0
    export_and_compare(lambda a, c: torch.cdist(a, c, p=p, compute_mode=mode), x1, x2)


def test_cdist_broadcast_batch() -> None:
    export_and_compare(lambda a, c: torch.cdist(a, c), torch.randn(3, 1, 5, 4), torch.randn(1, 2, 6, 4))


def test_cdist_identical_points() -> None:
    """Where the matmul formula would cancel: the distance of a point to itself is 0."""
    x = torch.randn(8, 16) * 100
    export_and_compare(lambda a: torch.cdist(a, a, compute_mode="donot_use_mm_for_euclid_dist"), x)


@pytest.mark.parametrize("p", P_VALUES)
def test_pdist(p: float) -> None:
    torch.manual_seed(0)
    export_and_compare(lambda a: F.pdist(a, p=p), torch.randn(7, 3))


@pytest.mark.parametrize("opset", [17, 23])
def test_distance_opsets(opset: int) -> None:
    export_and_compare(lambda a, c: torch.cdist(a, c, p=math.inf), torch.randn(5, 3), torch.randn(4, 3), opset=opset)
    export_and_compare(lambda a: F.pdist(a, p=2.0), torch.randn(5, 3), opset=opset)


def test_pdist_dynamic_rows() -> None:
    x = torch.randn(6, 3)
    rows = torch.export.Dim("rows", min=3)  # at 2 rows pdist has 1 element, which torch.export guards against
    ops = export_and_compare(lambda a: F.pdist(a), x, dynamic_shapes=(({0: rows},),))
    assert "Compress" in ops
