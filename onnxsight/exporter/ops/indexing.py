"""Indexing: advanced indexing (index, index_put), gather/scatter, masked ops, embedding, nonzero.

Advanced indexing follows PyTorch's rule: the broadcast shape of the index
tensors replaces the indexed dims in place when those dims are adjacent, and
goes first otherwise. Boolean masks become their NonZero coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops.shape import axes, diagonal_layout, norm_dim, strided_positions

aten = torch.ops.aten


@dataclass
class _Indexing:
    """``self`` transposed so the indexed dims come first, and the stacked coordinates into it."""

    moved: Value          # self with the k indexed dims first, the rest after in their order
    perm: list[int]       # the transpose that made ``moved``
    coords: Value         # int64, broadcast index shape + [k]
    broadcast: Value      # one broadcast index tensor (for its shape)
    k: int                # number of indexed dims
    batch_rank: int       # rank of the broadcast index shape
    first: int            # where the broadcast dims go in PyTorch's result (0 if not adjacent)


def _expand_masks(b: GraphBuilder, indices: Sequence[Value | None]) -> list[Value | None]:
    """Boolean/uint8 masks replaced by one int64 index per dim they cover (their NonZero rows)."""
    out: list[Value | None] = []
    for index in indices:
        if index is not None and index.dtype in (torch.bool, torch.uint8):
            rank = b.rank_of(index)
            coords = b.op("NonZero", index, dtype=torch.int64)
            if rank == 1:
                out.append(b.op("Squeeze", coords, axes(b, [0])))
            else:
                parts = b.op("Split", coords, b.const([1] * rank, torch.int64), axis=0, outputs=rank)
                out.extend(b.op("Squeeze", p, axes(b, [0])) for p in parts)
        else:
            out.append(index)
    return out


def _prepare(b: GraphBuilder, self: Value, indices: Sequence[Value | None]) -> _Indexing:
    batch_rank = max(1 if i.dtype in (torch.bool, torch.uint8) else b.rank_of(i) for i in indices if i is not None)
    indices = _expand_masks(b, indices)
    rank = b.rank_of(self)
    indices = list(indices) + [None] * (rank - len(indices))
    picked = [d for d, index in enumerate(indices) if index is not None]
    rest = [d for d in range(rank) if indices[d] is None]
    perm = picked + rest
    moved = self if perm == list(range(rank)) else b.op("Transpose", self, perm=perm)
    tensors = []
    for d in picked:
        index = b.cast(indices[d], torch.int64)
        # Negative indices wrap around (ONNX's GatherND/ScatterND do not all accept them).
        size = b.op("Squeeze", b.shape_of(self, d, d + 1), axes(b, [0]), dtype=torch.int64)
        tensors.append(b.op("Mod", index, size))
    broadcast = tensors[0]
    for other in tensors[1:]:
        broadcast = b.op("Add", broadcast, other)
    shape = b.shape_of(broadcast)
    stacked = [b.op("Unsqueeze", b.op("Expand", t, shape) if len(tensors) > 1 else t, axes(b, [-1]))
               for t in tensors]
    coords = stacked[0] if len(stacked) == 1 else b.op("Concat", *stacked, axis=-1)
    adjacent = picked == list(range(picked[0], picked[0] + len(picked)))
    return _Indexing(moved, perm, coords, broadcast, len(picked), batch_rank, picked[0] if adjacent else 0)


def _to_torch_layout(b: GraphBuilder, value: Value, ix: _Indexing, rest_rank: int, inverse: bool = False) -> Value:
    """Move the broadcast dims from the front to ``ix.first`` (or back, ``inverse``)."""
    if ix.first == 0:
        return value
    rest = list(range(ix.batch_rank, ix.batch_rank + rest_rank))
    perm = rest[:ix.first] + list(range(ix.batch_rank)) + rest[ix.first:]
    if inverse:
        perm = [perm.index(i) for i in range(len(perm))]
    return b.op("Transpose", value, perm=perm)


@translation(aten.index.Tensor, aten._unsafe_index.Tensor)
def aten_index(b: GraphBuilder, self: Value, indices: Sequence[Value | None]) -> Value:
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor"""
    present = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(present) == 1 and present[0][1].dtype not in (torch.bool, torch.uint8):
        dim, index = present[0]
        return b.op("Gather", self, b.cast(index, torch.int64), axis=dim)
    ix = _prepare(b, self, indices)
    gathered = b.op("GatherND", ix.moved, ix.coords)
    return _to_torch_layout(b, gathered, ix, b.rank_of(self) - ix.k)


