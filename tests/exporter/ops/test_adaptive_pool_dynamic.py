"""Adaptive pooling to a fixed output size on symbolic spatial sizes: torch's windows computed in the graph.

torch's window o on an axis of size n pooled to out is [floor(o*n/out), ceil((o+1)*n/out)); one export
with dynamic sizes must match eager at every size, multiples of the output or not, smaller than it too.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.export import Dim

import onnxsight
from onnxsight.exporter import TranslationError

from tests.exporter.ops.op_tolerances import CURATED
from tests.exporter.ops.opinfo_harness import compare


class Pool(torch.nn.Module):
    def __init__(self, layer: torch.nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x) * 1.0


CASES = [  # (layer, example shape, other shapes: the spatial sizes vary, the batch too)
    (torch.nn.AdaptiveAvgPool2d((7, 7)), (2, 3, 14, 21), [(1, 3, 13, 9), (3, 3, 7, 7), (2, 3, 30, 4), (1, 3, 224, 131)]),
    (torch.nn.AdaptiveMaxPool2d((7, 7)), (2, 3, 14, 21), [(1, 3, 13, 9), (3, 3, 7, 7), (2, 3, 30, 4), (1, 3, 224, 131)]),
    (torch.nn.AdaptiveAvgPool2d((3, 1)), (2, 4, 9, 6), [(1, 4, 10, 5), (2, 4, 2, 11)]),
    (torch.nn.AdaptiveMaxPool2d((1, 5)), (2, 4, 9, 6), [(1, 4, 10, 5), (2, 4, 2, 11)]),
    (torch.nn.AdaptiveAvgPool1d(5), (2, 3, 12), [(1, 3, 13), (4, 3, 3), (2, 3, 101)]),
    (torch.nn.AdaptiveMaxPool1d(5), (2, 3, 12), [(1, 3, 13), (4, 3, 3), (2, 3, 101)]),
    (torch.nn.AdaptiveAvgPool3d((2, 3, 4)), (1, 2, 6, 6, 8), [(2, 2, 5, 7, 9), (1, 2, 3, 4, 13)]),
    (torch.nn.AdaptiveMaxPool3d((2, 3, 4)), (1, 2, 6, 6, 8), [(2, 2, 5, 7, 9), (1, 2, 3, 4, 13)]),
    (torch.nn.AdaptiveAvgPool2d((2, 2)), (3, 9, 7), [(3, 5, 4), (3, 12, 13)]),  # no batch axis
]


def _dynamic(layer: torch.nn.Module, shape: tuple[int, ...]) -> dict[str, Any]:
    """Every axis dynamic but the channels (axis 1; axis 0 of an input without a batch axis)."""
    spatial = int(type(layer).__name__[-2])
    channels = 1 if len(shape) == spatial + 2 else 0
    return {"x": {axis: Dim.DYNAMIC for axis in range(len(shape)) if axis != channels}}


@pytest.mark.parametrize("layer, shape, others", CASES,
                         ids=[f"{type(c[0]).__name__}-{'x'.join(map(str, c[1]))}" for c in CASES])
def test_one_export_matches_eager_at_every_size(layer: torch.nn.Module, shape: tuple[int, ...],
                                                others: list[tuple[int, ...]]) -> None:
    model = Pool(layer).eval()
    program = onnxsight.export(model, (torch.randn(shape),), dynamic_shapes=_dynamic(layer, shape))
    graph_input = program.model_proto.graph.input[0].type.tensor_type.shape.dim
    spatial = int(type(layer).__name__[-2])
    assert all(d.dim_param for d in graph_input[-spatial:]), "the spatial sizes must stay dynamic"
    for other in [shape, *others]:
        x = torch.randn(other)
        problem = compare(model(x), program(x)[0], tolerance=CURATED)
        assert not problem, f"at {other}: {problem}"


def test_vgg_style_head_exports_with_dynamic_resolution() -> None:
    """VGG/AlexNet's AdaptiveAvgPool2d((7, 7)) before a Linear: the flattened size is fixed by the pool."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.AdaptiveAvgPool2d((7, 7)), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 49, 5)).eval()
    shape = {0: Dim.DYNAMIC, 2: Dim.DYNAMIC, 3: Dim.DYNAMIC}
    program = onnxsight.export(model, (torch.randn(2, 3, 64, 64),), dynamic_shapes={"input": shape})
    for size in [(1, 3, 64, 64), (2, 3, 50, 90), (1, 3, 30, 31)]:
        x = torch.randn(size)
        problem = compare(model(x), program(x)[0], tolerance=CURATED)
        assert not problem, f"at {size}: {problem}"


def test_max_indices_on_symbolic_sizes_are_refused_by_name() -> None:
    model = Pool(torch.nn.Identity())
    model.forward = lambda x: torch.nn.functional.adaptive_max_pool2d(x, (3, 3), return_indices=True)[1] * 1
    with pytest.raises(TranslationError) as info:
        onnxsight.export(model, (torch.randn(1, 2, 9, 9),), dynamic_shapes={"x": {2: Dim.DYNAMIC}})
    assert "OPS006" in str(info.value) and "return_indices" in str(info.value)
