"""Shape and view ops: view, permute, expand, squeeze, cat, split, slice, select, flip, repeat, pads, copies.

Views become copies in ONNX (values are immutable), so clone/alias/detach and
friends are Identity. Sizes may mix Python ints and symbolic 0-d int64 Values;
they go through ``b.int_list``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

aten = torch.ops.aten

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def norm_dim(dim: int, rank: int | None) -> int:
    """``dim`` made non-negative for a tensor of ``rank`` (0-d tensors accept dims 0 and -1)."""
    if dim >= 0:
        return dim
    if rank is None:
        raise ValueError(f"negative dim {dim} on a tensor of unknown rank")
    return dim + max(rank, 1)


def axes(b: GraphBuilder, dims: Sequence[int]) -> Value:
    """A 1-D int64 constant of axes (for Squeeze/Unsqueeze/Slice inputs)."""
    return b.const(list(dims), torch.int64)


@translation(aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.view_copy.default,
             aten._reshape_alias_copy.default)
def aten_view(b: GraphBuilder, self: Value, size: Sequence[int | Value], stride: Sequence[int] | None = None) -> Value:
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)"""
    # NOTE: allowzero=1 because a 0 in a PyTorch size means an empty dim, not "copy the input's dim".
    return b.op("Reshape", self, b.int_list(size), allowzero=1, shape=b.node.out_shape)


@translation(aten.permute.default, aten.permute_copy.default)
def aten_permute(b: GraphBuilder, self: Value, dims: Sequence[int]) -> Value:
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)"""
    rank = b.rank_of(self)
    perm = [norm_dim(d, rank) for d in dims]
    if rank == 0 or perm == list(range(rank)):
        return b.op("Identity", self)
    return b.op("Transpose", self, perm=perm)


@translation(aten.transpose.int, aten.transpose_copy.int)
def aten_transpose(b: GraphBuilder, self: Value, dim0: int, dim1: int) -> Value:
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)"""
    rank = b.rank_of(self)
    perm = list(range(rank))
    if rank:
        d0, d1 = norm_dim(dim0, rank), norm_dim(dim1, rank)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    return aten_permute(b, self, perm)


@translation(aten.t.default, aten.t_copy.default)
def aten_t(b: GraphBuilder, self: Value) -> Value:
    """t(Tensor(a) self) -> Tensor(a)"""
    return aten_transpose(b, self, 0, 1) if b.rank_of(self) == 2 else b.op("Identity", self)


@translation(aten.expand.default, aten.expand_copy.default)
def aten_expand(b: GraphBuilder, self: Value, size: Sequence[int | Value], *, implicit: bool = False) -> Value:
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)"""
    # NOTE: -1 keeps the input's dim; ONNX Expand broadcasts, so a 1 there does the same.
    sizes = [1 if isinstance(s, int) and s == -1 else s for s in size]
    return b.op("Expand", self, b.int_list(sizes), shape=b.node.out_shape)


@translation(aten.squeeze.dims, aten.squeeze_copy.dims)
def aten_squeeze_dims(b: GraphBuilder, self: Value, dim: Sequence[int]) -> Value:
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)"""
    rank = b.rank_of(self)
    assert self.shape is not None
    listed = sorted({norm_dim(d, rank) for d in dim}) if rank else []
    if any(not isinstance(self.shape[d], int) for d in listed):
        return _squeeze_at_run_time(b, self, listed)
    # PyTorch leaves dims that are not 1 alone; ONNX Squeeze would fail on them.
    picked = [d for d in listed if self.shape[d] == 1]
    if not picked:
        return b.op("Identity", self)
    return b.op("Squeeze", self, axes(b, picked))


def _squeeze_at_run_time(b: GraphBuilder, self: Value, listed: Sequence[int]) -> Value:
    """``self`` without those of the ``listed`` dims whose size is 1 when the model runs.

    NOTE: a symbolic dim may be 1 at run time (its range starts at 0 or 1, whatever the example
    was), and eager then drops it: the graph keeps the dims that are not 1, decided on the
    runtime shape, so the rank of the result is the runtime's, as eager's is.
    """
    i64 = torch.int64
    shape = b.shape_of(self)
    one = b.op("Equal", shape, b.const(1, i64), dtype=torch.bool)
    if len(listed) < b.rank_of(self):
        one = b.op("And", one, b.const([d in listed for d in range(b.rank_of(self))], torch.bool), dtype=torch.bool)
    kept = b.op("Compress", shape, b.op("Not", one, dtype=torch.bool), axis=0, dtype=i64)
    return b.rank_at_run_time(b.op("Reshape", self, kept, allowzero=1))