@translation(aten.index_put.default, aten._unsafe_index_put.default)
def aten_index_put(b: GraphBuilder, self: Value, indices: Sequence[Value | None], values: Value,
                   accumulate: bool = False) -> Value:
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor"""
    assert self.dtype is not None
    ix = _prepare(b, self, indices)
    rest_rank = b.rank_of(self) - ix.k
    batch_shape = b.shape_of(ix.broadcast)
    rest_shape = b.shape_of(ix.moved, ix.k)
    if ix.first:
        before = b.op("Slice", rest_shape, b.const([0], torch.int64), b.const([ix.first], torch.int64))
        after = b.op("Slice", rest_shape, b.const([ix.first], torch.int64), b.const([2**63 - 1], torch.int64))
        target = b.op("Concat", before, batch_shape, after, axis=0)
    else:
        target = b.op("Concat", batch_shape, rest_shape, axis=0)
    # values broadcast against the indexing result in PyTorch's layout, then move to ScatterND's.
    updates = b.op("Expand", b.cast(values, self.dtype), target)
    updates = _to_torch_layout(b, updates, ix, rest_rank, inverse=True)
    reduction = "add" if accumulate else None
    if accumulate and self.dtype == torch.bool:
        reduction = None  # PyTorch's bool accumulate is a logical or: setting True is the same
    scattered = b.op("ScatterND", ix.moved, ix.coords, updates, reduction=reduction)
    if ix.perm == list(range(len(ix.perm))):
        return scattered
    return b.op("Transpose", scattered, perm=[ix.perm.index(i) for i in range(len(ix.perm))])


@translation(aten.index_select.default)
def aten_index_select(b: GraphBuilder, self: Value, dim: int, index: Value) -> Value:
    """index_select(Tensor self, int dim, Tensor index) -> Tensor"""
    index = b.cast(index, torch.int64)
    if b.rank_of(self) == 0:
        return b.op("Reshape", self, b.const([], torch.int64))
    if index.rank == 0:
        index = b.op("Reshape", index, b.const([1], torch.int64))
    return b.op("Gather", self, index, axis=norm_dim(dim, b.rank_of(self)))


@translation(aten.embedding.default)
def aten_embedding(b: GraphBuilder, weight: Value, indices: Value, padding_idx: int = -1,
                   scale_grad_by_freq: bool = False, sparse: bool = False) -> Value:
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False,
    bool sparse=False) -> Tensor"""
    return b.op("Gather", weight, b.cast(indices, torch.int64), axis=0)


def _scalar_shaped(b: GraphBuilder, self: Value, index: Value) -> tuple[Value, Value, bool]:
    """0-d self/index made 1-D for ONNX's Gather/ScatterElements; says whether to squeeze back."""
    if b.rank_of(self) == 0:
        one = b.const([1], torch.int64)
        return b.op("Reshape", self, one), b.op("Reshape", index, one), True
    return self, index, False


