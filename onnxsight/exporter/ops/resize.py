"""Upsampling (F.interpolate): nearest, linear, bilinear, bicubic, trilinear -> ONNX Resize.

Both overload families are translated: ``.vec`` (output_size or scale_factors,
what F.interpolate calls) and ``.default`` (output_size with optional
per-axis scales).
"""

from __future__ import annotations

from typing import Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

aten = torch.ops.aten


def _resize(b: GraphBuilder, x: Value, spatial: int, mode: str, output_size: Sequence[int | Value] | None,
            scales: Sequence[float | None] | None, align_corners: bool | None, *, antialias: bool = False) -> Value:
    """Resize over the last ``spatial`` axes.

    With scale factors the source coordinate uses 1/scale, as torch does when
    it is given them; with sizes both use in/out. Scales are passed only when
    every spatial axis has one.
    """
    use_scales = scales is not None and len(scales) > 0 and all(s is not None for s in scales)
    if use_scales:
        factors = [float(s) for s in scales] * (spatial if len(scales) == 1 else 1)
        scale_input: Value | None = b.const([1.0, 1.0] + factors, torch.float32)
        size_input: Value | None = None
    elif output_size:
        scale_input = None
        leading = x.shape[:2] if x.shape is not None else ()
        if len(leading) == 2 and all(isinstance(d, int) for d in leading):
            size_input = b.int_list([*leading, *output_size])
        else:
            size_input = b.op("Concat", b.shape_of(x, end=2), b.int_list(list(output_size)), axis=0,
                              dtype=torch.int64)
    else:
        raise ValueError("upsample needs output_size or scale factors")
    attrs: dict[str, object] = {"mode": mode}
    if mode == "nearest":
        # torch's legacy 'nearest': src = floor(dst * in / out).
        attrs.update(coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    elif antialias:
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
    return b.op("Resize", x, None, scale_input, size_input, **attrs)


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
