"""A model calling a custom operator that has no ONNX translation."""

from __future__ import annotations

import torch

from onnxsight.zoo import ModelSpec


@torch.library.custom_op("zootest::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return twice(x) + 1


def suite() -> list[ModelSpec]:
    return [ModelSpec("custom_op", lambda: (UsesCustomOp(), (torch.randn(3),)))]
