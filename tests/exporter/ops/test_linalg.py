"""Matrix products, driven by OpInfo samples, and the cases they do not reach."""

from __future__ import annotations

import pytest
import torch

import onnxsight
from tests.exporter.ops.eager_check import FunctionModule as Fn
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


@pytest.mark.parametrize("op, shapes", [
    (torch.baddbmm, ((2, 3, 5), (2, 3, 4), (2, 4, 5))),
    (torch.addbmm, ((3, 5), (2, 3, 4), (2, 4, 5))),
], ids=["baddbmm", "addbmm"])  # (addmm's and addmv's meta kernels guard on beta == 0: torch.export refuses them)
def test_alpha_and_beta_given_as_tensors(op, shapes: tuple) -> None:  # noqa: ANN001 - a torch function
    """alpha/beta as 0-d tensors (PyTorch's test_baddbmm_dynamic) are symbolic numbers in the graph: multiplied
    in when the model runs, and beta == 0 still ignores self (its NaNs included), as eager does."""
    module = Fn(lambda s, a, b, alpha, beta: op(s, a, b, alpha=alpha, beta=beta))
    tensors = [torch.randn(shape) for shape in shapes]
    program = onnxsight.export(module, (*tensors, torch.tensor(5), torch.tensor(3.5)))
    nan_self = torch.full(shapes[0], float("nan"))
    for self, alpha, beta in ((tensors[0], torch.tensor(5), torch.tensor(3.5)),
                              (tensors[0], torch.tensor(-2), torch.tensor(1.0)),
                              (nan_self, torch.tensor(3), torch.tensor(0.0))):
        args = (self, *tensors[1:], alpha, beta)
        torch.testing.assert_close(program(*args)[0], module(*args))
