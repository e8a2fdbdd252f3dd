"""Sorting, selection, binning, unique and triangular masks: sort, topk, searchsorted, bucketize,
unique, tril/triu.

NOTE: ONNX Runtime's TopK, Unique and Trilu kernels cover a few dtypes only
(TopK: float/double/int32/int64; Trilu: float/double/int64/bool). Inputs of
other dtypes are cast losslessly to a covered one (:func:`_widen`) and the
values cast back, so every PyTorch dtype of these ops runs.
"""

from __future__ import annotations

from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten

_TOPK_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)
_TRILU_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool)


def _widen(b: GraphBuilder, x: Value, supported: Sequence[torch.dtype]) -> Value:
    """``x`` cast to a dtype in ``supported`` that holds all its values exactly."""
    if x.dtype in supported:
        return x
    if x.dtype is not None and x.dtype.is_floating_point:
        wide = torch.float32 if torch.float32 in supported and x.dtype.itemsize < 4 else torch.float64
    else:
        wide = torch.int64
    return b.cast(x, wide)


def _axis(dim: int, rank: int | None) -> int:
    return dim % rank if rank else dim


def _topk(b: GraphBuilder, x: Value, k: Value, dim: int, *, largest: bool) -> tuple[Value, Value]:
    """ONNX TopK (ties: lower index first, so a stable sort) with values in ``x``'s dtype."""
    wide = _widen(b, x, _TOPK_DTYPES)
    values, indices = b.op("TopK", wide, k, outputs=2, axis=_axis(dim, x.rank), largest=int(largest), sorted=1)
    values.dtype, values.shape = wide.dtype, None
    indices.dtype = torch.int64
    return b.cast(values, x.dtype), indices


def _dim_size(b: GraphBuilder, x: Value, dim: int) -> Value:
    """Size of ``dim`` as a 1-D int64 tensor (a constant when static)."""
    axis = _axis(dim, x.rank)
    if x.shape is not None and isinstance(x.shape[axis], int):
        return b.const([x.shape[axis]], torch.int64)
    return b.shape_of(x, axis, axis + 1)


@translation(aten.sort.default)
def aten_sort(b: GraphBuilder, self: Value, dim: int = -1, descending: bool = False) -> tuple[Value, Value]:
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)"""
    if self.rank == 0:
        return b.op("Identity", self), b.const(0, torch.int64)
    return _topk(b, self, _dim_size(b, self, dim), dim, largest=descending)


@translation(aten.sort.stable)
def aten_sort_stable(b: GraphBuilder, self: Value, *, stable: bool | None = None, dim: int = -1,
                     descending: bool = False) -> tuple[Value, Value]:
    """sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)

    TopK breaks ties by the lower index, which is what a stable sort does, so
    ``stable`` needs nothing more.
    """
    return aten_sort(b, self, dim, descending)


@translation(aten.topk.default)
def aten_topk(b: GraphBuilder, self: Value, k: int | Value, dim: int = -1, largest: bool = True,
              sorted: bool = True) -> tuple[Value, Value]:
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)

    Always sorted: ``sorted=False`` leaves the order unspecified, and sorted is one such order.
    """
    if self.rank == 0:
        return b.op("Identity", self), b.const(0, torch.int64)
    return _topk(b, self, b.int_list([k]), dim, largest=largest)


def _count_below(b: GraphBuilder, boundaries: Value, values: Value, *, right: bool, out_int32: bool) -> Value:
    """For each value, how many boundaries (last dim of ``boundaries``) are < it (<= when ``right``).

    1-D boundaries apply to every value; N-D ones pair their leading dims with ``values``'.
    """
    _, (seq, vals) = b.promote(boundaries, values)
    vals = b.op("Unsqueeze", vals, b.const([-1], torch.int64))
    if boundaries.rank != 1:
        seq = b.op("Unsqueeze", seq, b.const([-2], torch.int64))
    below = b.op("LessOrEqual" if right else "Less", seq, vals, dtype=torch.bool)
    count = b.op("ReduceSum", b.cast(below, torch.int64), b.const([-1], torch.int64), keepdims=0,
                 dtype=torch.int64)
    return b.cast(count, torch.int32) if out_int32 else count


