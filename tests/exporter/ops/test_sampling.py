"""grid_sampler_2d (F.grid_sample) through ONNX GridSample, at the opsets before and after the mode rename."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

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
