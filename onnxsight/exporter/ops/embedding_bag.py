"""embedding_bag (``nn.EmbeddingBag``, ``F.embedding_bag``): sums, means or maxima of embedding rows per bag.

Each looked-up row is scattered into its bag with ScatterND's reduction. A
row's bag is the running count of bag starts up to its position (a CumSum
over the starts marked by ScatterElements). Rows that belong to no bag
(``padding_idx``) go to an extra bag that is cut off at the end.

# NOTE: with ``include_last_offset`` the last offset is documented to be the
# number of indices, and PyTorch's test_embedding_bag passes a smaller one.
# Eager then sums (sum and mean modes, without padding_idx) only the rows
# before the last offset, while its mean still divides by the bag's count to
# the end of the indices, and its max and padding_idx paths run to the end.
# The translation does the same: rows at or after the last offset are zeroed
# for those sums, their bag (and count) kept.

Only the first output (the bags) is translated; offset2bag, bag_size and
max_indices are eager's bookkeeping for the backward pass.
"""

from __future__ import annotations

import torch

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import dim, reduce

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2


def _scalar(b: GraphBuilder, size: Value) -> Value:
    """A 1-element int64 Value as a 0-d one."""
    return b.op("Squeeze", size, b.const([0], torch.int64), dtype=torch.int64, shape=())


def _bags(b: GraphBuilder, indices: Value, offsets: Value, include_last_offset: bool,
          padding_idx: int) -> tuple[Value, Value]:
    """(bag of each index, shaped (N, 1), with B for the indices in no bag; the bag count B as a 1-element tensor)."""
    i64 = torch.int64
    count = dim(b, indices, 0)
    starts = b.cast(offsets, i64)
    bags = dim(b, offsets, 0)
    if include_last_offset:
        bags = b.op("Sub", bags, b.const([1], i64), dtype=i64, shape=(1,))
        starts = b.op("Slice", starts, b.const([0], i64), bags, b.const([0], i64), dtype=i64)
    # Bag starts marked on positions 0..N (a start at N begins an empty trailing bag), then counted.
    marks = b.op("Expand", b.const(0, i64), b.op("Add", count, b.const([1], i64), dtype=i64), dtype=i64)
    marks = b.op("ScatterElements", marks, starts, b.op("Expand", b.const([1], i64), b.shape_of(starts)),
                 axis=0, reduction="add", dtype=i64)
    marks = b.op("Slice", marks, b.const([0], i64), count, b.const([0], i64), dtype=i64)
    bag = b.op("Sub", b.op("CumSum", marks, b.const(0, i64), dtype=i64), b.const(1, i64), dtype=i64)
    outside = b.op("Less", bag, b.const(0, i64), dtype=torch.bool)
    if padding_idx >= 0:
        padded = b.op("Equal", b.cast(indices, i64), b.const(padding_idx, i64), dtype=torch.bool)
        outside = b.op("Or", outside, padded, dtype=torch.bool)
    bag = b.op("Where", outside, _scalar(b, bags), bag, dtype=i64)
    return b.op("Unsqueeze", bag, b.const([1], i64), dtype=i64), bags


def _before_last_offset(b: GraphBuilder, rows: Value, indices: Value, offsets: Value) -> Value:
    """``rows`` with those at or after the last offset zeroed: what eager's sum adds up (see the NOTE)."""
    i64 = torch.int64
    last = b.cast(b.op("Gather", offsets, b.const(-1, i64), axis=0, dtype=offsets.dtype, shape=()), i64)
    positions = b.op("Range", b.const(0, i64), _scalar(b, dim(b, indices, 0)), b.const(1, i64), dtype=i64)
    keep = b.op("Unsqueeze", b.op("Less", positions, last, dtype=torch.bool), b.const([1], i64), dtype=torch.bool)
    return b.op("Where", keep, rows, b.scalar(0.0, rows))


