"""Upsampling (F.interpolate): nearest, linear, bilinear, bicubic, trilinear -> ONNX Resize (or Gather).

Both overload families are translated: ``.vec`` (output_size or scale_factors,
what F.interpolate calls) and ``.default`` (output_size with optional
per-axis scales). Output sizes are torch's exactly, for static and dynamic
inputs; _resize_exact says why ONNX Runtime's own arithmetic would differ and
how the scales are chosen (docs/ops.md, "Interpolation sizes").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._resize_exact import (exact_scale32, nearest_scale32, power_of_two,
                                                   resize_picks_torch_pixels, scale_candidates, torch_nearest_indices,
                                                   torch_output_size)

aten = torch.ops.aten


@dataclass
class _Axis:
    """One spatial axis: its input size (None when symbolic), torch's output size and mapping scale."""

    axis: int
    in_size: int | None
    out: int | Value          # an int, or a 1-D int64 Value of one element
    scale: float | None       # the scale torch maps coordinates with; None: in/out


def _axes(b: GraphBuilder, x: Value, spatial: int, output_size: Sequence[int | Value] | None,
          scales: Sequence[float | None] | None) -> list[_Axis]:
    """Per spatial axis, the output size as torch computes it (``compute_output_size``)."""
    rank = b.rank_of(x)
    given = list(scales) if scales else []
    factors = given * spatial if len(given) == 1 else given or [None] * spatial
    if not output_size and not all(f is not None for f in factors):
        raise ValueError("upsample needs output_size or scale factors")
    meta = b.node.out_shape if b.node.out_shape is not None and len(b.node.out_shape) == rank else None
    result = []
    for i, factor in enumerate(factors):
        axis = rank - spatial + i
        in_size = x.shape[axis] if x.shape is not None and isinstance(x.shape[axis], int) else None
        scale = float(factor) if factor is not None and factor > 0 else None
        out: int | Value
        if meta is not None and isinstance(meta[axis], int):
            out = meta[axis]
        elif output_size:
            item = output_size[i]
            out = int(item) if not isinstance(item, Value) else b.int_list([item])
        elif in_size is not None:
            out = torch_output_size(in_size, float(factor))
        else:  # floor(double(in) * scale), in the graph
            product = b.op("Mul", b.cast(_in_dim(b, x, axis), torch.float64), b.const([float(factor)], torch.float64))
            out = b.cast(b.op("Floor", product), torch.int64)
        result.append(_Axis(axis, in_size, out, scale))
    return result


def _in_dim(b: GraphBuilder, x: Value, axis: int) -> Value:
    return b.shape_of(x, start=axis, end=axis + 1)


def _sizes_input(b: GraphBuilder, x: Value, axes: list[_Axis]) -> Value:
    leading = x.shape[:axes[0].axis] if x.shape is not None else ()
    if all(isinstance(d, int) for d in leading):
        return b.int_list([*leading, *(a.out for a in axes)])
    return b.op("Concat", b.shape_of(x, end=axes[0].axis), b.int_list([a.out for a in axes]), axis=0,
                dtype=torch.int64)


