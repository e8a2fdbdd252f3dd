"""Composite (CompositeImplicitAutograd) ATen ops as torch.export captures them.

NOTE: these ops never reach core ATen: run_decompositions rewrites them. But
that re-trace is most of an export's time, and the captured graph can be
translated directly when every op in it has a translation (see
``needs_decomposition``). So the composite ops that real models capture most
(conv2d, batch_norm, to, pad, flatten, pooling, ...) are translated here by
delegating to the core op's translation in its family module.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import add_batch, drop_batch, expand_ints, unbatched
from onnxsight.exporter.ops.elementwise import aten_maximum, aten_minimum
from onnxsight.exporter.ops.elementwise_logic import aten_bitwise_and, aten_bitwise_or
from onnxsight.exporter.ops.nn import _pad, aten_convolution
from onnxsight.exporter.ops.norm import _batch_norm_inference, _batch_stats_norm
from onnxsight.exporter.ops.pooling import _adaptive_avg, _max_pool

aten = torch.ops.aten
higher_order = torch.ops.higher_order


# -- convolution ---------------------------------------------------------------------------------------------
@translation(aten.conv1d.default, aten.conv2d.default, aten.conv3d.default)
def aten_conv(b: GraphBuilder, input: Value, weight: Value, bias: Value | None = None, stride: Sequence[int] = (1,),
              padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), groups: int = 1) -> Value:
    """conv2d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, SymInt[2] padding=0,
    SymInt[2] dilation=1, SymInt groups=1) -> Tensor"""
    return _batched(b, input, weight, lambda x: aten_convolution(b, x, weight, bias, stride, padding, dilation,
                                                                 False, [0], groups))


def _batched(b: GraphBuilder, input: Value, weight: Value, conv: Any) -> Value:
    """Run ``conv`` on a batched input: torch's conv*d accept (C, *spatial), ONNX's Conv does not."""
    if not unbatched(input, b.rank_of(weight) - 2):
        return conv(input)
    return drop_batch(b, conv(add_batch(b, input)))


@translation(aten._convolution.default)
def aten__convolution(b: GraphBuilder, input: Value, weight: Value, bias: Value | None, stride: Sequence[int],
                      padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                      output_padding: Sequence[int], groups: int, benchmark: bool, deterministic: bool,
                      cudnn_enabled: bool, allow_tf32: bool) -> Value:
    """_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,
    SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark,
    bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor

    The backend flags choose kernels (and TF32's lower precision on CUDA), not the result: ONNX's Conv
    computes the convolution itself.
    """
    return aten_convolution(b, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@translation(aten._convolution.deprecated)
def aten__convolution_deprecated(b: GraphBuilder, input: Value, weight: Value, bias: Value | None,
                                 stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                                 transposed: bool, output_padding: Sequence[int], groups: int, benchmark: bool,
                                 deterministic: bool, cudnn_enabled: bool) -> Value:
    """_convolution.deprecated(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, int[] padding,
    SymInt[] dilation, bool transposed, int[] output_padding, SymInt groups, bool benchmark,
    bool deterministic, bool cudnn_enabled) -> Tensor"""
    return aten_convolution(b, input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@translation(aten.conv1d.padding, aten.conv2d.padding, aten.conv3d.padding)
def aten_conv_padding(b: GraphBuilder, input: Value, weight: Value, bias: Value | None = None,
                      stride: Sequence[int] = (1,), padding: str = "valid", dilation: Sequence[int] = (1,),
                      groups: int = 1) -> Value:
    """conv2d.padding(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1, str padding="valid",
    SymInt[2] dilation=1, SymInt groups=1) -> Tensor"""
    return _batched(b, input, weight, lambda x: _conv_padding(b, x, weight, bias, stride, padding, dilation, groups))


def _conv_padding(b: GraphBuilder, input: Value, weight: Value, bias: Value | None, stride: Sequence[int],
                  padding: str, dilation: Sequence[int], groups: int) -> Value:
    spatial = b.rank_of(weight) - 2
    if padding == "valid":
        return aten_convolution(b, input, weight, bias, stride, [0] * spatial, dilation, False, [0], groups)
    kernel = weight.shape[2:] if weight.shape is not None else None
    if padding != "same" or kernel is None or not all(isinstance(k, int) for k in kernel):
        raise UnsupportedVariant("padding", repr(padding), "'valid', or 'same' with a static kernel size")
    # torch's 'same': total = dilation * (kernel - 1), the extra element (odd totals) at the end.
    totals = [d * (k - 1) for d, k in zip(expand_ints(dilation, spatial), kernel)]
    begins = [t // 2 for t in totals]
    if all(t % 2 == 0 for t in totals):
        return aten_convolution(b, input, weight, bias, stride, begins, dilation, False, [0], groups)
    padded = b.op("Pad", input, b.const([0, 0] + begins + [0, 0] + [t - s for t, s in zip(totals, begins)],
                                        torch.int64))
    return aten_convolution(b, padded, weight, bias, stride, [0] * spatial, dilation, False, [0], groups)


@translation(aten.conv_transpose1d.default, aten.conv_transpose2d.input, aten.conv_transpose3d.input)
def aten_conv_transpose(b: GraphBuilder, input: Value, weight: Value, bias: Value | None = None,
                        stride: Sequence[int] = (1,), padding: Sequence[int] = (0,),
                        output_padding: Sequence[int] = (0,), groups: int = 1,
                        dilation: Sequence[int] = (1,)) -> Value:
    """conv_transpose2d.input(Tensor input, Tensor weight, Tensor? bias=None, SymInt[2] stride=1,
    SymInt[2] padding=0, SymInt[2] output_padding=0, SymInt groups=1, SymInt[2] dilation=1) -> Tensor"""
    return _batched(b, input, weight, lambda x: aten_convolution(b, x, weight, bias, stride, padding, dilation,
                                                                 True, output_padding, groups))


# -- normalisation and pooling -------------------------------------------------------------------------------
@translation(aten.batch_norm.default)
def aten_batch_norm(b: GraphBuilder, input: Value, weight: Value | None, bias: Value | None,
                    running_mean: Value | None, running_var: Value | None, training: bool, momentum: float,
                    eps: float, cudnn_enabled: bool) -> Value:
    """batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var,
    bool training, float momentum, float eps, bool cudnn_enabled) -> Tensor"""
    if training or running_mean is None or running_var is None:
        return _batch_stats_norm(b, input, weight, bias, eps)[0]  # running-stat updates are not outputs
    return _batch_norm_inference(b, input, weight, bias, running_mean, running_var, eps)


@translation(aten.max_pool1d.default)
def aten_max_pool1d(b: GraphBuilder, self: Value, kernel_size: Sequence[int], stride: Sequence[int] = (),
                    padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Value:
    """max_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, int[1] dilation=1,
    bool ceil_mode=False) -> Tensor"""
    return _max_pool(b, self, 1, kernel_size, stride, padding, dilation, ceil_mode, with_indices=False)[0]


@translation(aten.max_pool2d.default)
def aten_max_pool2d(b: GraphBuilder, self: Value, kernel_size: Sequence[int], stride: Sequence[int] = (),
                    padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Value:
    """max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1,
    bool ceil_mode=False) -> Tensor"""
    return _max_pool(b, self, 2, kernel_size, stride, padding, dilation, ceil_mode, with_indices=False)[0]


@translation(aten.max_pool3d.default)
def aten_max_pool3d(b: GraphBuilder, self: Value, kernel_size: Sequence[int], stride: Sequence[int] = (),
                    padding: Sequence[int] = (0,), dilation: Sequence[int] = (1,), ceil_mode: bool = False) -> Value:
    """max_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1,
    bool ceil_mode=False) -> Tensor"""
    return _max_pool(b, self, 3, kernel_size, stride, padding, dilation, ceil_mode, with_indices=False)[0]


@translation(aten.adaptive_avg_pool1d.default)
def aten_adaptive_avg_pool1d(b: GraphBuilder, self: Value, output_size: Sequence[int]) -> Value:
    """adaptive_avg_pool1d(Tensor self, int[1] output_size) -> Tensor"""
    return _adaptive_avg(b, self, output_size, 1, "adaptive_avg_pool1d")


@translation(aten.adaptive_avg_pool2d.default)
def aten_adaptive_avg_pool2d(b: GraphBuilder, self: Value, output_size: Sequence[int]) -> Value:
    """adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor"""
    return _adaptive_avg(b, self, output_size, 2, "adaptive_avg_pool2d")


# -- padding, casts and reshapes ---------------------------------------------------------------------------
_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@translation(aten.pad.default)
def aten_pad(b: GraphBuilder, self: Value, pad: Sequence[int | Value], mode: str = "constant",
             value: float | None = None) -> Value:
    """pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None) -> Tensor"""
    if mode not in _PAD_MODES:
        raise UnsupportedVariant("mode", repr(mode), ", ".join(repr(m) for m in sorted(_PAD_MODES)))
    rank = b.rank_of(self)
    # Negative entries crop. torch clamps into the original tensor, which is padding the
    # positive entries first and cropping after (cropping first can leave nothing to replicate).
    crop = [p if isinstance(p, int) and p < 0 else 0 for p in pad]
    pad = [max(p, 0) if isinstance(p, int) else p for p in pad]
    out = _pad(b, self, pad, _PAD_MODES[mode], value if mode == "constant" else None)
    return _crop(b, out, crop, rank) if any(crop) else out


def _crop(b: GraphBuilder, x: Value, pad: Sequence[Any], rank: int) -> Value:
    """Slice away -p elements for each negative entry p of a torch pad list (last axis first, begin/end pairs)."""
    starts, ends, axes = [], [], []
    for index in range(0, len(pad), 2):
        begin, end = pad[index], pad[index + 1]
        begin = -begin if isinstance(begin, int) and begin < 0 else 0
        end = end if isinstance(end, int) and end < 0 else 2**62
        if begin or end != 2**62:
            starts.append(begin), ends.append(end), axes.append(rank - 1 - index // 2)
    return b.op("Slice", x, b.const(starts, torch.int64), b.const(ends, torch.int64), b.const(axes, torch.int64),
                shape=(None,) * rank)


@translation(aten.to.dtype)
def aten_to_dtype(b: GraphBuilder, self: Value, dtype: torch.dtype, non_blocking: bool = False,
                  copy: bool = False, memory_format: Any = None) -> Value:
    """to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False,
    MemoryFormat? memory_format=None) -> Tensor(a)"""
    return b.cast(self, dtype) if dtype != self.dtype else b.op("Identity", self)


@translation(aten.to.dtype_layout)
def aten_to_dtype_layout(b: GraphBuilder, self: Value, *, dtype: torch.dtype | None = None, layout: Any = None,
                         device: Any = None, pin_memory: bool | None = None, non_blocking: bool = False,
                         copy: bool = False, memory_format: Any = None) -> Value:
    """to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None,
    bool? pin_memory=None, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)"""
    return b.cast(self, dtype) if dtype is not None and dtype != self.dtype else b.op("Identity", self)


@translation(aten.to.device)
def aten_to_device(b: GraphBuilder, self: Value, device: Any, dtype: torch.dtype, non_blocking: bool = False,
                   copy: bool = False, memory_format: Any = None) -> Value:
    """to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, bool copy=False,
    MemoryFormat? memory_format=None) -> Tensor(a)"""
    return b.cast(self, dtype) if dtype != self.dtype else b.op("Identity", self)


@translation(aten.flatten.using_ints)
def aten_flatten(b: GraphBuilder, self: Value, start_dim: int = 0, end_dim: int = -1) -> Value:
    """flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)"""
    rank = b.rank_of(self)
    if rank == 0:
        return b.op("Reshape", self, b.const([1], torch.int64))
    start, end = start_dim % rank, end_dim % rank
    if start == end:
        return b.op("Identity", self)
    return _reshape_dims(b, self, start, end, b.const([-1], torch.int64))


@translation(aten.unflatten.int)
def aten_unflatten(b: GraphBuilder, self: Value, dim: int, sizes: Sequence[int | Value]) -> Value:
    """unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)"""
    dim %= b.rank_of(self)
    return _reshape_dims(b, self, dim, dim, b.int_list(list(sizes)))


def _reshape_dims(b: GraphBuilder, x: Value, first: int, last: int, sizes: Value) -> Value:
    """Reshape ``x`` with dims ``first..last`` (inclusive) replaced by ``sizes``; other dims keep their runtime size."""
    parts = []
    if first > 0:
        parts.append(b.shape_of(x, 0, first))
    parts.append(sizes)
    if last < b.rank_of(x) - 1:
        parts.append(b.shape_of(x, last + 1))
    shape = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=0, dtype=torch.int64)
    return b.op("Reshape", x, shape)


# -- Python operators and binary aliases ---------------------------------------------------------------------
@translation(aten.__and__.Tensor)
def aten_and(b: GraphBuilder, self: Value, other: Value) -> Value:
    """__and__.Tensor(Tensor self, Tensor other) -> Tensor"""
    return aten_bitwise_and(b, self, other)


@translation(aten.__or__.Tensor)
def aten_or(b: GraphBuilder, self: Value, other: Value) -> Value:
    """__or__.Tensor(Tensor self, Tensor other) -> Tensor"""
    return aten_bitwise_or(b, self, other)


@translation(aten.min.other)
def aten_min_other(b: GraphBuilder, self: Value, other: Value) -> Value:
    """min.other(Tensor self, Tensor other) -> Tensor"""
    return aten_minimum(b, self, other)


@translation(aten.max.other)
def aten_max_other(b: GraphBuilder, self: Value, other: Value) -> Value:
    """max.other(Tensor self, Tensor other) -> Tensor"""
    return aten_maximum(b, self, other)


# -- higher-order ops that only scope their body ---------------------------------------------------------
@translation(higher_order.wrap_with_set_grad_enabled)
def higher_order_wrap_with_set_grad_enabled(b: GraphBuilder, enable_grad: bool, body: torch.fx.GraphModule,
                                            *args: Any) -> Any:
    """wrap_with_set_grad_enabled(bool enable_grad, GraphModule body, *args): the body, inlined.

    Gradient mode means nothing at inference, so the body's nodes join this graph.
    """
    return tuple(b.translate_subgraph(b, body, list(args), f"{b.node.name}/"))


@translation(aten.diff.default)
def aten_diff(b: GraphBuilder, self: Value, n: int = 1, dim: int = -1, prepend: Value | None = None,
              append: Value | None = None) -> Value:
    """diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor"""
    rank = b.rank_of(self)
    axis = dim % rank
    parts = [p for p in (prepend, self, append) if p is not None]
    x = parts[0] if len(parts) == 1 else b.op("Concat", *parts, axis=axis)
    axes = b.const([axis], torch.int64)
    for _ in range(n):
        later = b.op("Slice", x, b.const([1], torch.int64), b.const([2**62], torch.int64), axes)
        earlier = b.op("Slice", x, b.const([0], torch.int64), b.const([-1], torch.int64), axes)
        # torch: bool tensors differ by XOR (`!=`), everything else by subtraction
        x = b.op("Xor" if self.dtype == torch.bool else "Sub", later, earlier)
    return x