@translation(aten.gather.default)
def aten_gather(b: GraphBuilder, self: Value, dim: int, index: Value, *, sparse_grad: bool = False) -> Value:
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor"""
    data, idx, squeeze = _scalar_shaped(b, self, b.cast(index, torch.int64))
    out = b.op("GatherElements", data, idx, axis=norm_dim(dim, b.rank_of(data)))
    return b.op("Reshape", out, b.const([], torch.int64)) if squeeze and index.rank == 0 else out


def _scatter(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value, reduction: str | None) -> Value:
    """ScatterElements with PyTorch's rules (0-d tensors, a src larger than index); keeps ``self``'s shape."""
    rank = b.rank_of(self)
    data, idx, squeeze = _scalar_shaped(b, self, b.cast(index, torch.int64))
    assert self.dtype is not None
    src = b.cast(src, self.dtype)
    if squeeze:
        src = b.op("Reshape", src, b.const([1], torch.int64))
    elif src.shape is None or index.shape is None or tuple(src.shape) != tuple(index.shape):
        # PyTorch uses the index-shaped corner of a larger src; ONNX wants them the same shape.
        src = b.op("Slice", src, b.const([0] * rank, torch.int64), b.shape_of(idx), axes(b, range(rank)))
    out = b.op("ScatterElements", data, idx, src, axis=norm_dim(dim, max(rank, 1)), reduction=reduction,
               shape=None if squeeze else self.shape)
    return b.op("Reshape", out, b.const([], torch.int64), shape=()) if squeeze else out


@translation(aten.scatter.src)
def aten_scatter_src(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value) -> Value:
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(b, self, dim, index, src, None)


@translation(aten.scatter.value)
def aten_scatter_value(b: GraphBuilder, self: Value, dim: int, index: Value, value: float | Value) -> Value:
    """scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor"""
    assert self.dtype is not None
    src = b.op("Expand", b.cast(b.scalar(value, self), self.dtype), b.shape_of(index))
    return _scatter(b, self, dim, index, src, None)


_REDUCE = {"add": "add", "sum": "add", "multiply": "mul", "prod": "mul", "amax": "max", "amin": "min"}


@translation(aten.scatter.reduce)
def aten_scatter_reduce_legacy(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value, *,
                               reduce: str) -> Value:
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor"""
    return _scatter(b, self, dim, index, src, _REDUCE[reduce])


@translation(aten.scatter.value_reduce)
def aten_scatter_value_reduce(b: GraphBuilder, self: Value, dim: int, index: Value, value: float, *,
                              reduce: str) -> Value:
    """scatter.value_reduce(Tensor self, int dim, Tensor index, Scalar value, *, str reduce) -> Tensor"""
    src = b.op("Expand", b.scalar(value, self), b.shape_of(index))
    return _scatter(b, self, dim, index, src, _REDUCE[reduce])


@translation(aten.scatter_add.default)
def aten_scatter_add(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value) -> Value:
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor"""
    return _scatter(b, self, dim, index, src, "add")


def _identity(dtype: torch.dtype, reduce: str) -> float | int | bool:
    """The value a reduction starts from, so that include_self=False can reset the scattered places."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = float("inf") if dtype.is_floating_point else (True if dtype == torch.bool else torch.iinfo(dtype).max)
    if reduce == "amin":
        return big
    return -big if dtype.is_floating_point else (False if dtype == torch.bool else torch.iinfo(dtype).min)


def _scatter_reduce(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value, reduce: str,
                    include_self: bool) -> Value:
    assert self.dtype is not None
    base = self
    if not include_self:
        fill = b.op("Expand", b.const(_identity(self.dtype, reduce), self.dtype), b.shape_of(index),
                    shape=index.shape)
        base = _scatter(b, self, dim, index, fill, None)
    if reduce != "mean":
        return _scatter(b, base, dim, index, src, _REDUCE[reduce])
    total = _scatter(b, base, dim, index, src, "add")
    ones = b.op("Expand", b.const(1, self.dtype), b.shape_of(index), shape=index.shape)
    start = b.op("Expand", b.const(1 if include_self else 0, self.dtype), b.shape_of(self), shape=self.shape)
    count = _scatter(b, start, dim, index, ones, "add")
    count = b.op("Max", count, b.const(1, self.dtype))
    if self.dtype.is_floating_point:
        return b.op("Div", total, count)
    quotient = b.op("Div", b.cast(total, torch.float64), b.cast(count, torch.float64))
    return b.cast(b.op("Floor", quotient), self.dtype)  # PyTorch floors integer means


@translation(aten.scatter_reduce.two, since=18)
def aten_scatter_reduce(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value, reduce: str, *,
                        include_self: bool = True) -> Value:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *,
    bool include_self=True) -> Tensor"""
    return _scatter_reduce(b, self, dim, index, src, reduce, include_self)


@translation(aten.scatter_reduce.two, since=16, until=17)
def aten_scatter_reduce_17(b: GraphBuilder, self: Value, dim: int, index: Value, src: Value, reduce: str, *,
                           include_self: bool = True) -> Value:
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *,
    bool include_self=True) -> Tensor

    Opset 17's ScatterElements has no max/min reduction (added in 18).
    """
    if reduce in ("amax", "amin"):
        raise UnsupportedVariant("reduce", repr(reduce),
                                 "'sum', 'prod', 'mean' at opset 17 ('amax', 'amin' need opset 18)")
    return _scatter_reduce(b, self, dim, index, src, reduce, include_self)


