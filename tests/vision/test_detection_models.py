"""torchvision's detection models exported with a dynamic image size and a data-dependent number of detections.

Each model (random weights, eval mode, small min_size/max_size) is exported once
from a 320x320 image and run in ONNX Runtime at two image sizes; the detections
(count, order, boxes, labels, scores and the masks/keypoints the model returns)
must match eager torchvision's. Random weights give flat features and near-uniform
class scores, so BatchNorm statistics come from one pass over two images and the
heads' last layers are re-drawn with a larger spread (seeded): several boxes then
survive with distinct scores, and their order means something.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch

torchvision = pytest.importorskip("torchvision")
from torchvision.models import detection  # noqa: E402

import onnxsight  # noqa: E402
from onnxsight.verification import Tolerance, compare_detections  # noqa: E402

SIZES = [(320, 320), (256, 384)]   # the example's size, then another (the resize to other scales: test_detection_patches)
H = torch.export.Dim("height", min=128, max=1024)
W = torch.export.Dim("width", min=128, max=1024)


class Detector(torch.nn.Module):
    """One image [3, H, W] in, the first image's detections out as a tuple (boxes, labels, scores, ...)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = self.model([image])
        detections = result[1][0] if isinstance(result, tuple) else result[0]
        return tuple(detections.values())


def _spread(*layers: torch.nn.Module, std: float) -> None:
    for layer in layers:
        torch.nn.init.normal_(layer.weight, std=std)
        if layer.bias is not None:
            torch.nn.init.normal_(layer.bias, std=std)


def _rcnn(factory: Callable[..., torch.nn.Module], rpn_std: float = 1.0, cls_std: float = 0.3,
          **extra: Any) -> torch.nn.Module:
    """``rpn_std``, ``cls_std``: ResNet-50 FPN features are larger; at 1.0 thousands of objectness scores are
    exactly 1.0 and the RPN's top-k among ties is unspecified (torch and ONNX Runtime keep different proposals);
    at a class-score spread of 0.3 the kept detections' scores are all ~0.9999, 1e-7 apart, and their order
    is float noise (Mask R-CNN's detections 16-17 swapped)."""
    model = factory(weights=None, weights_backbone=None, min_size=320, max_size=384, box_score_thresh=0.5,
                    box_detections_per_img=20, rpn_post_nms_top_n_test=200, **extra)
    _spread(model.rpn.head.cls_logits, std=rpn_std)
    _spread(model.roi_heads.box_predictor.cls_score, std=cls_std)
    _spread(model.roi_heads.box_predictor.bbox_pred, std=0.05)
    return model


def _one_stage(factory: Callable[..., torch.nn.Module], **extra: Any) -> torch.nn.Module:
    model = factory(weights=None, weights_backbone=None, min_size=320, max_size=384, score_thresh=0.3,
                    detections_per_img=20, **extra)
    head = model.head.classification_head
    _spread(head.cls_logits, std=0.1)
    return model


def _ssdlite() -> torch.nn.Module:
    """SSDlite resizes every image to 320x320 itself (a fixed size)."""
    model = detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, score_thresh=0.3,
                                                    detections_per_img=20)
    _spread(*(block[-1] for block in model.head.classification_head.module_list), std=0.1)
    return model


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "fasterrcnn_mobilenet_v3_large_fpn": lambda: _rcnn(detection.fasterrcnn_mobilenet_v3_large_fpn),
    "fasterrcnn_resnet50_fpn": lambda: _rcnn(detection.fasterrcnn_resnet50_fpn, rpn_std=0.05, cls_std=0.1,
                                                        trainable_backbone_layers=5),
    "maskrcnn_resnet50_fpn": lambda: _rcnn(detection.maskrcnn_resnet50_fpn, rpn_std=0.05, cls_std=0.1,
                                                        trainable_backbone_layers=5),
    "keypointrcnn_resnet50_fpn": lambda: _rcnn(detection.keypointrcnn_resnet50_fpn, rpn_std=0.05, cls_std=0.1,
                                                        trainable_backbone_layers=5),
    "retinanet_resnet50_fpn": lambda: _one_stage(detection.retinanet_resnet50_fpn, trainable_backbone_layers=5),
    "fcos_resnet50_fpn": lambda: _one_stage(detection.fcos_resnet50_fpn, trainable_backbone_layers=5),
    "ssdlite320_mobilenet_v3_large": _ssdlite,
}


# Verified here: exported once, detections equal to eager at both SIZES. The ResNet-50 R-CNNs and FCOS take 1-5
# minutes each to export on the development machine: marked slow (make test-vision runs them).
FAST = ["fasterrcnn_mobilenet_v3_large_fpn", "retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large"]
SLOW = ["maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn", "fcos_resnet50_fpn", "fasterrcnn_resnet50_fpn"]
# Scores and masks within 1e-3 (atol and rtol); the order of detections is free only among eager scores tied
# within that (compare_detections), keypoints only among tied heatmap cells (_assert_keypoints). Boxes and
# keypoints are pixel coordinates: atol 1e-2 px, because eager float32 itself is up to 5.2e-3 px off eager
# float64 on the ResNet-50 R-CNNs (Keypoint R-CNN at 320x320; ONNX Runtime 1.8e-3 px off float64 there), and a
# box corner near 0 (x1 = 0.109) gets nothing from the relative part.
TOL = Tolerance.uniform(1e-3, 1e-3).with_overrides({"output 0": (1e-2, 1e-3), "keypoints": (1e-2, 1e-3)})