def _resize(b: GraphBuilder, x: Value, spatial: int, mode: str, output_size: Sequence[int | Value] | None,
            scales: Sequence[float | None] | None, align_corners: bool | None, *, antialias: bool = False) -> Value:
    """Resize over the last ``spatial`` axes to torch's exact output size (see _resize_exact).

    Linear and cubic: ``sizes`` when torch maps coordinates with in/out (no scales, or
    align_corners); otherwise ``scales`` moved by a few float32 ulps so that the size
    derived from them, in float32 or double, is torch's. Nearest: a Resize where it
    provably picks torch's pixels, else a Gather of torch's source indices per axis.
    """
    axes = _axes(b, x, spatial, output_size, scales)
    if mode == "nearest":
        shortcuts = spatial == 2  # only torch's 2-d kernel copies at out == in and halves at out == 2 * in
        if all(_resize_is_exact_nearest(a, shortcuts) for a in axes):
            return b.op("Resize", x, None, None, _sizes_input(b, x, axes), mode="nearest",
                        coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        for a in axes:
            x = _gather_nearest(b, x, a, shortcuts)
        return x
    attrs: dict[str, object] = {"mode": mode}
    if antialias:
        # torch's antialiased kernels (PIL's): filter weights renormalised inside the
        # input (exclude_outside) and, for cubic, a = -0.5.
        if align_corners:
            raise UnsupportedVariant("align_corners", True, "False with antialias=True (ONNX Resize has no such form)")
        attrs.update(coordinate_transformation_mode="half_pixel", antialias=1, exclude_outside=1)
        if mode == "cubic":
            attrs["cubic_coeff_a"] = -0.5
    else:
        attrs["coordinate_transformation_mode"] = "align_corners" if align_corners else "half_pixel"
        if mode == "cubic":
            attrs.update(cubic_coeff_a=-0.75, exclude_outside=0)
    scale_input = None if align_corners else _scales_input(b, x, axes)
    if scale_input is None:
        return b.op("Resize", x, None, None, _sizes_input(b, x, axes), **attrs)
    return b.op("Resize", x, None, scale_input, **attrs)


def _resize_is_exact_nearest(a: _Axis, shortcuts: bool) -> bool:
    if isinstance(a.out, int) and a.in_size is not None:
        return resize_picks_torch_pixels(a.in_size, a.out, a.scale, shortcuts=shortcuts)
    return power_of_two(a.scale)  # out = k * in and dst // k in every arithmetic


def _gather_nearest(b: GraphBuilder, x: Value, a: _Axis, shortcuts: bool) -> Value:
    """x gathered along ``a.axis`` at torch's nearest source indices (see torch_nearest_indices)."""
    if isinstance(a.out, int) and a.in_size is not None:
        index = torch_nearest_indices(a.in_size, a.out, a.scale, shortcuts=shortcuts)
        if index.tolist() == list(range(a.in_size)):
            return x
        return b.op("Gather", x, b.const(index.tolist(), torch.int64), axis=a.axis)
    in_dim = b.const([a.in_size], torch.int64) if a.in_size is not None else _in_dim(b, x, a.axis)
    out_dim = b.const([a.out], torch.int64) if isinstance(a.out, int) else a.out
    count = b.op("Reshape", out_dim, b.const([], torch.int64), dtype=torch.int64, shape=())
    dst = b.op("Range", b.const(0, torch.int64), count, b.const(1, torch.int64), dtype=torch.int64)
    if a.scale is not None:
        step = b.const([float(nearest_scale32(a.scale))], torch.float32)
    else:
        step = b.op("Div", b.cast(in_dim, torch.float32), b.cast(out_dim, torch.float32))
    src = b.cast(b.op("Floor", b.op("Mul", b.cast(dst, torch.float32), step)), torch.int64)
    src = b.op("Min", src, b.op("Sub", in_dim, b.const([1], torch.int64)))
    if not shortcuts:
        return b.op("Gather", x, src, axis=a.axis)
    half = b.op("Div", dst, b.const(2, torch.int64))
    src = b.op("Where", b.op("Equal", out_dim, b.op("Mul", in_dim, b.const([2], torch.int64)), dtype=torch.bool),
               half, src)
    src = b.op("Where", b.op("Equal", out_dim, in_dim, dtype=torch.bool), dst, src)
    return b.op("Gather", x, src, axis=a.axis)


def _scales_input(b: GraphBuilder, x: Value, axes: list[_Axis]) -> Value | None:
    """float32 scales giving torch's sizes in ONNX Runtime, or None where sizes serve as well.

    None when some axis maps with in/out (no scale: ``sizes`` is that mapping) or when no
    float32 scale within MAX_ULPS gives torch's size (then ``sizes``: exact size, mapping
    in/out instead of 1/scale, documented in docs/ops.md).
    """
    if any(a.scale is None for a in axes):
        return None
    parts: list[float | Value] = []
    for a in axes:
        if a.in_size is not None and isinstance(a.out, int):
            chosen = exact_scale32(a.in_size, a.out, a.scale)
            if chosen is None:
                return None
            parts.append(float(chosen))
        else:
            parts.append(_scale_in_graph(b, x, a))
    ones = [1.0] * axes[0].axis
    if all(isinstance(p, float) for p in parts):
        return b.const(ones + parts, torch.float32)
    values = [b.const([p], torch.float32) if isinstance(p, float) else p for p in parts]
    return b.op("Concat", b.const(ones, torch.float32), *values, axis=0, dtype=torch.float32)


def _scale_in_graph(b: GraphBuilder, x: Value, a: _Axis) -> Value:
    """The first of the float32 candidates (nearest the user's scale first) whose size is torch's in float32
    and in double."""
    candidates = b.const([float(c) for c in scale_candidates(a.scale)], torch.float32)
    in_dim = b.const([a.in_size], torch.int64) if a.in_size is not None else _in_dim(b, x, a.axis)
    out_dim = b.const([a.out], torch.int64) if isinstance(a.out, int) else a.out
    hits = None
    for dtype in (torch.float32, torch.float64):  # ONNX Runtime's arithmetic, and shape inference's
        sizes = b.cast(b.op("Floor", b.op("Mul", b.cast(in_dim, dtype), b.cast(candidates, dtype))), torch.int64)
        equal = b.op("Equal", sizes, out_dim, dtype=torch.bool)
        hits = equal if hits is None else b.op("And", hits, equal, dtype=torch.bool)
    hits = b.cast(hits, torch.int32)
    first = b.op("ArgMax", hits, axis=0, keepdims=1, dtype=torch.int64)
    return b.op("Gather", candidates, first, axis=0)


# -- nearest ---------------------------------------------------------------------------------------------
@translation(aten.upsample_nearest1d.vec, aten.upsample_nearest2d.vec, aten.upsample_nearest3d.vec)
def aten_upsample_nearest_vec(b: GraphBuilder, input: Value, output_size: Sequence[int] | None,
                              scale_factors: Sequence[float] | None) -> Value:
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor
    (and the 1d/3d overloads)"""
    return _resize(b, input, b.rank_of(input) - 2, "nearest", output_size, scale_factors, None)


@translation(aten.upsample_nearest1d.default)
def aten_upsample_nearest1d(b: GraphBuilder, self: Value, output_size: Sequence[int],
                            scales: float | None = None) -> Value:
    """upsample_nearest1d(Tensor self, SymInt[1] output_size, float? scales=None) -> Tensor"""
    return _resize(b, self, 1, "nearest", output_size, [scales], None)


@translation(aten.upsample_nearest2d.default)
def aten_upsample_nearest2d(b: GraphBuilder, self: Value, output_size: Sequence[int],
                            scales_h: float | None = None, scales_w: float | None = None) -> Value:
    """upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None)
    -> Tensor"""
    return _resize(b, self, 2, "nearest", output_size, [scales_h, scales_w], None)


@translation(aten.upsample_nearest3d.default)
def aten_upsample_nearest3d(b: GraphBuilder, self: Value, output_size: Sequence[int],
                            scales_d: float | None = None, scales_h: float | None = None,
                            scales_w: float | None = None) -> Value:
    """upsample_nearest3d(Tensor self, SymInt[3] output_size, float? scales_d=None, float? scales_h=None,
    float? scales_w=None) -> Tensor"""
    return _resize(b, self, 3, "nearest", output_size, [scales_d, scales_h, scales_w], None)


# -- linear family ---------------------------------------------------------------------------------------
@translation(aten.upsample_linear1d.vec, aten.upsample_bilinear2d.vec, aten.upsample_trilinear3d.vec)
def aten_upsample_linear_vec(b: GraphBuilder, input: Value, output_size: Sequence[int] | None,
                             align_corners: bool, scale_factors: Sequence[float] | None) -> Value:
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners,
    float[]? scale_factors) -> Tensor  (and the linear1d/trilinear3d overloads)"""
    return _resize(b, input, b.rank_of(input) - 2, "linear", output_size, scale_factors, align_corners)


