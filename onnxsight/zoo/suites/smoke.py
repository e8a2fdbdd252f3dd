"""The smoke suite: a few tiny hand-written models, fast enough for CI and ``make demo``."""

from __future__ import annotations

import torch
from torch import nn

from onnxsight.zoo._spec import ModelSpec


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class ResidualMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        hidden = x + torch.relu(self.inner(x)) * scale
        return self.out(hidden - x * 0.5)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.head(y)


def _mlp() -> tuple:
    torch.manual_seed(0)
    return MLP(), (torch.randn(2, 8),)


def _residual() -> tuple:
    torch.manual_seed(0)
    return ResidualMLP(), (torch.randn(3, 8), torch.randn(3, 8))


def _cnn() -> tuple:
    torch.manual_seed(0)
    return SmallCNN(), (torch.randn(1, 3, 8, 8),)


def suite() -> list[ModelSpec]:
    return [
        ModelSpec("mlp", _mlp, tags=("mlp",), dynamic={"x": {0: "batch"}}),
        ModelSpec("residual_mlp", _residual, tags=("mlp",), dynamic={"x": {0: "batch"}, "scale": {0: "batch"}}),
        ModelSpec("small_cnn", _cnn, tags=("vision",), dynamic={"x": {0: "batch", 2: "height", 3: "width"}}),
    ]