@translation(aten.squeeze.dim, aten.squeeze_copy.dim)
def aten_squeeze_dim(b: GraphBuilder, self: Value, dim: int) -> Value:
    """squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)"""
    return aten_squeeze_dims(b, self, [dim])


@translation(aten.squeeze.default, aten.squeeze_copy.default)
def aten_squeeze(b: GraphBuilder, self: Value) -> Value:
    """squeeze(Tensor(a) self) -> Tensor(a)"""
    return aten_squeeze_dims(b, self, list(range(b.rank_of(self))))


@translation(aten.unsqueeze.default, aten.unsqueeze_copy.default)
def aten_unsqueeze(b: GraphBuilder, self: Value, dim: int) -> Value:
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)"""
    return b.op("Unsqueeze", self, axes(b, [norm_dim(dim, b.rank_of(self) + 1)]))


@translation(aten.cat.default, aten.concat.default, aten.concatenate.default)
def aten_cat(b: GraphBuilder, tensors: Sequence[Value], dim: int = 0) -> Value:
    """cat(Tensor[] tensors, int dim=0) -> Tensor"""
    dtype = b.node.out_dtype or tensors[0].dtype
    # Legacy behaviour: 1-D empty tensors are skipped whatever the other tensors' rank.
    kept = [t for t in tensors if not (t.shape is not None and tuple(t.shape) == (0,))] or list(tensors[:1])
    rank = b.rank_of(kept[0])
    parts = [b.cast(t, dtype) for t in kept]
    if len(parts) == 1:
        return b.op("Identity", parts[0])
    # a negative dim stays as torch gave it (Concat takes one): onnxscript's KV-cache attention rule matches
    # Concat(past, new, axis=-2), the cache's torch.cat(..., dim=-2)
    return b.op("Concat", *parts, axis=dim if dim < 0 and rank else norm_dim(dim, rank), dtype=dtype)


@translation(aten.stack.default)
def aten_stack(b: GraphBuilder, tensors: Sequence[Value], dim: int = 0) -> Value:
    """stack(Tensor[] tensors, int dim=0) -> Tensor"""
    dim = norm_dim(dim, b.rank_of(tensors[0]) + 1)
    parts = [b.op("Unsqueeze", t, axes(b, [dim]), shape=(*t.shape[:dim], 1, *t.shape[dim:]))  # type: ignore[index]
             for t in tensors]
    return aten_cat(b, parts, dim)


@translation(aten.split_with_sizes.default, aten.split_with_sizes_copy.default, aten.split.sizes)
def aten_split_with_sizes(b: GraphBuilder, self: Value, split_sizes: Sequence[int | Value],
                          dim: int = 0) -> tuple[Value, ...]:
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]"""
    dim = norm_dim(dim, b.rank_of(self))
    if len(split_sizes) == 1:
        return (b.op("Identity", self),)
    return tuple(b.op("Split", self, b.int_list(split_sizes), axis=dim, outputs=len(split_sizes)))


@translation(aten.split.Tensor, aten.split_copy.Tensor)
def aten_split(b: GraphBuilder, self: Value, split_size: int | Value, dim: int = 0) -> tuple[Value, ...]:
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]"""
    dim = norm_dim(dim, b.rank_of(self))
    count = len(b.node.meta_vals)
    assert self.shape is not None
    size = self.shape[dim]
    if isinstance(size, int) and isinstance(split_size, int):
        sizes: list[int | Value] = [min(split_size, size - i * split_size) for i in range(count)]
    else:  # symbolic: every chunk is split_size but the last, which takes the rest
        taken = b.op("Mul", b.cast(b.scalar(split_size, torch.int64), torch.int64), b.const(count - 1, torch.int64))
        rest = b.op("Sub", b.op("Squeeze", b.shape_of(self, dim, dim + 1)), taken, dtype=torch.int64)
        sizes = [split_size] * (count - 1) + [rest]
    return aten_split_with_sizes(b, self, sizes, dim)


@translation(aten.unbind.int, aten.unbind_copy.int)
def aten_unbind(b: GraphBuilder, self: Value, dim: int = 0) -> tuple[Value, ...]:
    """unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]"""
    dim = norm_dim(dim, b.rank_of(self))
    count = len(b.node.meta_vals)
    parts = aten_split_with_sizes(b, self, [1] * count, dim)
    return tuple(b.op("Squeeze", p, axes(b, [dim])) for p in parts)


@translation(aten.slice.Tensor, aten.slice_copy.Tensor)
def aten_slice(b: GraphBuilder, self: Value, dim: int = 0, start: int | Value | None = None,
               end: int | Value | None = None, step: int | Value = 1) -> Value:
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)"""
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    if isinstance(end, int):
        end = min(end, INT64_MAX)
    if start == 0 and isinstance(end, int) and end == INT64_MAX and step == 1:
        return b.op("Identity", self)
    dim = norm_dim(dim, b.rank_of(self))
    return b.op("Slice", self, b.int_list([start]), b.int_list([end]), axes(b, [dim]), b.int_list([step]),
                shape=b.node.out_shape)