@translation(aten.upsample_bicubic2d.vec)
def aten_upsample_bicubic2d_vec(b: GraphBuilder, input: Value, output_size: Sequence[int] | None,
                                align_corners: bool, scale_factors: Sequence[float] | None) -> Value:
    """upsample_bicubic2d.vec(Tensor input, SymInt[]? output_size, bool align_corners,
    float[]? scale_factors) -> Tensor"""
    return _resize(b, input, 2, "cubic", output_size, scale_factors, align_corners)


@translation(aten.upsample_linear1d.default)
def aten_upsample_linear1d(b: GraphBuilder, self: Value, output_size: Sequence[int], align_corners: bool,
                           scales: float | None = None) -> Value:
    """upsample_linear1d(Tensor self, SymInt[1] output_size, bool align_corners, float? scales=None) -> Tensor"""
    return _resize(b, self, 1, "linear", output_size, [scales], align_corners)


@translation(aten.upsample_bilinear2d.default)
def aten_upsample_bilinear2d(b: GraphBuilder, self: Value, output_size: Sequence[int], align_corners: bool,
                             scales_h: float | None = None, scales_w: float | None = None) -> Value:
    """upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None,
    float? scales_w=None) -> Tensor"""
    return _resize(b, self, 2, "linear", output_size, [scales_h, scales_w], align_corners)