@translation(aten.index_reduce.default)
def aten_index_reduce(b: GraphBuilder, self: Value, dim: int, index: Value, source: Value, reduce: str, *,
                      include_self: bool = True) -> Value:
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *,
    bool include_self=True) -> Tensor"""
    rank = b.rank_of(self)
    if rank == 0:
        return _scatter_reduce(b, self, 0, index, source, reduce, include_self)
    dim = norm_dim(dim, rank)
    view = [1] * rank
    view[dim] = -1
    spread = b.op("Expand", b.op("Reshape", b.cast(index, torch.int64), b.const(view, torch.int64)),
                  b.shape_of(source), shape=source.shape)
    return _scatter_reduce(b, self, dim, spread, source, reduce, include_self)


@translation(aten.put.default)
def aten_put(b: GraphBuilder, self: Value, index: Value, source: Value, accumulate: bool = False) -> Value:
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor"""
    assert self.dtype is not None
    flat = b.op("Reshape", self, b.const([-1], torch.int64))
    where = b.op("Mod", b.op("Reshape", b.cast(index, torch.int64), b.const([-1], torch.int64)),
                 b.op("Size", self, dtype=torch.int64))
    values = b.op("Reshape", b.cast(source, self.dtype), b.const([-1], torch.int64))
    out = b.op("ScatterElements", flat, where, values, axis=0, reduction="add" if accumulate else None)
    return b.op("Reshape", out, b.shape_of(self))


@translation(aten.nonzero.default)
def aten_nonzero(b: GraphBuilder, self: Value) -> Value:
    """nonzero(Tensor self) -> Tensor"""
    if b.rank_of(self) == 0:  # a 0-d tensor has n hits of 0 coordinates each
        hits = b.op("NonZero", b.op("Reshape", self, b.const([1], torch.int64)), dtype=torch.int64)
        return b.op("Slice", b.op("Transpose", hits, perm=[1, 0]), b.const([0], torch.int64),
                    b.const([0], torch.int64), b.const([1], torch.int64))
    return b.op("Transpose", b.op("NonZero", self, dtype=torch.int64), perm=[1, 0])


def _broadcast_pair(b: GraphBuilder, self: Value, mask: Value) -> tuple[Value, Value]:
    """``self`` and ``mask`` (as bool) expanded to their common shape."""
    shape = (None,) * max(b.rank_of(self), b.rank_of(mask))
    data = b.op("Expand", self, b.shape_of(mask), shape=shape)
    return data, b.op("Expand", b.cast(mask, torch.bool), b.shape_of(data), shape=shape)


@translation(aten.nonzero_static.default)
def aten_nonzero_static(b: GraphBuilder, self: Value, *, size: int, fill_value: int = -1) -> Value:
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor

    The first ``size`` rows of nonzero(self), padded with ``fill_value`` rows up to ``size``.
    """
    found = b.op("Slice", aten_nonzero(b, self), b.const([0], torch.int64), b.int_list([size]))
    missing = b.op("Sub", b.int_list([size]), b.shape_of(found, 0, 1))
    pads = b.op("Concat", b.const([0, 0], torch.int64), missing, b.const([0], torch.int64), axis=0)
    return b.op("Pad", found, pads, b.const(fill_value, torch.int64), mode="constant")


@translation(aten.take.default)
def aten_take(b: GraphBuilder, self: Value, index: Value) -> Value:
    """take(Tensor self, Tensor index) -> Tensor"""
    flat = b.op("Reshape", self, b.const([-1], torch.int64))
    where = b.op("Mod", b.cast(index, torch.int64), b.op("Size", self, dtype=torch.int64))
    return b.op("Gather", flat, where, axis=0)


@translation(aten.masked_select.default)
def aten_masked_select(b: GraphBuilder, self: Value, mask: Value) -> Value:
    """masked_select(Tensor self, Tensor mask) -> Tensor"""
    data, mask = _broadcast_pair(b, self, mask)
    return b.op("GatherND", data, aten_nonzero(b, mask))


@translation(aten.masked_scatter.default)
def aten_masked_scatter(b: GraphBuilder, self: Value, mask: Value, source: Value) -> Value:
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor"""
    assert self.dtype is not None
    data, mask = _broadcast_pair(b, self, mask)
    coords = aten_nonzero(b, mask)
    count = b.shape_of(coords, 0, 1)
    flat = b.op("Reshape", b.cast(source, self.dtype), b.const([-1], torch.int64))
    updates = b.op("Slice", flat, b.const([0], torch.int64), count)
    return b.op("ScatterND", data, coords, updates)


