"""torchvision's detection ops: nms -> NonMaxSuppression, roi_align -> RoiAlign, roi_pool -> MaxRoiPool.

The ops are registered by name (``torchvision::nms``): torchvision is not a
dependency of onnxsight, and a model that calls them has imported it already.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation


def _static(value: Any, argument: str) -> int:
    """An output size ONNX takes as an attribute: a symbolic one cannot be translated."""
    if isinstance(value, Value):
        raise UnsupportedVariant(argument, f"a symbolic size ({value.name})", "a size known at export")
    return int(value)


def _rows(b: GraphBuilder, value: Value, start: int, end: int) -> Value:
    """``value[:, start:end]`` of a 2-D value."""
    return b.op("Slice", value, b.const([start], torch.int64), b.const([end], torch.int64),
                b.const([1], torch.int64), dtype=value.dtype)


@translation("torchvision::nms.default")
def torchvision_nms(b: GraphBuilder, dets: Value, scores: Value, iou_threshold: float) -> Value:
    """nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor

    ONNX NonMaxSuppression takes boxes [batch, N, 4] and scores [batch, classes, N]
    and returns (batch, class, box) triples. Both suppress a box whose IoU with a kept
    one is strictly above the threshold. torch returns the kept indices by descending
    score: the spec leaves NonMaxSuppression's order open, so the kept boxes are
    sorted here (TopK, whose ties keep the earlier, i.e. selection, order).
    """
    boxes = b.op("Unsqueeze", dets, b.const([0], torch.int64))
    batched_scores = b.op("Unsqueeze", scores, b.const([0, 1], torch.int64))
    count = b.shape_of(dets, 0, 1)  # keep up to every box: torch has no per-class limit
    selected = b.op("NonMaxSuppression", boxes, batched_scores, count,
                    b.const([float(iou_threshold)], torch.float32), center_point_box=0, dtype=torch.int64)
    kept = b.op("Gather", selected, b.const(2, torch.int64), axis=1, dtype=torch.int64)
    kept_scores = b.op("Gather", scores, kept, axis=0, dtype=scores.dtype)
    _, order = b.op("TopK", kept_scores, b.shape_of(kept), axis=0, largest=1, sorted=1, outputs=2)
    return b.op("Gather", kept, order, axis=0, dtype=torch.int64, shape=b.node.out_shape)


@translation("torchvision::roi_align.default", since=16)
def torchvision_roi_align(b: GraphBuilder, input: Value, rois: Value, spatial_scale: float, pooled_height: Any,
                          pooled_width: Any, sampling_ratio: int, aligned: bool) -> Value:
    """roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width,
    int sampling_ratio, bool aligned) -> Tensor

    rois are [K, 5] rows (batch index, x1, y1, x2, y2); RoiAlign takes the boxes and
    the batch indices apart. ``aligned=True`` shifts sampling points by half a pixel:
    RoiAlign-16's ``coordinate_transformation_mode='half_pixel'``; ``aligned=False``
    is its ``output_half_pixel`` (the legacy behaviour, which also clamps RoIs to at least 1x1).
    torchvision samples adaptively for any ``sampling_ratio <= 0``, RoiAlign for 0 only.
    """
    boxes = _rows(b, rois, 1, 5)
    batch = b.op("Cast", b.op("Gather", rois, b.const(0, torch.int64), axis=1), to=7, dtype=torch.int64)
    return b.op("RoiAlign", input, boxes, batch, mode="avg", output_height=_static(pooled_height, "pooled_height"),
                output_width=_static(pooled_width, "pooled_width"), sampling_ratio=max(int(sampling_ratio), 0),
                spatial_scale=float(spatial_scale),
                coordinate_transformation_mode="half_pixel" if aligned else "output_half_pixel",
                dtype=input.dtype, shape=b.node.out_shape)


@translation("torchvision::roi_pool.default")
def torchvision_roi_pool(b: GraphBuilder, input: Value, rois: Value, spatial_scale: float, pooled_height: Any,
                         pooled_width: Any) -> tuple[Value, None]:
    """roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width)
    -> (Tensor, Tensor)

    MaxRoiPool takes the same [K, 5] rois and rounds their corners as torchvision does.
    The second output (the argmax, read only by roi_pool's backward) has no ONNX form.
    """
    if b.node.output_used(1):
        raise UnsupportedVariant("output 1 (argmax)", "read", "only the pooled values (output 0)")
    pooled = b.op("MaxRoiPool", input, rois, pooled_shape=[_static(pooled_height, "pooled_height"),
                                                           _static(pooled_width, "pooled_width")],
                  spatial_scale=float(spatial_scale), dtype=input.dtype, shape=b.node.out_shape)
    return pooled, None


# What to do about the torchvision ops without a translation (OPS008), by op name.
UNTRANSLATED: dict[str, str] = {
    "ps_roi_align": "ONNX has no position-sensitive RoiAlign; write a custom translation (RoiAlign per "
                    "channel group, then a gather of each bin's group)",
    "ps_roi_pool": "ONNX has no position-sensitive RoI pooling; write a custom translation",
    "deform_conv2d": "ONNX DeformConv (opset 19) matches it but ONNX Runtime has no CPU kernel for it; write a "
                     "custom translation for the runtime you target",
    "qnms": "quantized NMS: dequantize the boxes and scores before torchvision.ops.nms",
}
_OTHER = "no ONNX counterpart is known; write a custom translation"


def untranslated_advice(op_name: str) -> str:
    """The OPS008 advice for torchvision op ``op_name`` (``ps_roi_align``, ``_roi_align_backward``, ...)."""
    if op_name.startswith("_") and op_name.endswith("_backward"):
        return "it is a backward op: export the model in eval mode under torch.no_grad()"
    return UNTRANSLATED.get(op_name, _OTHER)