@translation(aten.upsample_bicubic2d.default)
def aten_upsample_bicubic2d(b: GraphBuilder, self: Value, output_size: Sequence[int], align_corners: bool,
                            scales_h: float | None = None, scales_w: float | None = None) -> Value:
    """upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None,
    float? scales_w=None) -> Tensor"""
    return _resize(b, self, 2, "cubic", output_size, [scales_h, scales_w], align_corners)


@translation(aten.upsample_trilinear3d.default)
def aten_upsample_trilinear3d(b: GraphBuilder, self: Value, output_size: Sequence[int], align_corners: bool,
                              scales_d: float | None = None, scales_h: float | None = None,
                              scales_w: float | None = None) -> Value:
    """upsample_trilinear3d(Tensor self, SymInt[3] output_size, bool align_corners, float? scales_d=None,
    float? scales_h=None, float? scales_w=None) -> Tensor"""
    return _resize(b, self, 3, "linear", output_size, [scales_d, scales_h, scales_w], align_corners)


# -- antialiased (interpolate(..., antialias=True)); Resize has antialias from opset 18 ----------------------
@translation(aten._upsample_bilinear2d_aa.default, since=18)
def aten_upsample_bilinear2d_aa(b: GraphBuilder, self: Value, output_size: Sequence[int], align_corners: bool,
                                scales_h: float | None = None, scales_w: float | None = None) -> Value:
    """_upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None,
    float? scales_w=None) -> Tensor"""
    return _resize(b, self, 2, "linear", output_size, [scales_h, scales_w], align_corners, antialias=True)


@translation(aten._upsample_bilinear2d_aa.vec, since=18)
def aten_upsample_bilinear2d_aa_vec(b: GraphBuilder, input: Value, output_size: Sequence[int] | None,
                                    align_corners: bool, scale_factors: Sequence[float] | None) -> Value:
    """_upsample_bilinear2d_aa.vec(Tensor input, SymInt[]? output_size, bool align_corners,
    float[]? scale_factors) -> Tensor"""
    return _resize(b, input, 2, "linear", output_size, scale_factors, align_corners, antialias=True)


@translation(aten._upsample_bicubic2d_aa.default, since=18)
def aten_upsample_bicubic2d_aa(b: GraphBuilder, self: Value, output_size: Sequence[int], align_corners: bool,
                               scales_h: float | None = None, scales_w: float | None = None) -> Value:
    """_upsample_bicubic2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None,
    float? scales_w=None) -> Tensor"""
    return _resize(b, self, 2, "cubic", output_size, [scales_h, scales_w], align_corners, antialias=True)


@translation(aten._upsample_bicubic2d_aa.vec, since=18)
def aten_upsample_bicubic2d_aa_vec(b: GraphBuilder, input: Value, output_size: Sequence[int] | None,
                                   align_corners: bool, scale_factors: Sequence[float] | None) -> Value:
    """_upsample_bicubic2d_aa.vec(Tensor input, SymInt[]? output_size, bool align_corners,
    float[]? scale_factors) -> Tensor"""
    return _resize(b, input, 2, "cubic", output_size, scale_factors, align_corners, antialias=True)