@translation(aten.searchsorted.Tensor)
def aten_searchsorted(b: GraphBuilder, sorted_sequence: Value, self: Value, *, out_int32: bool = False,
                      right: bool = False, side: str | None = None, sorter: Value | None = None) -> Value:
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False,
    str? side=None, Tensor? sorter=None) -> Tensor

    Counts comparisons (memory of len(values) x len(sequence)); ONNX has no binary search.
    """
    if sorter is not None:
        sorted_sequence = b.op("GatherElements", sorted_sequence, sorter, axis=-1)
    return _count_below(b, sorted_sequence, self, right=right or side == "right", out_int32=out_int32)


@translation(aten.searchsorted.Scalar)
def aten_searchsorted_scalar(b: GraphBuilder, sorted_sequence: Value, self: float, *, out_int32: bool = False,
                             right: bool = False, side: str | None = None, sorter: Value | None = None) -> Value:
    """searchsorted.Scalar(Tensor sorted_sequence, Scalar self, *, bool out_int32=False, bool right=False,
    str? side=None, Tensor? sorter=None) -> Tensor"""
    return aten_searchsorted(b, sorted_sequence, b.scalar(self, sorted_sequence), out_int32=out_int32,
                             right=right, side=side, sorter=sorter)


@translation(aten.bucketize.Tensor)
def aten_bucketize(b: GraphBuilder, self: Value, boundaries: Value, *, out_int32: bool = False,
                   right: bool = False) -> Value:
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    return _count_below(b, boundaries, self, right=right, out_int32=out_int32)


@translation(aten.bucketize.Scalar)
def aten_bucketize_scalar(b: GraphBuilder, self: float, boundaries: Value, *, out_int32: bool = False,
                          right: bool = False) -> Value:
    """bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor"""
    return _count_below(b, boundaries, b.scalar(self, boundaries), right=right, out_int32=out_int32)


def _unique(b: GraphBuilder, x: Value, axis: int | None, *, sorted: bool, return_inverse: bool,
            return_counts: bool) -> tuple[Value, Value, Value]:
    """ONNX Unique; outputs torch does not return are its empty placeholders."""
    wide = _widen(b, x, (torch.float32, torch.float64, torch.int8, torch.int64))
    values, _, inverse, counts = b.op("Unique", wide, outputs=4, axis=axis, sorted=1)
    values.dtype = wide.dtype
    inverse.dtype = counts.dtype = torch.int64
    empty = b.const(torch.zeros(0, dtype=torch.int64))
    if axis is None and return_inverse:
        inverse = b.op("Reshape", inverse, b.shape_of(x), dtype=torch.int64)
    return b.cast(values, x.dtype), inverse if return_inverse else empty, counts if return_counts else empty


@translation(aten._unique2.default)
def aten_unique2(b: GraphBuilder, self: Value, sorted: bool = True, return_inverse: bool = False,
                 return_counts: bool = False) -> tuple[Value, Value, Value]:
    """_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False)
    -> (Tensor, Tensor, Tensor)

    ONNX Unique flattens like torch.unique without ``dim``. Always sorted:
    ``sorted=False`` leaves the order unspecified and PyTorch's CPU kernel sorts too.
    """
    return _unique(b, self, None, sorted=sorted, return_inverse=return_inverse, return_counts=return_counts)


@translation(aten.unique_dim.default)
def aten_unique_dim(b: GraphBuilder, self: Value, dim: int, sorted: bool = True, return_inverse: bool = False,
                    return_counts: bool = False) -> tuple[Value, Value, Value]:
    """unique_dim(Tensor self, int dim, bool sorted=True, bool return_inverse=False, bool return_counts=False)
    -> (Tensor, Tensor, Tensor)"""
    return _unique(b, self, _axis(dim, self.rank), sorted=sorted, return_inverse=return_inverse,
                   return_counts=return_counts)


def _trilu(b: GraphBuilder, x: Value, diagonal: int | Value, *, upper: bool) -> Value:
    wide = _widen(b, x, _TRILU_DTYPES)
    k = b.const(diagonal, torch.int64) if isinstance(diagonal, int) else \
        b.op("Reshape", b.cast(diagonal, torch.int64), b.const([], torch.int64), dtype=torch.int64, shape=())
    return b.cast(b.op("Trilu", wide, k, upper=int(upper), dtype=wide.dtype, shape=x.shape), x.dtype)


@translation(aten.tril.default)
def aten_tril(b: GraphBuilder, self: Value, diagonal: int | Value = 0) -> Value:
    """tril(Tensor self, int diagonal=0) -> Tensor"""
    return _trilu(b, self, diagonal, upper=False)


@translation(aten.triu.default)
def aten_triu(b: GraphBuilder, self: Value, diagonal: int | Value = 0) -> Value:
    """triu(Tensor self, int diagonal=0) -> Tensor"""
    return _trilu(b, self, diagonal, upper=True)
