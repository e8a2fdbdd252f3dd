"""grid_sampler_2d/3d (F.grid_sample) through ONNX GridSample, at the opsets before and after the mode rename."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

import onnxsight

from tests.exporter.ops.nn_checks import count, export_and_compare
from tests.exporter.ops.opinfo_harness import assert_op_passes

OPINFO_OPS = ["nn.functional.grid_sample"]


@pytest.mark.parametrize("name", OPINFO_OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name, limit=8)


@pytest.mark.parametrize("opset", [17, 20])
def test_opinfo_opset_variants(opset: int) -> None:
    assert_op_passes("nn.functional.grid_sample", limit=8, opset=opset)


MODES = list(itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [False, True]))


@pytest.mark.parametrize("opset", [17, 18, 20, 23])
@pytest.mark.parametrize(("mode", "padding_mode", "align_corners"), MODES)
def test_grid_sample_modes(mode: str, padding_mode: str, align_corners: bool, opset: int) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 5, 7)
    grid = torch.rand(2, 4, 6, 2) * 2.6 - 1.3  # some points outside [-1, 1] to exercise padding_mode
    ops = export_and_compare(lambda i, g: F.grid_sample(i, g, mode=mode, padding_mode=padding_mode,
                                                        align_corners=align_corners), x, grid, opset=opset)
    assert count(ops, "GridSample") == 1


VOLUME_MODES = list(itertools.product(["bilinear", "nearest"], ["zeros", "border", "reflection"], [False, True]))


@pytest.mark.parametrize(("mode", "padding_mode", "align_corners"), VOLUME_MODES)
def test_grid_sample_volume(mode: str, padding_mode: str, align_corners: bool) -> None:
    """A 5-D input (grid_sampler_3d) is GridSample-20's N-D form; upstream's test_grid_sample exports it at 20."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4, 5, 6)
    grid = torch.rand(2, 3, 4, 5, 3) * 2.6 - 1.3
    ops = export_and_compare(lambda i, g: F.grid_sample(i, g, mode=mode, padding_mode=padding_mode,
                                                        align_corners=align_corners), x, grid, opset=20)
    assert count(ops, "GridSample") == 1


def test_grid_sample_volume_before_opset_20_names_the_opset() -> None:
    """GridSample-16 samples 4-D inputs only: a volume at opset 17 is refused naming opset 20."""
    with pytest.raises(onnxsight.ExportError, match="OPS003"):
        onnxsight.export(_Volume(), (torch.randn(1, 1, 2, 3, 2), torch.rand(1, 2, 2, 2, 3)), opset_version=17)


class _Volume(torch.nn.Module):
    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, align_corners=False)
