"""timm models with random weights; skipped where timm (or torchvision, which it imports) does not import."""

from __future__ import annotations

from typing import Any, Callable

from onnxsight.zoo._spec import ModelSpec, import_or_unavailable

MODELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("resnet18", ("vision",)),
    ("efficientnet_b0", ("vision",)),
    ("mobilenetv3_small_100", ("vision",)),
    ("convnext_atto", ("vision",)),
    ("vit_tiny_patch16_224", ("vision", "attention")),
    ("deit_tiny_patch16_224", ("vision", "attention")),
    ("regnety_002", ("vision",)),
)


def _builder(name: str) -> Callable[[], tuple[Any, ...]]:
    def build() -> tuple[Any, ...]:
        import timm
        import torch

        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False)
        return model, (torch.randn(1, 3, 224, 224),)
    build.__name__ = f"build_{name}"
    return build


def suite() -> list[ModelSpec]:
    import_or_unavailable("timm", "timm")
    return [ModelSpec(f"timm_{name}", _builder(name), tags=("timm",) + tags) for name, tags in MODELS]