@translation(aten.narrow.default, aten.narrow_copy.default)
def aten_narrow(b: GraphBuilder, self: Value, dim: int, start: int | Value, length: int | Value) -> Value:
    """narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)"""
    dim = norm_dim(dim, b.rank_of(self))
    assert self.shape is not None
    if isinstance(start, int) and start < 0:
        size = self.shape[dim]
        start = start + size if isinstance(size, int) else b.op("Add", b.const(start, torch.int64), b.op(
            "Squeeze", b.shape_of(self, dim, dim + 1)))
    if isinstance(start, int) and isinstance(length, int):
        end: int | Value = start + length
    else:
        end = b.op("Add", b.cast(b.scalar(start, torch.int64), torch.int64),
                   b.cast(b.scalar(length, torch.int64), torch.int64))
    return aten_slice(b, self, dim, start, end)


@translation(aten.select.int, aten.select_copy.int)
def aten_select(b: GraphBuilder, self: Value, dim: int, index: int | Value) -> Value:
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)"""
    dim = norm_dim(dim, b.rank_of(self))
    return b.op("Gather", self, b.cast(b.scalar(index, torch.int64), torch.int64), axis=dim)


@translation(aten.flip.default)
def aten_flip(b: GraphBuilder, self: Value, dims: Sequence[int]) -> Value:
    """flip(Tensor self, int[] dims) -> Tensor"""
    rank = b.rank_of(self)
    picked = sorted({norm_dim(d, rank) for d in dims}) if rank else []
    if not picked:
        return b.op("Identity", self)
    n = len(picked)
    return b.op("Slice", self, b.const([-1] * n, torch.int64), b.const([INT64_MIN] * n, torch.int64),
                axes(b, picked), b.const([-1] * n, torch.int64))


@translation(aten.roll.default)
def aten_roll(b: GraphBuilder, self: Value, shifts: Sequence[int], dims: Sequence[int] = ()) -> Value:
    """roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor"""
    if not dims:
        flat = b.op("Reshape", self, b.const([-1], torch.int64))
        return b.op("Reshape", aten_roll(b, flat, shifts, [0]), b.shape_of(self))
    out = self
    for shift, dim in zip(shifts, dims):
        dim = norm_dim(dim, b.rank_of(self))
        size = b.op("Squeeze", b.shape_of(self, dim, dim + 1))
        # rolled = cat(x[-s:], x[:-s]) with s = shift mod size (Python mod keeps it non-negative)
        cut = b.op("Sub", size, b.op("Mod", b.cast(b.scalar(shift, torch.int64), torch.int64), size))
        head = b.op("Slice", out, b.op("Unsqueeze", cut, axes(b, [0])), b.const([INT64_MAX], torch.int64),
                    axes(b, [dim]))
        tail = b.op("Slice", out, b.const([0], torch.int64), b.op("Unsqueeze", cut, axes(b, [0])), axes(b, [dim]))
        out = b.op("Concat", head, tail, axis=dim)
    return out


@translation(aten.repeat.default)
def aten_repeat(b: GraphBuilder, self: Value, repeats: Sequence[int | Value]) -> Value:
    """repeat(Tensor self, SymInt[] repeats) -> Tensor"""
    extra = len(repeats) - b.rank_of(self)
    if extra > 0:
        self = b.op("Unsqueeze", self, axes(b, range(extra)))
    return b.op("Tile", self, b.int_list(repeats))


@translation(aten.clone.default, aten.alias.default, aten.alias_copy.default, aten.detach.default,
             aten.detach_copy.default, aten.lift_fresh_copy.default, aten.lift_fresh.default, aten.lift.default,
             aten.contiguous.default)
def aten_clone(b: GraphBuilder, self: Value, *, memory_format: torch.memory_format | None = None) -> Value:
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor"""
    return b.op("Identity", self)


