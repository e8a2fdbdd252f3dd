"""Models whose exported program is not what forward() computes eagerly (the worker must fail them: ACC007),
next to a stateful-looking one that is faithful."""

from __future__ import annotations

import torch

from onnxsight.zoo import ModelSpec

SETTINGS = {"scale": 1.0}   # a global read at trace time


class Counter(torch.nn.Module):
    """A Python counter: the eager call sees 1, the trace 2 (baked into the program)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.calls


class ReadsGlobal(torch.nn.Module):
    """Reads a global that forward() itself changes: the trace sees the changed value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SETTINGS["scale"] += 1.0
        return x * SETTINGS["scale"]


class InfThenFinite(torch.nn.Module):
    """Eager divides by zero (inf); the trace divides by one: an inf difference must fail."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x.abs() / (self.calls - 1)


class BufferCounter(torch.nn.Module):
    """State in a buffer read (not updated) by forward(): faithful, must pass."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.tensor(3.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _global() -> tuple:
    SETTINGS["scale"] = 1.0
    return ReadsGlobal(), (torch.randn(3, 4),)


def suite() -> list[ModelSpec]:
    return [
        ModelSpec("counter", lambda: (Counter(), (torch.randn(3, 4),))),
        ModelSpec("reads_global", _global),
        ModelSpec("inf_then_finite", lambda: (InfThenFinite(), (torch.rand(3, 4) + 0.5,))),
        ModelSpec("buffer_state", lambda: (BufferCounter(), (torch.randn(3, 4),))),
    ]
