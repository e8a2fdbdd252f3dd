"""Cumulative reductions along one dim: cumsum, cumprod, logcumsumexp, cummax, cummin."""

from __future__ import annotations

import math

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation
from onnxsight.exporter.ops.reduction import reduce

aten = torch.ops.aten

_NARROW = (torch.int8, torch.int16, torch.uint8, torch.bool)


@translation(aten.cumsum.default)
def aten_cumsum(b: GraphBuilder, self: Value, dim: int, *, dtype: torch.dtype | None = None) -> Value:
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, dtype or b.node.out_dtype or self.dtype)
    if x.rank == 0:
        return b.op("Identity", x)
    if x.dtype in _NARROW:  # ONNX Runtime's CumSum covers int32/int64 and floats
        return b.cast(b.op("CumSum", b.cast(x, torch.int64), b.const(dim % b.rank_of(x), torch.int64)), x.dtype)
    return b.op("CumSum", x, b.const(dim % b.rank_of(x), torch.int64))


# NOTE: ONNX has no CumProd/CumMax, and exp(cumsum(log x)) breaks on zeros and
# negatives. Instead output i reduces x[..., j, ...] over j <= i: x is spread
# along a new axis under a lower-triangular mask (a neutral value elsewhere)
# and reduced over that axis. Exact, at O(n^2) memory along ``dim``.

def prefix_spread(b: GraphBuilder, x: Value, axis: int, fill: float) -> tuple[Value, Value]:
    """(masked, mask): ``masked[..., i, j, ...]`` is x[..., j, ...] for j <= i, else ``fill``.

    The new axis j sits right after ``axis``; ``mask`` broadcasts against ``masked``.
    """
    rank = b.rank_of(x)
    size = b.op("Reshape", b.shape_of(x, axis, axis + 1), b.const([], torch.int64), dtype=torch.int64, shape=())
    steps = b.op("Range", b.const(0, torch.int64), size, b.const(1, torch.int64), dtype=torch.int64)
    rows = b.op("Unsqueeze", steps, b.const([1], torch.int64))  # i: output position
    cols = b.op("Unsqueeze", steps, b.const([0], torch.int64))  # j: input position
    mask = b.op("LessOrEqual", cols, rows, dtype=torch.bool)    # [n_i, n_j]
    trailing = rank - axis - 1
    if trailing:
        mask = b.op("Unsqueeze", mask, b.const(list(range(2, 2 + trailing)), torch.int64), dtype=torch.bool)
    spread = b.op("Unsqueeze", x, b.const([axis], torch.int64))  # [..., 1, n_j, ...]
    return b.op("Where", mask, spread, b.scalar(fill, x), dtype=x.dtype), mask


@translation(aten.cumprod.default)
def aten_cumprod(b: GraphBuilder, self: Value, dim: int, *, dtype: torch.dtype | None = None) -> Value:
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, dtype or b.node.out_dtype or self.dtype)
    if x.rank == 0:
        return b.op("Identity", x)
    axis = dim % b.rank_of(x)
    wide = b.cast(x, torch.int64) if x.dtype in _NARROW else x
    masked, _ = prefix_spread(b, wide, axis, 1)
    return b.cast(reduce(b, "ReduceProd", masked, [axis + 1], False), x.dtype)


@translation(aten.logcumsumexp.default)
def aten_logcumsumexp(b: GraphBuilder, self: Value, dim: int) -> Value:
    """logcumsumexp(Tensor self, int dim) -> Tensor"""
    x = b.cast(self, b.node.out_dtype if _dtypes.is_float(b.node.out_dtype) else torch.get_default_dtype())
    if x.rank == 0:
        return b.op("Identity", x)
    axis = dim % b.rank_of(x)
    masked, _ = prefix_spread(b, x, axis, -math.inf)
    # Stable log-sum-exp over the new axis: subtract each row's finite max.
    peak = reduce(b, "ReduceMax", masked, [axis + 1], True)
    peak = b.op("Where", b.op("IsInf", peak, dtype=torch.bool), b.scalar(0.0, x), peak)
    total = reduce(b, "ReduceSum", b.op("Exp", b.op("Sub", masked, peak)), [axis + 1], False)
    peak = b.op("Squeeze", peak, b.const([axis + 1], torch.int64))
    return b.op("Add", b.op("Log", total), peak)


def _cumulative_extreme(b: GraphBuilder, reduce_op: str, arg_op: str, self: Value, dim: int) -> tuple[Value, Value]:
    """(values, indices) of cummax/cummin: ties and NaNs take the latest index, as in ATen."""
    x = b.cast(self, torch.int32) if self.dtype == torch.bool else self
    if x.rank == 0:
        return b.op("Identity", self), b.const(0, torch.int64)
    axis = dim % b.rank_of(x)
    if _dtypes.is_float(x.dtype):
        neutral = -math.inf if reduce_op == "ReduceMax" else math.inf
    else:
        info = torch.iinfo(x.dtype)
        neutral = info.min if reduce_op == "ReduceMax" else info.max
    masked, mask = prefix_spread(b, x, axis, neutral)
    values = reduce(b, reduce_op, masked, [axis + 1], False)
    index = b.op(arg_op, masked, axis=axis + 1, keepdims=0, select_last_index=1, dtype=torch.int64)
    # A row whose extreme equals the fill value ties with masked slots past i; the latest real slot is i.
    positions = b.op("Squeeze", b.op("Range", b.const(0, torch.int64),
                                     b.op("Reshape", b.shape_of(x, axis, axis + 1), b.const([], torch.int64),
                                          dtype=torch.int64), b.const(1, torch.int64), dtype=torch.int64))
    positions = b.op("Reshape", positions, b.const([-1] + [1] * (b.rank_of(x) - axis - 1), torch.int64))
    index = b.op("Min", index, positions, dtype=torch.int64)
    if _dtypes.is_float(x.dtype):
        nan = b.op("And", b.op("IsNaN", masked, dtype=torch.bool), mask)
        nan_int = b.cast(nan, torch.int32)
        has_nan = b.cast(reduce(b, "ReduceMax", nan_int, [axis + 1], False), torch.bool)
        nan_index = b.op("ArgMax", nan_int, axis=axis + 1, keepdims=0, select_last_index=1, dtype=torch.int64)
        values = b.op("Where", has_nan, b.scalar(math.nan, x), values, dtype=x.dtype)
        index = b.op("Where", has_nan, nan_index, index, dtype=torch.int64)
    return b.cast(values, self.dtype), index


@translation(aten.cummax.default)
def aten_cummax(b: GraphBuilder, self: Value, dim: int) -> tuple[Value, Value]:
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(b, "ReduceMax", "ArgMax", self, dim)


@translation(aten.cummin.default)
def aten_cummin(b: GraphBuilder, self: Value, dim: int) -> tuple[Value, Value]:
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)"""
    return _cumulative_extreme(b, "ReduceMin", "ArgMin", self, dim)
