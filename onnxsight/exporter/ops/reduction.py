"""Reductions: sum/mean/prod, amax/amin, max/min with indices, argmax/argmin, any/all,
var/std, logsumexp, cumulative sums and products, vector norms.

``dim=None`` and ``dim=[]`` reduce every dimension; negative dims count from the
end; a 0-d tensor reduced over dim 0 or -1 is itself.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten


def normalize_dims(x: Value, dim: int | Sequence[int] | None) -> list[int] | None:
    """Non-negative, sorted axes to reduce; None for all of them."""
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if not dims or x.rank == 0:
        return None
    rank = x.rank
    if rank is None:
        raise ValueError(f"reducing {x.name} over dims {dims} needs its rank, which is unknown")
    return sorted({d % rank for d in dims})


def reduce(b: GraphBuilder, op_type: str, x: Value, axes: list[int] | None, keepdim: bool,
           *, dtype: torch.dtype | None = None) -> Value:
    """``op_type`` (ReduceSum, ReduceMax, ...) over ``axes`` (None: all)."""
    # NOTE: opset 18 moved every ReduceX's axes from an attribute to an input
    # (ReduceSum already at 13); opset 17 gets the attribute form.
    # noop_with_empty_axes=0 (the default) is written out with the axes input: onnxscript's rules (its RMS norm)
    # match the attribute as written.
    if axes is None or b.opset >= 18 or op_type == "ReduceSum":
        if axes is None:
            return b.op(op_type, x, None, keepdims=int(keepdim), dtype=dtype or x.dtype)
        return b.op(op_type, x, b.const(axes, torch.int64), keepdims=int(keepdim), noop_with_empty_axes=0,
                    dtype=dtype or x.dtype)
    return b.op(op_type, x, axes=axes, keepdims=int(keepdim), dtype=dtype or x.dtype)


def _accumulate_dtype(b: GraphBuilder, x: Value, dtype: torch.dtype | None) -> torch.dtype:
    """Output dtype of sum/prod/cumsum: ``dtype=``, else the node's, else int64 for bools and integers."""
    if dtype is not None:
        return dtype
    if b.node.out_dtype is not None:
        return b.node.out_dtype
    return x.dtype if _dtypes.is_float(x.dtype) else torch.int64


@translation(aten.sum.dim_IntList)
def aten_sum_dim(b: GraphBuilder, self: Value, dim: Sequence[int] | None = None, keepdim: bool = False, *,
                 dtype: torch.dtype | None = None) -> Value:
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, _accumulate_dtype(b, self, dtype))
    return reduce(b, "ReduceSum", x, normalize_dims(self, dim), keepdim)


@translation(aten.sum.default)
def aten_sum(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None) -> Value:
    """sum(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return aten_sum_dim(b, self, None, False, dtype=dtype)


@translation(aten.mean.dim)
def aten_mean_dim(b: GraphBuilder, self: Value, dim: Sequence[int] | None = None, keepdim: bool = False, *,
                  dtype: torch.dtype | None = None) -> Value:
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, dtype or b.node.out_dtype or self.dtype)
    axes = normalize_dims(self, dim)
    # NOTE: the last axis alone as -1, as the model wrote it (RMS and layer norms): onnxscript's norm rules match
    # the axes constant [-1] by value, not [rank - 1]
    return reduce(b, "ReduceMean", x, [-1] if axes == [self.rank - 1] else axes, keepdim)


@translation(aten.mean.default)
def aten_mean(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None) -> Value:
    """mean(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    return aten_mean_dim(b, self, None, False, dtype=dtype)


@translation(aten.prod.dim_int)
def aten_prod_dim(b: GraphBuilder, self: Value, dim: int, keepdim: bool = False, *,
                  dtype: torch.dtype | None = None) -> Value:
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, _accumulate_dtype(b, self, dtype))
    return reduce(b, "ReduceProd", x, normalize_dims(self, dim), keepdim)


@translation(aten.prod.default)
def aten_prod(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None) -> Value:
    """prod(Tensor self, *, ScalarType? dtype=None) -> Tensor"""
    x = b.cast(self, _accumulate_dtype(b, self, dtype))
    return reduce(b, "ReduceProd", x, None, False)


# -- extremes --------------------------------------------------------------------------------------
# NOTE: ONNX Runtime's ReduceMax/ReduceMin skip NaN; PyTorch's amax/max
# propagate it (and max.dim points at the first NaN). Float inputs get an
# IsNaN reduction to put NaN back.

def extreme(b: GraphBuilder, op_type: str, x: Value, axes: list[int] | None, keepdim: bool) -> Value:
    """NaN-propagating ReduceMax/ReduceMin; bools are reduced as int32."""
    if x.dtype == torch.bool:
        wide = reduce(b, op_type, b.cast(x, torch.int32), axes, keepdim)
        return b.cast(wide, torch.bool)
    result = reduce(b, op_type, x, axes, keepdim)
    if not _dtypes.is_float(x.dtype):
        return result
    has_nan = b.cast(reduce(b, "ReduceMax", b.cast(b.op("IsNaN", x, dtype=torch.bool), torch.int32),
                            axes, keepdim), torch.bool)
    return b.op("Where", has_nan, b.scalar(math.nan, x), result, dtype=x.dtype)


