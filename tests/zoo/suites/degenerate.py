"""Models whose eager outputs are too small to compare (the worker must fail them: ZOO005), next to
a model with small but meaningful outputs that must pass."""

from __future__ import annotations

import torch

from onnxsight.zoo import ModelSpec


def _scaled(scale: float) -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    with torch.no_grad():
        model[0].weight.mul_(scale)
        model[0].bias.mul_(scale)
    return model, (torch.randn(2, 4),)


class Empty(torch.nn.Module):
    """A detector that found nothing: every output is empty."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:0], x.sum(1)[:0]


def suite() -> list[ModelSpec]:
    return [
        ModelSpec("vanishing", lambda: _scaled(1e-25)),    # outputs ~1e-25: any export "matches"
        ModelSpec("all_zero", lambda: (torch.nn.ReLU(), (-torch.rand(2, 4),))),
        ModelSpec("empty", lambda: (Empty(), (torch.randn(2, 4),))),
        ModelSpec("small_but_real", lambda: _scaled(1e-2)),  # ~1e-2: 100x the float32 atol, a real test
    ]
