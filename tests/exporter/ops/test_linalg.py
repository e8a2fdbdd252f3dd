"""Matrix products, driven by OpInfo samples, and the cases they do not reach."""

from __future__ import annotations

import pytest
import torch

from tests.exporter.ops.nn_checks import export_and_compare
from tests.exporter.ops.opinfo_harness import assert_op_passes

OPS = ["nn.functional.linear", "mm", "bmm", "addmm", "addmm.decomposed", "addmv", "addbmm", "baddbmm", "matmul",
       "dot", "mv", "inner", "outer", "vdot", "addr", "nn.functional.bilinear", "linalg.multi_dot"]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (2, 2, 3, 4)])
def test_linear_n_d(shape: tuple[int, ...]) -> None:
    ops = export_and_compare(lambda x, w, b: torch.nn.functional.linear(x, w, b),
                             torch.randn(shape), torch.randn(5, 4), torch.randn(5))
    assert ("Gemm" in ops) == (len(shape) == 2)


def test_linear_without_bias() -> None:
    export_and_compare(lambda x, w: torch.nn.functional.linear(x, w), torch.randn(2, 3, 4), torch.randn(5, 4))


def test_addmm_beta_zero_ignores_nan_self() -> None:
    self = torch.full((3, 5), float("nan"))
    ops = export_and_compare(lambda s, a, b: torch.addmm(s, a, b, beta=0, alpha=2.0), self, torch.randn(3, 4),
                             torch.randn(4, 5))
    assert ops.count("Gemm") == 1


def test_matmul_is_one_matmul() -> None:
    ops = export_and_compare(torch.matmul, torch.randn(2, 1, 3, 4), torch.randn(5, 4, 6))
    assert ops == ["MatMul"]


def test_baddbmm_scaled() -> None:
    export_and_compare(lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=3), torch.randn(2, 3, 5),
                       torch.randn(2, 3, 4), torch.randn(2, 4, 5))
