"""Convolution, reflection/replication padding and pixel (un)shuffle."""

from __future__ import annotations

from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import expand_ints

aten = torch.ops.aten


@translation(aten.convolution.default)
def aten_convolution(b: GraphBuilder, input: Value, weight: Value, bias: Value | None, stride: Sequence[int],
                     padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                     output_padding: Sequence[int], groups: int) -> Value:
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,
    SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor"""
    spatial = b.rank_of(weight) - 2
    pads = expand_ints(padding, spatial)
    attrs = dict(strides=expand_ints(stride, spatial), pads=pads + pads, dilations=expand_ints(dilation, spatial),
                 group=int(groups))
    if weight.shape is not None and all(isinstance(d, int) for d in weight.shape[2:]):
        attrs["kernel_shape"] = list(weight.shape[2:])
    if not transposed:
        return b.op("Conv", input, weight, bias, **attrs)
    extra = expand_ints(output_padding, spatial)
    if not any(extra):
        return b.op("ConvTranspose", input, weight, bias, **attrs)
    # NOTE: ONNX Runtime rejects output_padding >= stride, which torch allows when
    # dilation is larger. output_padding only moves the end crop, so cropping less
    # at the end (pads_end = padding - output_padding) gives the same result; what
    # lies beyond the full output (output_padding > padding) is zeros plus the bias.
    attrs["pads"] = pads + [max(p - e, 0) for p, e in zip(pads, extra)]
    beyond = [max(e - p, 0) for p, e in zip(pads, extra)]
    if not any(beyond):
        return b.op("ConvTranspose", input, weight, bias, **attrs)
    out = b.op("ConvTranspose", input, weight, None, **attrs)
    out = b.op("Pad", out, b.const([0] * (spatial + 2) + [0, 0] + beyond, torch.int64))
    if bias is None:
        return out
    return b.op("Add", out, b.op("Unsqueeze", bias, b.const(list(range(1, spatial + 1)), torch.int64)))


@translation(aten.conv_tbc.default)
def aten_conv_tbc(b: GraphBuilder, self: Value, weight: Value, bias: Value, pad: int = 0) -> Value:
    """conv_tbc(Tensor self, Tensor weight, Tensor bias, int pad=0) -> Tensor

    Time-batch-channel convolution (fairseq's): ``self`` (time, batch, in), ``weight`` (kernel, in, out);
    the same Conv over (batch, in, time) with the weight as (out, in, kernel).
    """
    x = b.op("Transpose", self, perm=[1, 2, 0])
    w = b.op("Transpose", weight, perm=[2, 1, 0])
    attrs = {"kernel_shape": [weight.shape[0]]} if weight.shape is not None and isinstance(weight.shape[0], int) \
        else {}
    out = b.op("Conv", x, w, bias, pads=[int(pad), int(pad)], **attrs)
    return b.op("Transpose", out, perm=[2, 0, 1])


# -- padding -----------------------------------------------------------------------------------------
def _pad(b: GraphBuilder, x: Value, padding: Sequence[int | Value], mode: str, value: float | None = None) -> Value:
    """torch's pad list (last axis first, begin/end pairs) as ONNX Pad's (all axes, begins then ends).

    ``value`` is the fill of ``mode="constant"`` (ONNX's default is 0).
    """
    rank = b.rank_of(x)
    pairs = [(padding[i], padding[i + 1]) for i in range(0, len(padding), 2)][::-1]
    lead = [0] * (rank - len(pairs))
    pads = b.int_list(lead + [p[0] for p in pairs] + lead + [p[1] for p in pairs])
    fill = b.scalar(value, x) if value else None
    return b.op("Pad", x, pads, fill, mode=mode, shape=(None,) * rank)


@translation(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)
def aten_reflection_pad(b: GraphBuilder, self: Value, padding: Sequence[int]) -> Value:
    """reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor  (and the 1d/3d overloads)"""
    return _pad(b, self, padding, "reflect")


@translation(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default)
def aten_replication_pad(b: GraphBuilder, self: Value, padding: Sequence[int]) -> Value:
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor  (and the 1d/3d overloads)"""
    if not any(isinstance(p, int) and p < 0 for p in padding):
        return _pad(b, self, padding, "edge")
    # NOTE: with a negative pad torch still clamps to the original input's edge
    # (out[j] = in[clamp(j - pad_begin, 0, size - 1)]); cropping first and padding
    # the rest, as ONNX Pad does, differs when the crop reaches the far edge.
    rank = b.rank_of(self)
    out = self
    for index in range(0, len(padding), 2):
        axis = rank - 1 - index // 2
        begin, end = padding[index], padding[index + 1]
        size = self.shape[axis] if self.shape is not None else None
        if not isinstance(size, int) or not isinstance(begin, int) or not isinstance(end, int):
            raise UnsupportedVariant("padding", list(padding),
                                     f"negative entries only with static sizes (input shape {self.shape})")
        if begin == 0 and end == 0:
            continue
        source = [min(max(j - begin, 0), size - 1) for j in range(size + begin + end)]
        out = b.op("Gather", out, b.const(source, torch.int64), axis=axis)
    return out


# -- pixel shuffle -------------------------------------------------------------------------------------
def _as_4d(b: GraphBuilder, x: Value, op_type: str, **attrs: object) -> Value:
    """Apply a 4-D-only op to (*, C, H, W): flatten the leading axes into one and restore them after."""
    if x.rank == 4:
        return b.op(op_type, x, **attrs)
    flat_shape = b.op("Concat", b.const([-1], torch.int64), b.shape_of(x, start=-3), axis=0, dtype=torch.int64)
    out = b.op(op_type, b.op("Reshape", x, flat_shape), **attrs)
    shape = b.op("Concat", b.shape_of(x, end=-3), b.shape_of(out, start=-3), axis=0, dtype=torch.int64)
    return b.op("Reshape", out, shape)


@translation(aten.pixel_shuffle.default)
def aten_pixel_shuffle(b: GraphBuilder, self: Value, upscale_factor: int) -> Value:
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor"""
    return _as_4d(b, self, "DepthToSpace", blocksize=int(upscale_factor), mode="CRD")


@translation(aten.pixel_unshuffle.default)
def aten_pixel_unshuffle(b: GraphBuilder, self: Value, downscale_factor: int) -> Value:
    """pixel_unshuffle(Tensor self, int downscale_factor) -> Tensor

    (*, C, H, W) -> (-1, C, H/r, r, W/r, r) -> Transpose to (-1, C, r, r, H/r, W/r) -> (*, C*r*r, H/r, W/r):
    torch's channel-major order, for any dtype and any channel count. ONNX SpaceToDepth orders channels
    block-major and has no integer kernel in ONNX Runtime, so it needed a static channel count for the
    reordering Gather and failed on int64.
    """
    r = int(downscale_factor)
    i64 = torch.int64
    factor = b.const([r], i64)
    channels, height, width = (b.shape_of(self, start=k, end=k + 1 or None) for k in (-3, -2, -1))
    rows, cols = (b.op("Div", size, factor, dtype=i64) for size in (height, width))
    split = b.op("Concat", b.const([-1], i64), channels, rows, factor, cols, factor, axis=0, dtype=i64)
    blocks = b.op("Transpose", b.op("Reshape", self, split), perm=[0, 1, 3, 5, 2, 4])
    merged = b.op("Mul", channels, b.const([r * r], i64), dtype=i64)
    shape = b.op("Concat", b.shape_of(self, end=-3), merged, rows, cols, axis=0, dtype=i64)
    return b.op("Reshape", blocks, shape, shape=b.node.out_shape)