def _embedding_bag(b: GraphBuilder, weight: Value, indices: Value, offsets: Value, mode: int,
                   per_sample_weights: Value | None, include_last_offset: bool, padding_idx: int | None,
                   *, dense_max: bool) -> tuple[Value | None, ...]:
    """The (B, D) bags and None for the three bookkeeping outputs (an error if one of them is read)."""
    if any(b.node.output_used(i) for i in (1, 2, 3)):
        raise UnsupportedVariant("outputs", "offset2bag, bag_size or max_indices read", "output 0 (the bags) only")
    if indices.rank != 1:
        raise UnsupportedVariant("indices", f"{indices.rank}-D", "1-D indices (F.embedding_bag flattens them)")
    i64 = torch.int64
    bag, bags = _bags(b, indices, offsets, include_last_offset, -1 if padding_idx is None else int(padding_idx))
    rows = b.op("Gather", weight, indices, axis=0)                                    # (N, D)
    if include_last_offset and (padding_idx is None or padding_idx < 0) and mode in (_SUM, _MEAN):
        rows = _before_last_offset(b, rows, indices, offsets)
    if per_sample_weights is not None:
        rows = b.op("Mul", rows, b.op("Unsqueeze", b.cast(per_sample_weights, weight.dtype), b.const([1], i64)))
    width = dim(b, weight, 1)
    shape = b.op("Concat", b.op("Add", bags, b.const([1], i64), dtype=i64), width, axis=0, dtype=i64)
    if mode in (_SUM, _MEAN):
        # half types add up in float32, as PyTorch's kernel does (and ONNX Runtime's CPU ScatterND has no
        # float16 'add' reduction)
        acc = _dtypes.opmath(weight.dtype)
        rows = b.cast(rows, acc)
        total = b.op("ScatterND", b.op("Expand", b.scalar(0.0, acc), shape), bag, rows, reduction="add")
        if mode == _MEAN:
            ones = b.op("Expand", b.scalar(1.0, acc), b.shape_of(bag))
            counts = b.op("ScatterND", b.op("Expand", b.scalar(0.0, acc), b.shape_of(total, 0, 1)),
                          bag, b.op("Squeeze", ones, b.const([1], i64)), reduction="add")
            counts = b.op("Max", counts, b.scalar(1.0, acc))
            total = b.op("Div", total, b.op("Unsqueeze", counts, b.const([1], i64)))
        out = b.cast(total, weight.dtype)
    elif mode == _MAX:
        lowest = b.scalar(float("-inf"), weight)
        if dense_max:  # opset 17: ScatterND has no max reduction; (B+1, N, D) of candidates reduced over N
            rows_of = b.op("Range", b.const(0, i64), _scalar(b, b.op("Add", bags, b.const([1], i64), dtype=i64)),
                           b.const(1, i64), dtype=i64)
            member = b.op("Equal", b.op("Unsqueeze", rows_of, b.const([1], i64)),
                          b.op("Squeeze", bag, b.const([1], i64)), dtype=torch.bool)           # (B+1, N)
            member = b.op("Unsqueeze", member, b.const([2], i64), dtype=torch.bool)
            out = reduce(b, "ReduceMax", b.op("Where", member, rows, lowest), [1], keepdims=False)
        else:
            out = b.op("ScatterND", b.op("Expand", lowest, shape), bag, rows, reduction="max")
        out = b.op("Where", b.op("Equal", out, lowest, dtype=torch.bool), b.scalar(0.0, weight), out)  # empty bags
    else:
        raise UnsupportedVariant("mode", mode, "0 (sum), 1 (mean), 2 (max)")
    out = b.op("Slice", out, b.const([0], i64), bags, b.const([0], i64), dtype=weight.dtype, shape=b.node.out_shape)
    return out, None, None, None


@translation(aten._embedding_bag.default, aten._embedding_bag_forward_only.default, since=18)
def aten_embedding_bag(b: GraphBuilder, weight: Value, indices: Value, offsets: Value,
                       scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                       per_sample_weights: Value | None = None, include_last_offset: bool = False,
                       padding_idx: int = -1) -> tuple[Value | None, ...]:
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0,
    bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1)
    -> (Tensor, Tensor, Tensor, Tensor)  (and _embedding_bag_forward_only, same schema)
    """
    return _embedding_bag(b, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                          padding_idx, dense_max=False)


@translation(aten._embedding_bag.default, aten._embedding_bag_forward_only.default, since=16, until=17)
def aten_embedding_bag_17(b: GraphBuilder, weight: Value, indices: Value, offsets: Value,
                          scale_grad_by_freq: bool = False, mode: int = 0, sparse: bool = False,
                          per_sample_weights: Value | None = None, include_last_offset: bool = False,
                          padding_idx: int = -1) -> tuple[Value | None, ...]:
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0,
    bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1)
    -> (Tensor, Tensor, Tensor, Tensor)

    ScatterND's max reduction arrived in opset 18; before it mode=max compares every row with every bag.
    """
    return _embedding_bag(b, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                          padding_idx, dense_max=True)