def arg_extreme(b: GraphBuilder, op_type: str, x: Value, axis: int, keepdim: bool) -> Value:
    """ArgMax/ArgMin along ``axis`` (first index on ties); the first NaN wins for float inputs."""
    if x.dtype == torch.bool:
        x = b.cast(x, torch.int32)
    index = b.op(op_type, x, axis=axis, keepdims=int(keepdim), dtype=torch.int64)
    if not _dtypes.is_float(x.dtype):
        return index
    nan = b.cast(b.op("IsNaN", x, dtype=torch.bool), torch.int32)
    nan_index = b.op("ArgMax", nan, axis=axis, keepdims=int(keepdim), dtype=torch.int64)
    has_nan = b.cast(reduce(b, "ReduceMax", nan, [axis], keepdim), torch.bool)
    return b.op("Where", has_nan, nan_index, index, dtype=torch.int64)


@translation(aten.amax.default)
def aten_amax(b: GraphBuilder, self: Value, dim: Sequence[int] = (), keepdim: bool = False) -> Value:
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return extreme(b, "ReduceMax", self, normalize_dims(self, dim), keepdim)


@translation(aten.amin.default)
def aten_amin(b: GraphBuilder, self: Value, dim: Sequence[int] = (), keepdim: bool = False) -> Value:
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor"""
    return extreme(b, "ReduceMin", self, normalize_dims(self, dim), keepdim)


@translation(aten.max.default)
def aten_max(b: GraphBuilder, self: Value) -> Value:
    """max(Tensor self) -> Tensor"""
    return extreme(b, "ReduceMax", self, None, False)


@translation(aten.min.default)
def aten_min(b: GraphBuilder, self: Value) -> Value:
    """min(Tensor self) -> Tensor"""
    return extreme(b, "ReduceMin", self, None, False)


def _extreme_with_index(b: GraphBuilder, reduce_op: str, arg_op: str, x: Value, dim: int,
                        keepdim: bool) -> tuple[Value, Value]:
    if x.rank == 0:
        return b.op("Identity", x), b.const(0, torch.int64)
    axis = dim % b.rank_of(x)
    return extreme(b, reduce_op, x, [axis], keepdim), arg_extreme(b, arg_op, x, axis, keepdim)


@translation(aten.max.dim)
def aten_max_dim(b: GraphBuilder, self: Value, dim: int, keepdim: bool = False) -> tuple[Value, Value]:
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _extreme_with_index(b, "ReduceMax", "ArgMax", self, dim, keepdim)


@translation(aten.min.dim)
def aten_min_dim(b: GraphBuilder, self: Value, dim: int, keepdim: bool = False) -> tuple[Value, Value]:
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"""
    return _extreme_with_index(b, "ReduceMin", "ArgMin", self, dim, keepdim)


def _arg(b: GraphBuilder, op_type: str, x: Value, dim: int | None, keepdim: bool) -> Value:
    if x.rank == 0:
        return b.const(0, torch.int64)
    if dim is not None:
        return arg_extreme(b, op_type, x, dim % b.rank_of(x), keepdim)
    # dim=None: index into the flattened tensor; keepdim keeps every dim as size 1.
    flat = b.op("Reshape", x, b.const([-1], torch.int64), shape=(None,))
    index = arg_extreme(b, op_type, flat, 0, False)
    if keepdim:
        index = b.op("Reshape", index, b.const([1] * b.rank_of(x), torch.int64))
    return index


@translation(aten.argmax.default)
def aten_argmax(b: GraphBuilder, self: Value, dim: int | None = None, keepdim: bool = False) -> Value:
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(b, "ArgMax", self, dim, keepdim)


@translation(aten.argmin.default)
def aten_argmin(b: GraphBuilder, self: Value, dim: int | None = None, keepdim: bool = False) -> Value:
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor"""
    return _arg(b, "ArgMin", self, dim, keepdim)


# -- any / all ---------------------------------------------------------------------------------------

def _any_all(b: GraphBuilder, op_type: str, x: Value, dim: int | Sequence[int] | None, keepdim: bool) -> Value:
    """any = max of (x != 0), all = min of it; bool out (uint8 for uint8 inputs, as in PyTorch)."""
    truth = x if x.dtype == torch.bool else b.op("Not", b.op("Equal", x, b.scalar(0, x), dtype=torch.bool))
    reduced = reduce(b, op_type, b.cast(truth, torch.int32), normalize_dims(x, dim), keepdim)
    return b.cast(reduced, b.node.out_dtype or torch.bool)


@translation(aten.any.default)
def aten_any(b: GraphBuilder, self: Value) -> Value:
    """any(Tensor self) -> Tensor"""
    return _any_all(b, "ReduceMax", self, None, False)


@translation(aten.any.dim, aten.any.dims)
def aten_any_dim(b: GraphBuilder, self: Value, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Value:
    """any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor  (also any.dim)"""
    return _any_all(b, "ReduceMax", self, dim, keepdim)


@translation(aten.all.default)
def aten_all(b: GraphBuilder, self: Value) -> Value:
    """all(Tensor self) -> Tensor"""
    return _any_all(b, "ReduceMin", self, None, False)


@translation(aten._is_all_true.default)
def aten_is_all_true(b: GraphBuilder, self: Value) -> Value:
    """_is_all_true(Tensor self) -> Tensor

    What ``torch._check_tensor_all`` (transformers' ``torch_compilable_check``: SigLIP-2) records before its assert;
    the assert is a no-op in the graph, so this value is usually removed as dead code."""
    return _any_all(b, "ReduceMin", self, None, False)


@translation(aten.all.dim, aten.all.dims)
def aten_all_dim(b: GraphBuilder, self: Value, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> Value:
    """all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor  (also all.dim)"""
    return _any_all(b, "ReduceMin", self, dim, keepdim)
