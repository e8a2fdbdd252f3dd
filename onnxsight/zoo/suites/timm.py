"""timm models with random weights; skipped where timm (or torchvision, which it imports) does not import.

The smallest variant of each family, CNNs, ViTs and hybrids, ``pretrained=False``, BatchNorm
calibrated on the example (``_vision.calibrate_batchnorm``), a batch of 2 at 64x64 where the
model takes that size (``img_size`` and window sizes shrunk to match), dynamic batch, and
height and width too for CNNs that take any size.
"""

from __future__ import annotations

from typing import Any

from onnxsight.zoo._spec import ModelSpec, import_or_unavailable
from onnxsight.zoo.suites._vision import (BATCH, VisionModel, builder, calibrate_batchnorm, calibration_inputs,
                                          images)

_CNN = ("vision", "cnn")
_VIT = ("vision", "attention", "vit")
_HYBRID = ("vision", "attention", "hybrid")

MODELS: tuple[VisionModel, ...] = (
    VisionModel("resnet18", _CNN, images()),
    VisionModel("efficientnet_b0", _CNN, images()),
    VisionModel("mobilenetv3_small_100", _CNN, images()),
    VisionModel("mobilenetv4_conv_small", _CNN, images()),
    VisionModel("convnext_atto", _CNN, images()),
    VisionModel("regnety_002", _CNN, images()),
    VisionModel("ghostnet_100", _CNN, images()),
    VisionModel("repvit_m0_9", _CNN, images(), BATCH),
    VisionModel("vit_tiny_patch16_224", _VIT, images(), BATCH, {"img_size": 64}),
    VisionModel("deit_tiny_patch16_224", _VIT, images(), BATCH, {"img_size": 64}),
    VisionModel("cait_xxs24_224", _VIT, images(), BATCH, {"img_size": 64}),
    VisionModel("swin_tiny_patch4_window7_224", _VIT, images(), BATCH, {"img_size": 64, "window_size": 2}),
    VisionModel("mixer_s16_224", ("vision", "mlp"), images(), BATCH, {"img_size": 64}),
    VisionModel("pvt_v2_b0", _HYBRID, images(), BATCH),
    VisionModel("mobilevit_xxs", _HYBRID, images(), BATCH),
    # LeViT at 64x64 reaches 1x1 in its last stage, where BatchNorm statistics of 2 values blow up: 224.
    VisionModel("levit_128s", _HYBRID, images(size=224), BATCH),
    VisionModel("coat_lite_mini", _HYBRID, images(), BATCH, {"img_size": 64}),
    VisionModel("maxvit_pico_rw_256", _HYBRID, images(), BATCH, {"img_size": 64}),
    # EfficientFormer's last-stage attention has a fixed 7x7 resolution: 224x224 only.
    VisionModel("efficientformer_l1", _HYBRID, images(size=224), BATCH),
    VisionModel("edgenext_xx_small", _HYBRID, images(), BATCH),
    VisionModel("fastvit_t8", _HYBRID, images(), BATCH),
    VisionModel("efficientvit_b0", _HYBRID, images(), BATCH),
    VisionModel("poolformerv2_s12", ("vision", "metaformer"), images()),
)


def build_model(entry: VisionModel) -> tuple[Any, tuple, dict]:
    """The model with random weights and calibrated BatchNorm, and its example ``(args, kwargs)``."""
    import timm
    import torch

    torch.manual_seed(0)
    model = timm.create_model(entry.name, pretrained=False, **entry.options)
    args, kwargs = entry.inputs()
    first, *more = calibration_inputs(entry, (args, kwargs))
    return calibrate_batchnorm(model, *first, more=more), args, kwargs


def suite() -> list[ModelSpec]:
    import_or_unavailable("timm", "timm")
    return [ModelSpec(f"timm_{entry.name}", builder(entry, build_model), tags=("timm",) + entry.tags, dynamic=entry.dynamic)
            for entry in MODELS]