@translation(aten._to_copy.default)
def aten_to_copy(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None, layout: object = None,
                 device: object = None, pin_memory: bool | None = None, non_blocking: bool = False,
                 memory_format: torch.memory_format | None = None) -> Value:
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor"""
    if dtype is None or dtype == self.dtype:
        return b.op("Identity", self)
    return b.cast(self, dtype)


@translation(torch.ops.prims.convert_element_type.default)
def prims_convert_element_type(b: GraphBuilder, a: Value, dtype: torch.dtype) -> Value:
    """convert_element_type(Tensor a, ScalarType dtype) -> Tensor

    A prim that core-ATen decompositions leave in the graph (renorm's, for one).
    """
    return b.op("Identity", a) if dtype == a.dtype else b.cast(a, dtype)


@translation(aten.copy.default)
def aten_copy(b: GraphBuilder, self: Value, src: Value, non_blocking: bool = False) -> Value:
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor"""
    assert self.dtype is not None
    return b.op("Expand", b.cast(src, self.dtype), b.shape_of(self), dtype=self.dtype)


@translation(aten.constant_pad_nd.default)
def aten_constant_pad_nd(b: GraphBuilder, self: Value, pad: Sequence[int | Value], value: float = 0) -> Value:
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor"""
    rank = b.rank_of(self)
    begins: list[int | Value] = [0] * rank
    ends: list[int | Value] = [0] * rank
    # PyTorch's pad runs from the last dim backwards: (last_begin, last_end, prev_begin, prev_end, ...).
    for i in range(len(pad) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    assert self.dtype is not None
    fill = b.const(bool(value) if self.dtype == torch.bool else value, self.dtype)
    return b.op("Pad", self, b.int_list(begins + ends), fill, mode="constant")


# -- views that pick elements: diagonal, unfold, as_strided ------------------------------------------
def diagonal_layout(b: GraphBuilder, self: Value, offset: int, dim1: int, dim2: int
                    ) -> tuple[list[int], Value, Value, Value]:
    """(perm moving dim1, dim2 last; ``self`` so transposed; it flattened over those two dims;
    flat positions of the diagonal, 1-D int64: a constant for static sizes, computed in the graph else)."""
    rank = b.rank_of(self)
    d1, d2 = norm_dim(dim1, rank), norm_dim(dim2, rank)
    assert self.shape is not None
    n1, n2 = self.shape[d1], self.shape[d2]
    perm = [d for d in range(rank) if d not in (d1, d2)] + [d1, d2]
    moved = self if perm == list(range(rank)) else b.op("Transpose", self, perm=perm)
    if isinstance(n1, int) and isinstance(n2, int):
        flat_size = b.const([n1 * n2], torch.int64)
        if offset >= 0:
            start, length = offset, max(0, min(n1, n2 - offset))
        else:
            start, length = -offset * n2, max(0, min(n1 + offset, n2))
        positions = b.const([start + i * (n2 + 1) for i in range(length)], torch.int64)
    else:
        flat_size, positions = _symbolic_diagonal(b, self, d1, d2, offset)
    flat = b.op("Reshape", moved, b.op("Concat", b.shape_of(moved, 0, rank - 2), flat_size, axis=0))
    return perm, moved, flat, positions


def _symbolic_diagonal(b: GraphBuilder, self: Value, d1: int, d2: int, offset: int) -> tuple[Value, Value]:
    """(n1 * n2 as a 1-element tensor, the diagonal's flat positions) from the runtime sizes of d1, d2."""
    i64 = torch.int64

    def size(d: int) -> Value:
        return b.op("Squeeze", b.shape_of(self, d, d + 1), dtype=i64, shape=())

    def op(op_type: str, *args: Value) -> Value:
        return b.op(op_type, *args, dtype=i64, shape=())

    n1, n2 = size(d1), size(d2)
    if offset >= 0:
        start, length = b.const(offset, i64), op("Min", n1, op("Sub", n2, b.const(offset, i64)))
    else:
        start = op("Mul", b.const(-offset, i64), n2)
        length = op("Min", op("Add", n1, b.const(offset, i64)), n2)
    length = op("Max", length, b.const(0, i64))
    steps = b.op("Range", b.const(0, i64), length, b.const(1, i64), dtype=i64, shape=(None,))
    positions = b.op("Add", start, b.op("Mul", steps, op("Add", n2, b.const(1, i64))), dtype=i64, shape=(None,))
    flat_size = b.op("Unsqueeze", op("Mul", n1, n2), b.const([0], i64), dtype=i64, shape=(1,))
    return flat_size, positions


@translation(aten.diagonal.default, aten.diagonal_copy.default)
def aten_diagonal(b: GraphBuilder, self: Value, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Value:
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)"""
    _, _, flat, positions = diagonal_layout(b, self, offset, dim1, dim2)
    return b.op("Gather", flat, positions, axis=b.rank_of(self) - 2)


@translation(aten.unfold.default, aten.unfold_copy.default)
def aten_unfold(b: GraphBuilder, self: Value, dimension: int, size: int, step: int) -> Value:
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)"""
    rank = b.rank_of(self)
    if rank == 0:
        return b.op("Unsqueeze", self, axes(b, [0]))
    dim = norm_dim(dimension, rank)
    assert self.shape is not None
    length = self.shape[dim]
    if isinstance(length, int):
        windows = (length - size) // step + 1
        index = b.const([[i * step + j for j in range(size)] for i in range(windows)], torch.int64)
    else:  # symbolic length: window starts Range(0, (length - size) // step + 1) * step, in the graph
        i64 = torch.int64
        length_value = b.op("Squeeze", b.shape_of(self, dim, dim + 1), dtype=i64, shape=())
        count = b.op("Add", b.op("Div", b.op("Sub", length_value, b.const(size, i64)), b.const(step, i64)),
                     b.const(1, i64), dtype=i64, shape=())
        starts = b.op("Mul", b.op("Range", b.const(0, i64), count, b.const(1, i64)), b.const(step, i64))
        index = b.op("Add", b.op("Unsqueeze", starts, b.const([1], i64)), b.const([list(range(size))], i64),
                     dtype=i64, shape=(None, size))
    picked = b.op("Gather", self, index, axis=dim)  # dims: before, windows, size, after
    perm = list(range(dim + 1)) + list(range(dim + 2, rank + 1)) + [dim + 1]
    return b.op("Transpose", picked, perm=perm)


def strided_positions(b: GraphBuilder, size: Sequence[int | Value], stride: Sequence[int | Value],
                      storage_offset: int | Value | None) -> Value:
    """Flat storage position of every element of an ``as_strided`` view, shaped ``size``.

    ``offset + sum_d arange(size[d]) * stride[d]`` broadcast over the dims: a constant when
    every size, stride and the offset are ints, computed in the graph when some are symbolic.
    """
    offset = storage_offset or 0
    if all(isinstance(v, int) for v in (*size, *stride, offset)):
        positions = torch.full(tuple(size), offset, dtype=torch.int64)  # type: ignore[arg-type]
        for dim, (n, st) in enumerate(zip(size, stride)):
            view = [1] * len(size)
            view[dim] = n  # type: ignore[call-overload]
            positions = positions + (torch.arange(n, dtype=torch.int64) * st).reshape(view)  # type: ignore[arg-type]
        return b.const(positions)
    i64 = torch.int64
    out = _int_scalar(b, offset)
    for dim, (n, st) in enumerate(zip(size, stride)):
        steps = b.op("Range", b.const(0, i64), _int_scalar(b, n), b.const(1, i64), dtype=i64, shape=(None,))
        term = b.op("Mul", steps, _int_scalar(b, st), dtype=i64, shape=(None,))
        others = [d for d in range(len(size)) if d != dim]
        if others:
            term = b.op("Unsqueeze", term, b.const(others, i64), dtype=i64)
        out = b.op("Add", out, term, dtype=i64)
    out.shape = tuple(n if isinstance(n, int) else None for n in size)
    return out


def _int_scalar(b: GraphBuilder, item: int | Value) -> Value:
    """A 0-d int64 Value of a Python int or a (0-d or one-element) symbolic size."""
    if not isinstance(item, Value):
        return b.const(int(item), torch.int64)
    if item.rank == 0:
        return b.cast(item, torch.int64)
    return b.op("Reshape", b.cast(item, torch.int64), b.const([], torch.int64), dtype=torch.int64, shape=())


@translation(aten.as_strided.default, aten.as_strided_copy.default)
def aten_as_strided(b: GraphBuilder, self: Value, size: Sequence[int | Value], stride: Sequence[int | Value],
                    storage_offset: int | Value | None = None) -> Value:
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)"""
    # NOTE: ONNX values have no storage; ``self`` is taken as contiguous, its storage its own elements.
    flat = b.op("Reshape", self, b.const([-1], torch.int64))
    if all(isinstance(v, int) for v in (*size, *stride, storage_offset or 0)):
        offset = int(storage_offset or 0)
        contiguous = [math.prod(size[i + 1:]) for i in range(len(size))]  # type: ignore[arg-type]
        if all(st == c for st, c, n in zip(stride, contiguous, size) if n != 1):
            end = offset + math.prod(size)  # type: ignore[arg-type]
            part = b.op("Slice", flat, b.const([offset], torch.int64), b.const([end], torch.int64))
            return b.op("Reshape", part, b.const(list(size), torch.int64), allowzero=1)
    return b.op("Gather", flat, strided_positions(b, size, stride, storage_offset), axis=0, shape=b.node.out_shape)
