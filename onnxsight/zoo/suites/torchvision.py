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
    model = calibrate_batchnorm(model, *first, more=more)
    if "detection" in entry.tags:
        spread_class_scores(model, _SCORE_SPREAD[entry.name])
    return model, args, kwargs


# The std each detector's last class-score layer is re-drawn with (see spread_class_scores): larger for
# smaller features (MobileNetV3's), smaller where softmax over 91 classes saturates (SSDlite's).
_SCORE_SPREAD = {"fasterrcnn_mobilenet_v3_large_fpn": 0.3, "retinanet_resnet50_fpn": 0.1,
                 "maskrcnn_resnet50_fpn": 0.1, "fcos_resnet50_fpn": 0.02, "ssdlite320_mobilenet_v3_large": 0.05,
                 "keypointrcnn_resnet50_fpn": 0.1}


def spread_class_scores(model: Any, std: float, seed: int = 0) -> None:
    """Re-draw the last class-score layer (seeded) so the kept detections' scores are spread out.

    torchvision initialises it for training (R-CNN: N(0, 0.01); RetinaNet and FCOS: a 0.01 prior
    probability), so with random weights every detection scores about the same (1/91 or 0.01, the
    top 20 within 1e-6 of each other) and their order, and which reach the cap, is float noise: an
    ordered comparison then measures ONNX Runtime's rounding, not the export. A trained detector's
    scores are far apart; these are 1e-4 or more apart.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    layers = []
    for module in model.modules():
        name = type(module).__name__
        if name == "RoIHeads":
            layers.append(module.box_predictor.cls_score)
        elif name in ("RetinaNetHead", "FCOSHead"):
            layers.append(module.classification_head.cls_logits)
        if name == "FCOSHead":   # its score is sqrt(class probability * centerness): near-constant centerness
            layers.append(module.regression_head.bbox_ctrness)   # would leave scores 1e-7 apart
        elif name == "SSDLiteHead":
            layers += [block[-1] for block in module.classification_head.module_list]
    with torch.no_grad():
        for layer in layers:
            for parameter in (layer.weight, layer.bias):
                if parameter is not None:
                    parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)


def suite() -> list[ModelSpec]:
    import_or_unavailable("torchvision", "torchvision")
    return [ModelSpec(f"tv_{entry.name}", builder(entry, build_model), tags=("torchvision",) + entry.tags,
                      dynamic=entry.dynamic, tolerance=detection_tolerance(entry.name) if "detection" in entry.tags
                      else None)
            for entry in MODELS]


def detection_tolerance(name: str) -> Any:
    """A detector's tolerance: 1e-3 (atol, rtol), and 1e-2 px for coordinates (boxes, output 0; keypoints).

    Measured on these models (eager float32 against eager float64, both sizes of the zoo): boxes 3.9e-3 px,
    keypoints 3.9e-3 px, scores 2.0e-4, masks 6.1e-4, keypoint scores 9.2e-4 (the ResNet-50 R-CNNs). The
    float32 default (1e-4) is below eager's own rounding there; a corner near 0 gets nothing from rtol.
    """
    from onnxsight.verification import Tolerance

    pixels = {"output 0": (1e-2, 1e-3)}
    if name.startswith("keypointrcnn"):   # (boxes, labels, scores, keypoints, keypoints_scores)
        pixels["output 3"] = (1e-2, 1e-3)
    return Tolerance.uniform(1e-3, 1e-3).with_overrides(pixels)
