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

from typing import Any, Callable

import pytest
import torch

torchvision = pytest.importorskip("torchvision")
from torchvision.models import detection  # noqa: E402

import onnxsight  # noqa: E402

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


def _rcnn(factory: Callable[..., torch.nn.Module], rpn_std: float = 1.0, **extra: Any) -> torch.nn.Module:
    """``rpn_std``: ResNet-50 FPN features are larger; at 1.0 thousands of objectness scores are exactly 1.0
    and the RPN's top-k among ties is unspecified (torch and ONNX Runtime keep different proposals)."""
    model = factory(weights=None, weights_backbone=None, min_size=320, max_size=384, box_score_thresh=0.5,
                    box_detections_per_img=20, rpn_post_nms_top_n_test=200, **extra)
    _spread(model.rpn.head.cls_logits, std=rpn_std)
    _spread(model.roi_heads.box_predictor.cls_score, std=0.3)
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
    "fasterrcnn_resnet50_fpn": lambda: _rcnn(detection.fasterrcnn_resnet50_fpn, rpn_std=0.05,
                                                        trainable_backbone_layers=5),
    "maskrcnn_resnet50_fpn": lambda: _rcnn(detection.maskrcnn_resnet50_fpn, rpn_std=0.05,
                                                        trainable_backbone_layers=5),
    "keypointrcnn_resnet50_fpn": lambda: _rcnn(detection.keypointrcnn_resnet50_fpn, rpn_std=0.05,
                                                        trainable_backbone_layers=5),
    "retinanet_resnet50_fpn": lambda: _one_stage(detection.retinanet_resnet50_fpn, trainable_backbone_layers=5),
    "fcos_resnet50_fpn": lambda: _one_stage(detection.fcos_resnet50_fpn, trainable_backbone_layers=5),
    "ssdlite320_mobilenet_v3_large": _ssdlite,
}


# Verified here: exported once, detections equal to eager at both SIZES.
VERIFIED = ["fasterrcnn_mobilenet_v3_large_fpn", "retinanet_resnet50_fpn", "ssdlite320_mobilenet_v3_large"]
# Not (yet) in the test, and why: each export of a ResNet-50 model takes 5-10 minutes on the development machine.
NOT_VERIFIED = {
    "maskrcnn_resnet50_fpn": "exports (with the paste_masks patch) and runs; with rpn_std=1.0 thousands of "
                             "objectness scores were exactly 1.0 (ties in the RPN's top-k; backbone and FPN matched "
                             "to 1e-3); with 0.05 it matches eager at 320x320, and at 256x384 all but detections "
                             "16-17 of 20, whose class scores are near-saturated (~0.999): the box head's spread "
                             "(cls_score std 0.3) needs lowering for ResNet-50 features as the RPN's did",
    "fasterrcnn_resnet50_fpn": "not run; Mask R-CNN without the mask head",
    "keypointrcnn_resnet50_fpn": "not run end to end; its heatmaps_to_keypoints patch matches torchvision "
                                 "(test_detection_patches.py)",
    "fcos_resnet50_fpn": "not run end to end",
}


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


def _assert_same_detections(got: list[torch.Tensor], want: tuple[torch.Tensor, ...], size: tuple[int, int]) -> None:
    count = want[0].shape[0]
    assert count >= 3, f"{size}: eager keeps {count} detections; the case needs several"
    assert [g.shape[0] for g in got] == [w.shape[0] for w in want], \
        f"{size}: ONNX kept {got[0].shape[0]} detections, eager {count}"
    for index, (g, w) in enumerate(zip(got, want)):
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, atol=1e-3, rtol=1e-3, msg=lambda m: f"{size} output {index}: {m}")
        else:   # labels
            assert torch.equal(g, w), f"{size}: output {index} {g.tolist()} != eager {w.tolist()}"


@pytest.mark.parametrize("name", VERIFIED)
def test_detection_model_exports_and_matches_eager(name: str) -> None:
    model = _build(name)
    program = onnxsight.export(model, (_image(*SIZES[0], seed=0),),
                               dynamic_shapes={"image": {1: H, 2: W}})
    codes = [d.rule.code for d in program.diagnostics]
    assert "CAP010" in codes and "CAP011" not in codes
    assert "NonMaxSuppression" in {n.op_type for n in program.model_proto.graph.node}
    for seed, size in enumerate(SIZES):
        image = _image(*size, seed=seed)
        with torch.no_grad():
            want = model(image)
        got = program(image)
        _assert_same_detections(got, want, size)