def _image(height: int, width: int, seed: int) -> torch.Tensor:
    return torch.rand(3, height, width, generator=torch.Generator().manual_seed(seed))


def _calibrate(model: torch.nn.Module) -> None:
    """BatchNorm statistics from one pass over an image (the rest in eval mode), so features are not flat."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.train()
        norm.momentum = 1.0
    with torch.no_grad():   # two images: SSDlite's last BatchNorms see 1x1 maps
        model.model([_image(320, 320, seed=100), _image(288, 352, seed=101)])
    for norm in norms:
        norm.eval()


def _build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = Detector(MODELS[name]()).eval()
    _calibrate(model)
    return model


def _assert_same_detections(got: list[torch.Tensor], want: tuple[torch.Tensor, ...], size: tuple[int, int],
                            skip: tuple[int, ...] = ()) -> tuple[int, ...]:
    """Same count, and every output row by row (outputs ``skip`` aside), the order free only among tied scores.
    Returns the ONNX row paired with each eager row."""
    count = want[0].shape[0]
    assert count >= 3, f"{size}: eager keeps {count} detections; the case needs several"
    keep = [i for i in range(len(want)) if i not in skip]
    scores = next(k for k, i in enumerate(keep) if want[i].dtype.is_floating_point and want[i].ndim == 1)
    result = compare_detections([want[i] for i in keep], [torch.as_tensor(got[i]) for i in keep],
                                scores=scores, tolerance=TOL, names=[f"output {i}" for i in keep])
    assert result.passed, f"{size}: {result.reason} (max abs diff {result.max_abs_diff:.2e})"
    return result.order


def _eager_heatmaps(model: torch.nn.Module, image: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """Eager's detections and the keypoint head's logits for them ([N, K, 56, 56])."""
    captured: list[torch.Tensor] = []
    hook = model.model.roi_heads.keypoint_predictor.register_forward_hook(lambda m, i, o: captured.append(o))
    try:
        with torch.no_grad():
            want = model(image)
    finally:
        hook.remove()
    return want, captured[-1]


def _assert_keypoints(got: torch.Tensor, want: torch.Tensor, boxes: torch.Tensor, logits: torch.Tensor,
                      order: tuple[int, ...], size: tuple[int, int]) -> None:
    """Keypoints (x, y, 1) within TOL, or, where one lands on another cell of its RoI's heatmap, on a cell whose
    eager value ties eager's maximum within TOL (the argmax of two near-equal cells is float noise).

    The heatmap is torchvision's: the RoI's logits resized (bicubic) to ceil(box size), cell (x_int, y_int)
    at ((x_int + 0.5) * w / ceil(w) + x1, ...). Both SIZES are ones the transform does not resize
    (min(320 / min(h, w), 384 / max(h, w)) == 1), so detections are in the heatmaps' coordinates."""
    assert all(min(320 / min(h, w), 384 / max(h, w)) == 1 for h, w in SIZES)
    got = torch.as_tensor(got)[list(order)]
    bound = TOL.for_value("keypoints", torch.float32)
    close = ((got - want).abs() <= bound.atol + bound.rtol * want.abs()).all(dim=2)
    for det, point in (~close).nonzero().tolist():
        x1, y1, x2, y2 = boxes[det].tolist()
        width, height = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
        cells_w, cells_h = math.ceil(width), math.ceil(height)
        heatmap = torch.nn.functional.interpolate(logits[det][:, None], size=(cells_h, cells_w), mode="bicubic",
                                                  align_corners=False)[point, 0]
        x_int = round((float(got[det, point, 0]) - x1) / (width / cells_w) - 0.5)
        y_int = round((float(got[det, point, 1]) - y1) / (height / cells_h) - 0.5)
        assert 0 <= x_int < cells_w and 0 <= y_int < cells_h, \
            f"{size}: detection {det} keypoint {point} at {got[det, point].tolist()} is outside its box"
        top, there = float(heatmap.max()), float(heatmap[y_int, x_int])
        assert top - there <= 2 * (bound.atol + bound.rtol * abs(top)), \
            f"{size}: detection {det} keypoint {point}: ONNX at {got[det, point].tolist()}, eager at " \
            f"{want[det, point].tolist()}; eager's heatmap there is {there:.6g}, its maximum {top:.6g}"


def _check(name: str) -> None:
    model = _build(name)
    program = onnxsight.export(model, (_image(*SIZES[0], seed=0),),
                               dynamic_shapes={"image": {1: H, 2: W}})
    codes = [d.rule.code for d in program.diagnostics]
    assert "CAP010" in codes and "CAP011" not in codes
    assert "NonMaxSuppression" in {n.op_type for n in program.model_proto.graph.node}
    keypoints = name.startswith("keypointrcnn")
    for seed, size in enumerate(SIZES):
        image = _image(*size, seed=seed)
        if keypoints:   # (boxes, labels, scores, keypoints, keypoints_scores)
            want, logits = _eager_heatmaps(model, image)
            got = program(image)
            order = _assert_same_detections(got, want, size, skip=(3,))
            _assert_keypoints(got[3], want[3], want[0], logits, order, size)
        else:
            with torch.no_grad():
                want = model(image)
            _assert_same_detections(program(image), want, size)


@pytest.mark.parametrize("name", FAST)
def test_detection_model_exports_and_matches_eager(name: str) -> None:
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_resnet50_detection_model_exports_and_matches_eager(name: str) -> None:
    _check(name)
