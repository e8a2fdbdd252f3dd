"""Small models for the verification tests, built from ops the exporter translates."""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn


class MLP(nn.Module):
    """Linear/ReLU blocks with a scaled residual and a difference head."""

    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.out = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            h = h + torch.relu(block(h)) * 0.5
        y = self.out(h)
        return (y - bias) / (bias.abs() + 1.0)


class Attention(nn.Module):
    """Single-head attention with a sigmoid gate instead of softmax (2-D: tokens x features)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.scale = dim ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        scores = torch.mm(q, k.t()) * self.scale
        weights = torch.sigmoid(scores) / x.shape[0]
        mixed = torch.mm(weights, v)
        return x + self.o(torch.tanh(mixed))


class Gated(nn.Module):
    """Elementwise gating, exp/log, concatenation and a split."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.proj(x).split(6, dim=-1)
        gate = torch.sigmoid(b)
        mixed = a * gate - torch.exp(-a.abs())
        return torch.cat([mixed, torch.log1p(gate)], dim=-1)


MODELS: dict[str, Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    "mlp": lambda: (MLP().eval(), (torch.randn(5, 8), torch.randn(5, 4))),
    "attention": lambda: (Attention().eval(), (torch.randn(8, 8),)),
    "gated": lambda: (Gated().eval(), (torch.randn(4, 6),)),
}


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(seed)
    return MODELS[name]()


@functools.lru_cache(maxsize=None)
def exported(name: str, dtype: torch.dtype = torch.float32) -> Any:
    """The onnxsight export of model ``name`` (cached: exporting dominates test time)."""
    import onnxsight

    model, args = build(name)
    model = model.to(dtype)
    return onnxsight.export(model, tuple(a.to(dtype) for a in args))
