"""Export a small function with onnxsight, run it in ONNX Runtime, compare with eager PyTorch.

For the hand-written op tests (dtypes, scalar overloads, keyword variants) that
OpInfo's float32 samples do not reach.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

import onnxsight
from tests.exporter.ops.op_tolerances import CURATED
from tests.exporter.ops.opinfo_harness import compare


class FunctionModule(torch.nn.Module):
    """Wraps ``fn(*tensors)`` as a module for export."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *tensors: torch.Tensor) -> Any:
        return self.fn(*tensors)


def run_onnx(fn: Callable[..., Any], *tensors: torch.Tensor, opset: int | None = None) -> list[torch.Tensor]:
    """``fn``'s outputs as computed by the exported ONNX model."""
    program = onnxsight.export(FunctionModule(fn), tensors, opset_version=opset)
    return program(*tensors)


def assert_matches_eager(fn: Callable[..., Any], *tensors: torch.Tensor, opset: int | None = None) -> None:
    """Same shapes, dtypes and values (exact for integers and bools, NaN where eager has NaN)."""
    expected = [t for t in pytree.tree_leaves(fn(*tensors)) if isinstance(t, torch.Tensor)]
    actual = run_onnx(fn, *tensors, opset=opset)
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        problem = compare(want, got, tolerance=CURATED)
        assert not problem, f"output {index}: {problem}\nexpected {want}\ngot      {got}"
