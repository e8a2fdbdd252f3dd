"""Counting and mixture-of-experts routing: ``aten.histc`` (tokens per expert), ``aten.bincount``
and transformers' grouped GEMM.

transformers 5's default experts sort the (token, expert) pairs by expert, count them with
``torch.histc`` and run ``transformers::grouped_mm_fallback`` (a custom op: one GEMM per expert
over its rows). ONNX has neither; both are written here from ops that keep every size dynamic.
The custom op is registered by name: transformers is not a dependency of onnxsight, and a model
that calls it has imported it already.
"""

from __future__ import annotations

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

aten = torch.ops.aten


@translation(aten.histc.default)
def aten_histc(b: GraphBuilder, self: Value, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Value:
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor

    Equal-width bins over [min, max]; elements outside (and NaN) are ignored and ``max`` itself
    falls in the last bin, as torch does. ``min == max`` takes the data's own range, widened by 1
    each way when that is one value. An element's bin is ``(x - min) * bins / (max - min)`` in the
    input's dtype, in torch's order, so elements near an edge land where torch puts them. The
    counts are a one-hot of each element's bin, summed.
    """
    dtype = self.dtype if self.dtype is not None and self.dtype.is_floating_point else torch.float32
    x = b.op("Reshape", b.cast(self, dtype), b.const([-1], torch.int64), dtype=dtype)
    low, high = _histc_range(b, x, float(min), float(max), dtype)
    inside = b.op("And", b.op("GreaterOrEqual", x, low, dtype=torch.bool), b.op("LessOrEqual", x, high,
                                                                               dtype=torch.bool), dtype=torch.bool)
    scaled = b.op("Mul", b.op("Sub", x, low, dtype=dtype), b.scalar(float(bins), dtype), dtype=dtype)
    scaled = b.op("Div", scaled, b.op("Sub", high, low, dtype=dtype), dtype=dtype)
    index = b.op("Min", b.cast(b.op("Floor", scaled, dtype=dtype), torch.int64), b.const(bins - 1, torch.int64),
                 dtype=torch.int64)
    edges = b.const(list(range(bins)), torch.int64)
    hits = b.op("And", b.op("Equal", b.op("Unsqueeze", index, b.const([1], torch.int64), dtype=torch.int64), edges,
                            dtype=torch.bool),
                b.op("Unsqueeze", inside, b.const([1], torch.int64), dtype=torch.bool), dtype=torch.bool)
    counts = b.op("ReduceSum", b.cast(hits, dtype), b.const([0], torch.int64), keepdims=0, dtype=dtype,
                  shape=(bins,))
    return b.cast(counts, b.node.out_dtype or dtype)


@translation(aten.bincount.default)
def aten_bincount(b: GraphBuilder, self: Value, weights: Value | None = None, minlength: int = 0) -> Value:
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor

    Ones (or the weights) added with ScatterElements(add) into zeros of length max(max(self) + 1,
    minlength), a length the data decides, as torch's. A -1 is appended before the max so an empty
    input gives ``minlength`` zeros (torch's values are never negative).
    """
    if not isinstance(minlength, int):
        raise UnsupportedVariant("minlength", minlength, "a Python int")
    i64 = torch.int64
    dtype = b.node.out_dtype or (i64 if weights is None else torch.float64)
    x = b.op("Reshape", b.cast(self, i64), b.const([-1], i64), dtype=i64)
    largest = b.op("ReduceMax", b.op("Concat", x, b.const([-1], i64), axis=0, dtype=i64), b.const([0], i64),
                   keepdims=1, dtype=i64)
    length = b.op("Max", b.op("Add", largest, b.const([1], i64), dtype=i64), b.const([minlength], i64), dtype=i64)
    zeros = b.op("Expand", b.scalar(0, dtype), length, dtype=dtype)
    if weights is None:
        updates = b.op("Expand", b.scalar(1, dtype), b.shape_of(x), dtype=dtype)
    else:
        updates = b.op("Reshape", b.cast(weights, dtype), b.const([-1], i64), dtype=dtype)
    return b.op("ScatterElements", zeros, x, updates, axis=0, reduction="add", dtype=dtype, shape=b.node.out_shape)


def _histc_range(b: GraphBuilder, x: Value, low: float, high: float, dtype: torch.dtype) -> tuple[Value, Value]:
    """histc's outer edges: the arguments, or when they are equal the data's min and max (each moved
    1 outwards when those are equal too), as torch's histc_select_outer_bin_edges."""
    if low != high:
        return b.scalar(low, dtype), b.scalar(high, dtype)
    axes = b.const([0], torch.int64)
    smallest = b.op("ReduceMin", x, axes, keepdims=0, dtype=dtype, shape=())
    largest = b.op("ReduceMax", x, axes, keepdims=0, dtype=dtype, shape=())
    same = b.op("Equal", smallest, largest, dtype=torch.bool)
    one = b.scalar(1.0, dtype)
    return (b.op("Where", same, b.op("Sub", smallest, one, dtype=dtype), smallest, dtype=dtype, shape=()),
            b.op("Where", same, b.op("Add", largest, one, dtype=dtype), largest, dtype=dtype, shape=()))


@translation("transformers::grouped_mm_fallback.default")
def transformers_grouped_mm(b: GraphBuilder, input: Value, weight: Value, offs: Value) -> Value:
    """grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor

    ``input`` (S, K) is sorted by expert, ``weight`` (E, K, N), ``offs`` (E,) the cumulative row
    counts: row r belongs to expert ``#{e: offs[e] <= r}``; rows past ``offs[-1]`` stay zero.
    Each row gathers its expert's matrix ((S, K, N), the memory of one weight per row) for one
    batched MatMul.
    """
    rows = b.op("Range", b.const(0, torch.int64), b.op("Squeeze", b.shape_of(input, 0, 1), b.const([0], torch.int64),
                                                       dtype=torch.int64, shape=()),
                b.const(1, torch.int64), dtype=torch.int64)
    ends = b.op("Unsqueeze", b.cast(offs, torch.int64), b.const([0], torch.int64), dtype=torch.int64)   # (1, E)
    passed = b.op("LessOrEqual", ends, b.op("Unsqueeze", rows, b.const([1], torch.int64), dtype=torch.int64),
                  dtype=torch.bool)                                                                      # (S, E)
    expert = b.op("ReduceSum", b.cast(passed, torch.int64), b.const([1], torch.int64), keepdims=0,
                  dtype=torch.int64)                                                                     # (S,)
    experts = b.shape_of(weight, 0, 1)
    last = b.op("Sub", b.op("Squeeze", experts, b.const([0], torch.int64), dtype=torch.int64, shape=()),
                b.const(1, torch.int64), dtype=torch.int64)
    valid = b.op("LessOrEqual", expert, last, dtype=torch.bool)
    chosen = b.op("Gather", weight, b.op("Min", expert, last, dtype=torch.int64), axis=0, dtype=weight.dtype)
    product = b.op("MatMul", b.op("Unsqueeze", input, b.const([1], torch.int64), dtype=input.dtype), chosen,
                   dtype=input.dtype)                                                                    # (S, 1, N)
    out = b.op("Squeeze", product, b.const([1], torch.int64), dtype=input.dtype)
    mask = b.op("Unsqueeze", b.cast(valid, input.dtype), b.const([1], torch.int64), dtype=input.dtype)
    return b.op("Mul", out, mask, dtype=input.dtype, shape=b.node.out_shape)