# -- scatters into views: slice_scatter, select_scatter, diagonal_scatter ---------------------------
def _clamped(b: GraphBuilder, value: int | Value, size: Value) -> Value:
    """A slice bound made non-negative and clamped to [0, size] at run time (Python slice rules)."""
    v = b.cast(b.scalar(value, torch.int64), torch.int64)
    v = b.op("Where", b.op("Less", v, b.const(0, torch.int64), dtype=torch.bool), b.op("Add", v, size), v)
    return b.op("Min", b.op("Max", v, b.const(0, torch.int64)), size)


@translation(aten.slice_scatter.default)
def aten_slice_scatter(b: GraphBuilder, self: Value, src: Value, dim: int = 0, start: int | Value | None = None,
                       end: int | Value | None = None, step: int | Value = 1) -> Value:
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None,
    SymInt step=1) -> Tensor"""
    rank = b.rank_of(self)
    dim = norm_dim(dim, rank)
    assert self.shape is not None and self.dtype is not None
    size = self.shape[dim]
    start = 0 if start is None else start
    end = 2**63 - 1 if end is None else end
    if all(isinstance(v, int) for v in (size, start, end, step)):
        positions: Value = b.const(list(range(size))[start:end:step], torch.int64)  # type: ignore[misc]
    else:
        length = b.op("Squeeze", b.shape_of(self, dim, dim + 1), axes(b, [0]), dtype=torch.int64)
        positions = b.op("Range", _clamped(b, start, length), _clamped(b, end, length),
                         b.cast(b.scalar(step, torch.int64), torch.int64), dtype=torch.int64)
    view = [1] * rank
    view[dim] = -1
    index = b.op("Expand", b.op("Reshape", positions, b.const(view, torch.int64)), b.shape_of(src))
    return b.op("ScatterElements", self, index, b.cast(src, self.dtype), axis=dim)


@translation(aten.select_scatter.default)
def aten_select_scatter(b: GraphBuilder, self: Value, src: Value, dim: int, index: int | Value) -> Value:
    """select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor"""
    dim = norm_dim(dim, b.rank_of(self))
    length = b.op("Squeeze", b.shape_of(self, dim, dim + 1), axes(b, [0]), dtype=torch.int64)
    start = b.op("Mod", b.cast(b.scalar(index, torch.int64), torch.int64), length)
    return aten_slice_scatter(b, self, b.op("Unsqueeze", src, axes(b, [dim])), dim, start,
                              b.op("Add", start, b.const(1, torch.int64)))


@translation(aten.diagonal_scatter.default)
def aten_diagonal_scatter(b: GraphBuilder, self: Value, src: Value, offset: int = 0, dim1: int = 0,
                          dim2: int = 1) -> Value:
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor"""
    assert self.dtype is not None
    perm, moved, flat, positions = diagonal_layout(b, self, offset, dim1, dim2)
    index = b.op("Expand", positions, b.shape_of(src))
    scattered = b.op("ScatterElements", flat, index, b.cast(src, self.dtype), axis=-1)
    out = b.op("Reshape", scattered, b.shape_of(moved))
    if perm == list(range(len(perm))):
        return out
    return b.op("Transpose", out, perm=[perm.index(i) for i in range(len(perm))])


@translation(aten.as_strided_scatter.default)
def aten_as_strided_scatter(b: GraphBuilder, self: Value, src: Value, size: Sequence[int | Value],
                            stride: Sequence[int | Value], storage_offset: int | Value | None = None) -> Value:
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride,
    SymInt? storage_offset=None) -> Tensor"""
    assert self.dtype is not None
    positions = b.op("Reshape", strided_positions(b, size, stride, storage_offset), b.const([-1], torch.int64))
    flat = b.op("Reshape", self, b.const([-1], torch.int64))
    values = b.op("Reshape", b.cast(src, self.dtype), b.const([-1], torch.int64))
    return b.op("Reshape", b.op("ScatterElements", flat, positions, values, axis=0), b.shape_of(self))
