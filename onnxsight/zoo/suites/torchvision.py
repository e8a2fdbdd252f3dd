"""torchvision models with random weights; skipped where torchvision does not import.

PyPI's torchvision wheels are built against CUDA torch, so on a CPU-only
torch they fail to import: the suite then reports itself as skipped.
"""

from __future__ import annotations

from typing import Any, Callable

from onnxsight.zoo._spec import ModelSpec, import_or_unavailable

MODELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("resnet18", ("vision", "classification")),
    ("mobilenet_v3_small", ("vision", "classification")),
    ("efficientnet_b0", ("vision", "classification")),
    ("convnext_tiny", ("vision", "classification")),
    ("vit_b_16", ("vision", "classification", "attention")),
    ("swin_t", ("vision", "classification", "attention")),
    ("fcn_resnet50", ("vision", "segmentation")),
    ("deeplabv3_mobilenet_v3_large", ("vision", "segmentation")),
)


def _builder(name: str) -> Callable[[], tuple[Any, ...]]:
    def build() -> tuple[Any, ...]:
        import torch
        import torchvision

        torch.manual_seed(0)
        model = torchvision.models.get_model(name, weights=None)
        return model, (torch.randn(1, 3, 224, 224),)
    build.__name__ = f"build_{name}"
    return build


def suite() -> list[ModelSpec]:
    import_or_unavailable("torchvision", "torchvision")
    return [ModelSpec(f"tv_{name}", _builder(name), tags=("torchvision",) + tags) for name, tags in MODELS]
