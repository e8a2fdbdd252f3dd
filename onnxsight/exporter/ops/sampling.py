"""Sampling at given coordinates: grid_sampler_2d/3d (``F.grid_sample``) through ONNX GridSample."""

from __future__ import annotations

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten

_PADDING_MODES = ("zeros", "border", "reflection")  # ATen's GridSamplerPadding order


def _grid_sample(b: GraphBuilder, input: Value, grid: Value, mode: str, padding_mode: int,
                 align_corners: bool) -> Value:
    shape = b.node.out_shape if b.node.out_shape is not None else None
    return b.op("GridSample", input, grid, mode=mode, padding_mode=_PADDING_MODES[padding_mode],
                align_corners=int(bool(align_corners)), shape=shape)


@translation(aten.grid_sampler_2d.default, since=16, until=19)
def aten_grid_sampler_2d(b: GraphBuilder, input: Value, grid: Value, interpolation_mode: int, padding_mode: int,
                         align_corners: bool) -> Value:
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode,
    bool align_corners) -> Tensor

    ATen's interpolation modes 0/1/2 are GridSample-16's bilinear/nearest/bicubic.
    """
    mode = ("bilinear", "nearest", "bicubic")[interpolation_mode]
    return _grid_sample(b, input, grid, mode, padding_mode, align_corners)


@translation(aten.grid_sampler_2d.default, since=20)
def aten_grid_sampler_2d_20(b: GraphBuilder, input: Value, grid: Value, interpolation_mode: int,
                            padding_mode: int, align_corners: bool) -> Value:
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode,
    bool align_corners) -> Tensor

    GridSample-20 renamed the modes to linear/nearest/cubic (and takes N-D inputs).
    """
    mode = ("linear", "nearest", "cubic")[interpolation_mode]
    return _grid_sample(b, input, grid, mode, padding_mode, align_corners)


@translation(aten.grid_sampler_3d.default, since=20)
def aten_grid_sampler_3d(b: GraphBuilder, input: Value, grid: Value, interpolation_mode: int, padding_mode: int,
                         align_corners: bool) -> Value:
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode,
    bool align_corners) -> Tensor

    A volume (N, C, D, H, W) sampled at a (N, D', H', W', 3) grid: GridSample-20 takes N-D inputs (16 took
    4-D only, so no translation before 20). ATen's 3-D modes are 0 trilinear and 1 nearest (it has no
    bicubic for volumes), GridSample-20's linear and nearest.
    """
    mode = ("linear", "nearest")[interpolation_mode]
    return _grid_sample(b, input, grid, mode, padding_mode, align_corners)
