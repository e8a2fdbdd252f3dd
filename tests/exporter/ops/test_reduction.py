"""Reductions: OpInfo samples (float32), then dtypes, dims, keepdim and NaN handling by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.exporter.ops.eager_check import assert_matches_eager
from tests.exporter.ops.opinfo_harness import assert_op_passes

OPS = [
    "sum", "nansum", "mean", "nanmean", "prod", "amax", "amin", "aminmax", "max.reduction_no_dim",
    "max.reduction_with_dim", "min.reduction_no_dim", "min.reduction_with_dim", "argmax", "argmin", "any", "all",
    "count_nonzero", "var", "var.unbiased", "std", "std.unbiased", "var_mean", "var_mean.unbiased", "std_mean",
    "std_mean.unbiased", "logsumexp", "linalg.vector_norm", "norm", "dist", "cumsum", "cumprod", "logcumsumexp",
    "cummax", "cummin",
]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)


X = torch.tensor([[[1.5, -2.0, 3.0, 0.0], [4.0, 0.5, -6.0, 2.0], [7.0, 8.0, -9.0, 1.0]],
                  [[-1.0, 2.0, 0.25, 5.0], [3.0, -3.0, 3.0, 3.0], [0.0, 1.0, 2.0, -4.0]]])  # [2, 3, 4]
I32 = torch.tensor([[3, -1, 4], [1, -5, 9], [2, 6, -5]], dtype=torch.int32)
U8 = torch.tensor([[0, 3, 250], [7, 0, 1]], dtype=torch.uint8)
B = torch.tensor([[True, False, True], [False, False, True]])
SCALAR = torch.tensor(2.5)
WITH_NAN = torch.tensor([[1.0, math.nan, 3.0], [4.0, 5.0, -1.0], [math.nan, 0.0, math.nan]])

DIMS = [None, [], 0, -1, [0, 2], [-1, -3], (1,)]


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("fn", [torch.sum, torch.mean, torch.amax, torch.amin, torch.var, torch.std, torch.logsumexp,
                                torch.linalg.vector_norm],
                         ids=["sum", "mean", "amax", "amin", "var", "std", "logsumexp", "vector_norm"])
def test_dims_and_keepdim(fn, dim, keepdim: bool) -> None:
    if fn is torch.logsumexp and dim is None:
        pytest.skip("logsumexp needs dim")
    if dim is None and fn in (torch.amax, torch.amin):
        dim = []
    try:
        fn(X, dim=dim, keepdim=keepdim)
    except RuntimeError as exc:  # e.g. logsumexp(dim=[]) fails in eager
        pytest.skip(f"eager: {exc}")
    assert_matches_eager(lambda x: fn(x, dim=dim, keepdim=keepdim), X)


@pytest.mark.parametrize("x", [I32, U8, B], ids=["i32", "u8", "bool"])
@pytest.mark.parametrize("fn", [
    torch.sum, lambda x: torch.sum(x, dim=1), lambda x: torch.sum(x, 0, keepdim=True, dtype=torch.int32),
    lambda x: torch.sum(x, dtype=torch.float32), torch.prod, lambda x: torch.prod(x, 1),
    lambda x: torch.mean(x, -1, dtype=torch.float32), torch.amax, lambda x: torch.amin(x, 0),
    lambda x: torch.max(x, 1), lambda x: torch.min(x, 0, keepdim=True), torch.max, torch.min,
    torch.argmax, lambda x: torch.argmin(x, 1), lambda x: torch.cumsum(x, 1),
    lambda x: torch.cumsum(x, 0, dtype=torch.float32), lambda x: torch.cumprod(x, -1), torch.any, torch.all,
    lambda x: torch.any(x, 1), lambda x: torch.all(x, dim=(0, 1), keepdim=True), torch.count_nonzero,
    lambda x: torch.cummax(x, 1), lambda x: torch.cummin(x, 0),
], ids=["sum", "sum_dim", "sum_dtype_i32", "sum_dtype_f32", "prod", "prod_dim", "mean_dtype", "amax", "amin",
        "max_dim", "min_dim_keep", "max", "min", "argmax", "argmin", "cumsum", "cumsum_dtype", "cumprod", "any", "all",
        "any_dim", "all_dims", "count_nonzero", "cummax", "cummin"])
def test_integer_and_bool_dtypes(fn, x: torch.Tensor) -> None:
    try:
        fn(x)
    except RuntimeError as exc:  # some ops are not defined for some dtypes in eager either
        pytest.skip(f"eager: {exc}")
    assert_matches_eager(fn, x)


@pytest.mark.parametrize("fn", [
    torch.sum, lambda x: torch.sum(x, 0), lambda x: torch.sum(x, -1, keepdim=True), torch.mean, torch.amax,
    lambda x: torch.max(x, 0), lambda x: torch.argmax(x, 0, keepdim=True), torch.argmin, torch.var,
    lambda x: torch.cumsum(x, 0), lambda x: torch.cumprod(x, -1), lambda x: torch.logsumexp(x, 0),
    lambda x: torch.any(x, 0), lambda x: torch.linalg.vector_norm(x, 3, dim=0),
], ids=["sum", "sum_0", "sum_-1", "mean", "amax", "max_dim", "argmax", "argmin", "var", "cumsum", "cumprod",
        "logsumexp", "any", "vector_norm"])
def test_zero_dim_tensor(fn) -> None:
    assert_matches_eager(fn, SCALAR)


@pytest.mark.parametrize("fn", [
    torch.amax, lambda x: torch.amin(x, 1), torch.max, torch.min, lambda x: torch.max(x, 1),
    lambda x: torch.min(x, 0), torch.argmax, lambda x: torch.argmin(x, 1, keepdim=True), lambda x: torch.any(x, 1),
    lambda x: torch.all(x, 0), lambda x: torch.cummax(x, 1), lambda x: torch.cummin(x, 0),
    lambda x: torch.linalg.vector_norm(x, math.inf, dim=1),
], ids=["amax", "amin", "max", "min", "max_dim", "min_dim", "argmax", "argmin", "any", "all", "cummax", "cummin",
        "norm_inf"])
def test_nan_propagates(fn) -> None:
    assert_matches_eager(fn, WITH_NAN)


def test_ties_take_first_index_and_cummax_takes_latest() -> None:
    x = torch.tensor([[2.0, 5.0, 5.0, 1.0, 5.0], [-math.inf, -math.inf, 0.0, 0.0, -1.0]])
    assert_matches_eager(lambda x: torch.max(x, 1), x)
    assert_matches_eager(lambda x: torch.argmin(x, 1), x)
    assert_matches_eager(lambda x: torch.cummax(x, 1), x)
    assert_matches_eager(lambda x: torch.cummin(x, 1), x)


@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (1, False), (-1, True)])
def test_argmax_dim_none_and_keepdim(dim: int | None, keepdim: bool) -> None:
    assert_matches_eager(lambda x: torch.argmax(x, dim=dim, keepdim=keepdim), X)


@pytest.mark.parametrize("correction", [0, 1, 2, 0.5])
@pytest.mark.parametrize("dim", [None, 1, [0, 2]], ids=str)
def test_var_std_correction(correction: float, dim) -> None:
    assert_matches_eager(lambda x: torch.var(x, dim=dim, correction=correction), X)
    assert_matches_eager(lambda x: torch.std_mean(x, dim=dim, correction=correction, keepdim=True), X)
    assert_matches_eager(lambda x: torch.var_mean(x, dim=dim, correction=correction), X)


def test_var_with_too_few_elements_is_inf_or_nan() -> None:
    assert_matches_eager(lambda x: torch.var(x, dim=0), X[:1])
    assert_matches_eager(lambda x: torch.var(x, dim=0, correction=3), X)


def test_var_of_integers_is_float() -> None:
    assert_matches_eager(lambda x: torch.var(x.float(), 1), I32)


def test_logsumexp_is_stable() -> None:
    x = torch.tensor([[1000.0, 1000.0, -1000.0], [-math.inf, -math.inf, -math.inf], [math.inf, 1.0, 2.0],
                      [-1e4, -1e4 + 1, -1e4 + 2]])
    assert_matches_eager(lambda x: torch.logsumexp(x, 1), x)
    assert_matches_eager(lambda x: torch.logcumsumexp(x, 1), x)
    assert_matches_eager(lambda x: torch.logsumexp(x, 0), I32)


@pytest.mark.parametrize("ord", [2, 1, 0, math.inf, -math.inf, 3, 0.5, -1])
def test_vector_norm_orders(ord: float) -> None:
    assert_matches_eager(lambda x: torch.linalg.vector_norm(x, ord, dim=(0, 2)), X)
    assert_matches_eager(lambda x: torch.linalg.vector_norm(x, ord), X)


def test_cumprod_zeros_and_negatives() -> None:
    x = torch.tensor([[2.0, -3.0, 0.0, 4.0], [-1.0, -1.0, -1.0, -1.0], [0.5, 0.0, -2.0, 8.0]])
    assert_matches_eager(lambda x: torch.cumprod(x, 1), x)
    assert_matches_eager(lambda x: torch.cumprod(x, 0), x)
    assert_matches_eager(lambda x: torch.cumprod(x, 1), I32)
    assert_matches_eager(lambda x: torch.cumprod(x, 1), X)  # 3-d, middle dim


@pytest.mark.parametrize("opset", [17, 18, 23])
def test_opsets(opset: int) -> None:
    fn = lambda x: (torch.amax(x, (0, 2)), torch.mean(x, -1, keepdim=True), torch.prod(x, 1),  # noqa: E731
                    torch.logsumexp(x, 1), torch.max(x, 2), torch.var(x, 1), torch.linalg.vector_norm(x, 1, dim=0),
                    torch.cumprod(x, 1), torch.cummax(x, 2), torch.any(x > 2, -1), torch.argmin(x))
    assert_matches_eager(fn, X, opset=opset)


class _DynamicReductions(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.var(x, dim=1), torch.std_mean(x, dim=(0, 1), correction=0), torch.cumprod(x, 1),
                torch.cummax(x, 1), torch.logcumsumexp(x, 0), torch.argmax(x, keepdim=True))


def test_dynamic_sizes() -> None:
    """Element counts and triangular masks come from the runtime shape, not the example's."""
    import onnxsight

    n, m = torch.export.Dim("n"), torch.export.Dim("m")
    program = onnxsight.export(_DynamicReductions(), (torch.randn(3, 4),), dynamic_shapes=({0: n, 1: m},))
    x = torch.randn(5, 7)
    expected = [t for t in torch.utils._pytree.tree_leaves(_DynamicReductions()(x))]
    for want, got in zip(expected, program(x), strict=True):
        assert got.shape == want.shape
        assert torch.allclose(got.to(want.dtype), want, atol=1e-5, rtol=1e-4)


class CheckedPositions(torch.nn.Module):
    """SigLIP-2's ``torch_compilable_check``: torch._check_tensor_all records aten._is_all_true and an assert."""

    def forward(self, shapes: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        torch._check_tensor_all((shapes > 0).all(-1), lambda: "positions must have a positive size")
        return x * shapes.prod(-1, keepdim=True)


def test_check_tensor_all_exports_its_all_true_as_all() -> None:
    import onnxsight

    shapes, x = torch.tensor([[4, 4], [2, 8]]), torch.randn(2, 3)
    program = onnxsight.export(CheckedPositions(), (shapes, x), dynamic_shapes=({0: "batch"}, {0: "batch"}),
                               verify=True)
    assert program.verification.passed
    torch.testing.assert_close(program(shapes, x)[0], CheckedPositions()(shapes, x))
