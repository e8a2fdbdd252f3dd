"""Statistical reductions: var/std (and their _mean forms), logsumexp and vector norms.

Dims follow :func:`reduction.normalize_dims`."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops.reduction import extreme, normalize_dims, reduce

aten = torch.ops.aten


def _count(b: GraphBuilder, x: Value, axes: list[int] | None) -> Value:
    """Number of elements reduced over ``axes``, as a 0-d tensor of ``x``'s dtype."""
    dims = list(range(b.rank_of(x))) if axes is None else axes
    sizes = [x.shape[d] for d in dims] if x.shape is not None else [None]
    if all(isinstance(s, int) for s in sizes):
        return b.scalar(float(math.prod(sizes)), x)
    picked = b.op("Gather", b.shape_of(x), b.const(dims, torch.int64), axis=0, dtype=torch.int64)
    return b.cast(reduce(b, "ReduceProd", picked, None, False), x.dtype)


def _var_mean(b: GraphBuilder, self: Value, dim: int | Sequence[int] | None, correction: float | None,
              keepdim: bool, *, with_mean: bool = False) -> tuple[Value, Value | None]:
    """(variance, mean): sum((x - mean)**2) / max(N - correction, 0), as ATen computes it."""
    x = b.cast(self, b.node.out_dtype if _dtypes.is_float(b.node.out_dtype) else torch.get_default_dtype())
    axes = normalize_dims(x, dim)
    mean = reduce(b, "ReduceMean", x, axes, True)
    centered = b.op("Sub", x, mean)
    squares = reduce(b, "ReduceSum", b.op("Mul", centered, centered), axes, keepdim)
    dof = b.op("Sub", _count(b, x, axes), b.scalar(1.0 if correction is None else float(correction), x))
    dof = b.op("Max", dof, b.scalar(0.0, x))
    variance = b.op("Div", squares, dof)
    if not with_mean:
        return variance, None
    return variance, mean if keepdim else reduce(b, "ReduceMean", x, axes, False)


@translation(aten.var.correction)
def aten_var(b: GraphBuilder, self: Value, dim: Sequence[int] | None = None, *, correction: float | None = None,
             keepdim: bool = False) -> Value:
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return _var_mean(b, self, dim, correction, keepdim)[0]


@translation(aten.var.dim)
def aten_var_dim(b: GraphBuilder, self: Value, dim: Sequence[int] | None, unbiased: bool = True,
                 keepdim: bool = False) -> Value:
    """var.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor"""
    return _var_mean(b, self, dim, 1 if unbiased else 0, keepdim)[0]


@translation(aten.std.correction)
def aten_std(b: GraphBuilder, self: Value, dim: Sequence[int] | None = None, *, correction: float | None = None,
             keepdim: bool = False) -> Value:
    """std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor"""
    return b.op("Sqrt", _var_mean(b, self, dim, correction, keepdim)[0])


@translation(aten.var_mean.correction)
def aten_var_mean(b: GraphBuilder, self: Value, dim: Sequence[int] | None = None, *,
                  correction: float | None = None, keepdim: bool = False) -> tuple[Value, Value]:
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False)
    -> (Tensor, Tensor)"""
    return _var_mean(b, self, dim, correction, keepdim, with_mean=True)


@translation(aten.std_mean.correction)
def aten_std_mean(b: GraphBuilder, self: Value, dim: Sequence[int] | None = None, *,
                  correction: float | None = None, keepdim: bool = False) -> tuple[Value, Value]:
    """std_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False)
    -> (Tensor, Tensor)"""
    variance, mean = _var_mean(b, self, dim, correction, keepdim, with_mean=True)
    return b.op("Sqrt", variance), mean


@translation(aten.logsumexp.default)
def aten_logsumexp(b: GraphBuilder, self: Value, dim: Sequence[int], keepdim: bool = False) -> Value:
    """logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor"""
    # NOTE: the max is subtracted first so exp cannot overflow; an infinite
    # max (all -inf, or a +inf) is replaced by 0 so inf - inf never makes NaN.
    x = b.cast(self, b.node.out_dtype if _dtypes.is_float(b.node.out_dtype) else torch.get_default_dtype())
    axes = normalize_dims(x, dim)
    peak = extreme(b, "ReduceMax", x, axes, True)
    peak = b.op("Where", b.op("IsInf", peak, dtype=torch.bool), b.scalar(0.0, x), peak)
    total = reduce(b, "ReduceSum", b.op("Exp", b.op("Sub", x, peak)), axes, keepdim)
    if not keepdim:
        peak = b.op("Reshape", peak, b.shape_of(total), dtype=x.dtype)
    return b.op("Add", b.op("Log", total), peak)


@translation(aten.linalg_vector_norm.default)
def aten_linalg_vector_norm(b: GraphBuilder, self: Value, ord: float = 2, dim: Sequence[int] | None = None,
                            keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Value:
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *,
    ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, dtype or b.node.out_dtype or self.dtype)
    axes = normalize_dims(x, dim)
    if ord == 2:
        return reduce(b, "ReduceL2", x, axes, keepdim)
    if ord == 1:
        return reduce(b, "ReduceL1", x, axes, keepdim)
    magnitude = b.op("Abs", x)
    if ord == math.inf:
        return extreme(b, "ReduceMax", magnitude, axes, keepdim)
    if ord == -math.inf:
        return extreme(b, "ReduceMin", magnitude, axes, keepdim)
    if ord == 0:
        nonzero = b.cast(b.op("Not", b.op("Equal", x, b.scalar(0.0, x), dtype=torch.bool)), x.dtype)
        return reduce(b, "ReduceSum", nonzero, axes, keepdim)
    powered = b.op("Pow", magnitude, b.scalar(float(ord), x))
    return b.op("Pow", reduce(b, "ReduceSum", powered, axes, keepdim), b.scalar(1.0 / float(ord), x))


@translation(aten.dist.default)
def aten_dist(b: GraphBuilder, self: Value, other: Value, p: float = 2) -> Value:
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor"""
    dtype, (x, y) = b.promote(self, other)
    return aten_linalg_vector_norm(b, b.op("Sub", x, y, dtype=dtype), p)
