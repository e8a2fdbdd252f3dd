"""torchvision models with random weights; skipped where torchvision does not import.

Classification, segmentation, video, optical flow and detection, each with
``weights=None`` (and ``weights_backbone=None``), BatchNorm calibrated on the
example (``_vision.calibrate_batchnorm``), a batch of 2 and dynamic batch
(plus height and width where the model takes any size). Images are small
(64x64; detection 160x192 with the transform's resize sized to match) so
the suite runs on a CPU.

PyPI's torchvision wheels are built against CUDA torch, so on a CPU-only
torch they fail to import: the suite then reports itself as skipped
(``make test-vision`` applies the development shim that sits beside the checkout).
"""

from __future__ import annotations

from typing import Any

from onnxsight.zoo._spec import ModelSpec, import_or_unavailable
from onnxsight.zoo.suites._vision import (BATCH, VisionModel, builder, calibrate_batchnorm, calibration_inputs,
                                          images, scene)

_CLS = ("vision", "classification")
_SEG = ("vision", "segmentation")
_DET = ("vision", "detection")
# Detection: the transform resizes to min_size; these keep the example's size (no resize to 800) and let
# low-scoring boxes through, so random weights still leave several detections for the comparison.
_DET_SIZE = {"min_size": 160, "max_size": 192}
_RCNN = {**_DET_SIZE, "box_score_thresh": 0.0, "box_detections_per_img": 20}
# RetinaNet and FCOS start from a 0.01 prior probability: a threshold of 0 keeps their top boxes.
_ONE_STAGE = {**_DET_SIZE, "score_thresh": 0.0, "detections_per_img": 20}
_IMAGES_HW = {"images": {1: "height", 2: "width"}}


def _scene() -> tuple[tuple, dict]:
    return ([scene(160, 192)],), {}


def _scenes() -> tuple[tuple, dict]:
    """BatchNorm statistics of a detector from 4 images: SSDlite's last layers are 1x1, where one image
    gives one value per channel (train mode refuses it) and two give statistics that blow up."""
    return ([scene(160, 192, seed=seed) for seed in range(4)],), {}


def _video() -> tuple[tuple, dict]:
    import torch

    return (torch.randn(2, 3, 4, 32, 32),), {}


def _flow() -> tuple[tuple, dict]:
    import torch

    return (torch.randn(2, 3, 128, 128), torch.randn(2, 3, 128, 128)), {"num_flow_updates": 3}


MODELS: tuple[VisionModel, ...] = (
    VisionModel("resnet18", _CLS, images()),
    VisionModel("resnet50", _CLS, images()),
    VisionModel("mobilenet_v3_small", _CLS, images()),
    VisionModel("mobilenet_v3_large", _CLS, images()),
    VisionModel("efficientnet_b0", _CLS, images()),
    VisionModel("convnext_tiny", _CLS, images()),
    VisionModel("vit_b_16", _CLS + ("attention",), images(), BATCH, {"image_size": 64}),
    VisionModel("swin_t", _CLS + ("attention",), images(), BATCH),
    VisionModel("regnet_y_400mf", _CLS, images()),
    VisionModel("densenet121", _CLS, images()),
    VisionModel("squeezenet1_0", _CLS, images()),
    VisionModel("deeplabv3_mobilenet_v3_large", _SEG, images()),
    VisionModel("fcn_resnet50", _SEG, images()),
    VisionModel("lraspp_mobilenet_v3_large", _SEG, images(), {"input": {0: "batch", 2: "height", 3: "width"}}),  # forward(input)
    VisionModel("r3d_18", ("vision", "video"), _video, BATCH),
    # RAFT needs H and W divisible by 8 and at least 128: batch only.
    VisionModel("raft_small", ("vision", "optical_flow"), _flow, {"image1": {0: "batch"}, "image2": {0: "batch"}}),
    VisionModel("fasterrcnn_mobilenet_v3_large_fpn", _DET, _scene, _IMAGES_HW, _RCNN, _scenes),
    VisionModel("retinanet_resnet50_fpn", _DET, _scene, _IMAGES_HW, _ONE_STAGE, _scenes),
    VisionModel("maskrcnn_resnet50_fpn", _DET, _scene, _IMAGES_HW, _RCNN, _scenes),
    VisionModel("fcos_resnet50_fpn", _DET, _scene, _IMAGES_HW, _ONE_STAGE, _scenes),
    # SSDlite resizes every image to 320x320 itself, whatever the input size.
    VisionModel("ssdlite320_mobilenet_v3_large", _DET, _scene, _IMAGES_HW, {"score_thresh": 0.0,
                "detections_per_img": 20}, _scenes),
    VisionModel("keypointrcnn_resnet50_fpn", _DET, _scene, _IMAGES_HW, _RCNN, _scenes),
)


def build_model(entry: VisionModel) -> tuple[Any, tuple, dict]:
    """The model with random weights and calibrated BatchNorm, and its example ``(args, kwargs)``."""
    import torch
    import torchvision

    torch.manual_seed(0)
    options: dict[str, Any] = {"weights": None, **entry.options}
    if "detection" in entry.tags or "segmentation" in entry.tags:
        options["weights_backbone"] = None
    model = torchvision.models.get_model(entry.name, **options)
    args, kwargs = entry.inputs()
    first, *more = calibration_inputs(entry, (args, kwargs))
    return calibrate_batchnorm(model, *first, more=more), args, kwargs


def suite() -> list[ModelSpec]:
    import_or_unavailable("torchvision", "torchvision")
    return [ModelSpec(f"tv_{entry.name}", builder(entry, build_model), tags=("torchvision",) + entry.tags, dynamic=entry.dynamic)
            for entry in MODELS]
