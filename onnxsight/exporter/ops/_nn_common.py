"""Helpers shared by the nn, pooling, resize, norm and attention translations (not translations)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
from onnx import helper

from onnxsight.exporter import _dtypes
from onnxsight.exporter._builder import GraphBuilder, Value


def expand_ints(value: int | Sequence[int], n: int, *, default: Sequence[int] | None = None) -> list[int]:
    """An ATen int[n] argument as a list of n ints (``3`` or ``[3]`` -> ``[3, 3]``; ``[]`` -> default)."""
    items = [value] if isinstance(value, int) else list(value)
    if not items and default is not None:
        items = list(default)
    if len(items) == 1:
        items = items * n
    if len(items) != n:
        raise ValueError(f"expected {n} values, got {items}")
    return [int(i) for i in items]


def reduce(b: GraphBuilder, op_type: str, x: Value, axes: Sequence[int], *, keepdims: bool = True) -> Value:
    """ReduceMean/ReduceMax/ReduceSum... over ``axes``.

    # NOTE: ReduceSum took ``axes`` as an input from opset 13, the other reductions
    # only from opset 18; opset 17 is still supported, so this helper (not a
    # translation) is the one place that looks at the opset.
    """
    if op_type == "ReduceSum" or b.opset >= 18:
        return b.op(op_type, x, b.const(list(axes), torch.int64), keepdims=int(keepdims))
    return b.op(op_type, x, axes=list(axes), keepdims=int(keepdims))


def dim(b: GraphBuilder, x: Value, axis: int) -> Value:
    """Size of ``x`` along ``axis`` as a 1-element int64 tensor (a constant when static)."""
    size = x.shape[axis] if x.shape is not None else None
    if isinstance(size, int):
        return b.const([size], torch.int64)
    rank = b.rank_of(x)
    axis %= rank
    return b.op("Shape", x, start=axis, end=axis + 1, dtype=torch.int64, shape=(1,))


def filled(b: GraphBuilder, value: float, like: Value, shape: Value) -> Value:
    """A tensor of ``shape`` (int64 1-D Value) filled with ``value`` in ``like``'s dtype."""
    return b.op("Expand", b.scalar(value, like), shape)


def channel_param(b: GraphBuilder, param: Value | None, fill: float, x: Value) -> Value:
    """A per-channel (axis 1) parameter, or a tensor of ``fill`` of size C when it is None."""
    if param is not None:
        return param
    channels = x.shape[1] if x.shape is not None and len(x.shape) > 1 else None
    if isinstance(channels, int):
        return b.const(torch.full((channels,), float(fill)), x.dtype)
    return filled(b, fill, x, dim(b, x, 1))


def to_channel_axis(b: GraphBuilder, param: Value, rank: int) -> Value:
    """Reshape a (C,) parameter to (C, 1, ..., 1) so it broadcasts on axis 1 of a rank-``rank`` tensor."""
    if rank <= 2:
        return param
    return b.op("Unsqueeze", param, b.const(list(range(1, rank - 1)), torch.int64))


def unbatched(x: Value, spatial: int) -> bool:
    """Whether ``x`` lacks the batch axis (C, *spatial) that ONNX's pooling and conv ops require."""
    return x.rank == spatial + 1


def add_batch(b: GraphBuilder, x: Value) -> Value:
    return b.op("Unsqueeze", x, b.const([0], torch.int64), shape=None if x.shape is None else (1, *x.shape))


def drop_batch(b: GraphBuilder, x: Value) -> Value:
    return b.op("Squeeze", x, b.const([0], torch.int64))


def random_like(b: GraphBuilder, op_type: str, like: Value, dtype: torch.dtype, **attrs: Any) -> Value:
    """RandomUniformLike/RandomNormalLike of ``like``'s shape, drawn in ``dtype``."""
    out = b.op(op_type, like, dtype=dtype, shape=like.shape, **attrs)
    # The ONNX attribute is named ``dtype`` like b.op's annotation keyword, so it is set on the node here.
    b.nodes[-1].attribute.append(helper.make_attribute("dtype", _dtypes.to_onnx(dtype)))
    return out


def dropout(b: GraphBuilder, x: Value, p: float) -> tuple[Value, Value]:
    """Training-mode dropout: each element of ``x`` kept with probability ``1 - p`` and scaled by ``1 / (1 - p)``,
    the rest 0; and the mask of those kept.

    NOTE: drawn with RandomUniformLike, not written as ONNX's Dropout: ONNX Runtime's inference builds remove every
    Dropout whose output is not a graph output and whose mask nothing reads (its EliminateDropout rule, whatever
    ``training_mode`` says), so a training-mode Dropout inside the graph would silently not draw.
    """
    keep = b.op("GreaterOrEqual", random_like(b, "RandomUniformLike", x, torch.float32),
                b.const(float(p), torch.float32), dtype=torch.bool)
    scaled = b.op("Mul", x, b.scalar(1.0 / (1.0 - p) if p < 1 else 0.0, x))
    return b.op("Where", keep, scaled, b.scalar(0.0, x), dtype=x.dtype), keep
