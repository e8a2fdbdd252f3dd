"""Dynamic H/W when an intermediate size is 1 at the example, and a branch that truly fixes the size.

A CNN whose last feature map is 1x1 at the example (PoolFormer at 32x32, any pyramid that
downsamples to one pixel) makes torch.export's plain capture specialise H and W to the
example: a size-1 intermediate decides strides and broadcasting. torch.onnx captures such
models size-oblivious; onnxsight does too, checks the graph at the example, and says so
(CAP013), so the dims stay dynamic. A branch on the size itself (DINOv2 returns its position
embeddings as they are only at the trained image size) is a real specialisation: CAP005 at
that line, with the guard and the static spec for every dim it fixes.
"""

from __future__ import annotations

import os
import re

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import onnxsight

HERE = os.path.abspath(__file__)
NAME = os.path.relpath(HERE)


class StridedConv(torch.nn.Module):
    """One patchifying conv: its output is 1x1 at a 4x4 example."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x) * 2


class PoolFormerLike(torch.nn.Module):
    """PoolFormer's pattern: strided patch embeddings, GroupNorm, pooling minus identity, layer scale."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.ModuleList([torch.nn.Conv2d(3, 8, 7, 4, 2), torch.nn.Conv2d(8, 16, 3, 2, 1)])
        self.norm = torch.nn.ModuleList([torch.nn.GroupNorm(1, 8), torch.nn.GroupNorm(1, 16)])
        self.scale = torch.nn.ParameterList([torch.nn.Parameter(torch.rand(8)), torch.nn.Parameter(torch.rand(16))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for embed, norm, scale in zip(self.embed, self.norm, self.scale):
            x = embed(x)
            y = norm(x)
            x = x + scale[:, None, None] * (F.avg_pool2d(y, 3, 1, 1, count_include_pad=False) - y)
        return x


class TrainedSizeShortcut(torch.nn.Module):
    """DINOv2's interpolate_pos_encoding: the embeddings as they are at the trained size, else resized."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 4, 8, 8)
        self.pos = torch.nn.Parameter(torch.randn(1, 4, 4, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.patch(x)  # guards on the size first, none of them fixes it
        h, w = x.shape[2] // 8, x.shape[3] // 8
        if h * w == 16 and x.shape[2] == x.shape[3]:  # @shortcut
            return patches + self.pos
        return patches + F.interpolate(self.pos, size=(h, w), mode="bilinear")


class ViewRows(torch.nn.Module):
    """``view(4, -1)``: any batch whose rows split into 4 (plain capture fixes it to the example's 4)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(4, -1) * 2  # @view


def _line(marker: str) -> int:
    with open(HERE, encoding="utf-8") as handle:
        return next(i for i, text in enumerate(handle, 1) if text.rstrip().endswith(f"# @{marker}"))


def _dims(program: onnxsight.ONNXProgram) -> list:
    return [d.dim_param or d.dim_value for d in program.model_proto.graph.input[0].type.tensor_type.shape.dim]


CNN_CASES = [
    pytest.param(StridedConv, (2, 3, 4, 4), [(2, 4, 4), (3, 5, 5), (1, 8, 12), (2, 13, 9)], id="strided-conv"),
    pytest.param(PoolFormerLike, (2, 3, 8, 8), [(2, 8, 8), (3, 9, 9), (1, 40, 48), (2, 31, 23)],
                 id="poolformer-like"),
]


@pytest.mark.parametrize("make, example, sizes", CNN_CASES)
def test_size_one_feature_map_keeps_height_and_width_dynamic(make, example, sizes) -> None:
    torch.manual_seed(0)
    model = make().eval()
    shapes = {"x": {0: Dim("batch"), 2: Dim("height"), 3: Dim("width")}}
    program = onnxsight.export(model, (torch.randn(*example),), dynamic_shapes=shapes)
    assert _dims(program) == ["batch", 3, "height", "width"]
    for batch, height, width in sizes:
        x = torch.randn(batch, 3, height, width)
        with torch.no_grad():
            torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-4)
    notes = [d for d in program.diagnostics if d.code == "CAP013"]
    assert [(d.message.split(" (")[0]) for d in notes] == ["input `x` axis 2", "input `x` axis 3"], \
        [str(d) for d in program.diagnostics]
    assert all("size-oblivious" in d.message and "checked" in d.message for d in notes)
    audit = {(e["input"], e["axis"]): e["status"] for e in program.record.facts["dynamic_dims"]}
    assert audit[("x", 2)] in ("dynamic", "narrowed") and audit[("x", 3)] in ("dynamic", "narrowed")
    assert not [d for d in program.diagnostics if d.code in ("CAP004", "CAP005")]


def test_branch_on_the_trained_size_is_refused_at_its_line_for_every_dim_it_fixes() -> None:
    model = TrainedSizeShortcut().eval()
    shapes = {"x": {0: Dim("batch"), 2: Dim("height"), 3: Dim("width")}}
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(model, (torch.randn(2, 3, 32, 32),), dynamic_shapes=shapes)
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.code for d in errors] == ["CAP005", "CAP005"], [str(d) for d in errors]
    line = _line("shortcut")
    for axis, error in zip((2, 3), errors):
        assert (error.location.file, error.location.line) == (HERE, line), str(error)
        assert f"input `x` axis {axis}" in error.message and f"{NAME}:{line}" in error.message
        assert "fixes it to 32" in error.message
        # the guard that fixed it, in the dims' names, and one spec that makes both static
        assert re.search(r"\(guard `(\(height//8\)\*\(width//8\)|\(width//8\)\*\(height//8\)) == 16`\)", error.message), \
            error.message
        assert "dynamic_shapes = {'x': {0: batch, 2: 32, 3: 32}}" in error.message, error.message
    audit = {(e["input"], e["axis"]): e for e in info.value.record.facts["dynamic_dims"]}
    assert [audit[("x", a)]["status"] for a in (2, 3)] == ["refused", "refused"]
    assert {audit[("x", a)]["line"] for a in (2, 3)} == {line}


def test_a_view_that_matches_the_input_shape_at_the_example_keeps_the_batch_dynamic() -> None:
    model = ViewRows()
    program = onnxsight.export(model, (torch.randn(4, 6),), dynamic_shapes={"x": {0: Dim("batch")}})
    for batch in (2, 4, 6, 10):
        x = torch.randn(batch, 6)
        torch.testing.assert_close(program(x)[0], model(x))
    codes = {d.code: d for d in program.diagnostics}
    assert "CAP005" not in codes and "CAP013" in codes, [str(d) for d in program.diagnostics]
    note = codes["CAP013"]
    assert (note.location.file, note.location.line) == (HERE, _line("view"))
    assert "input `x` axis 0 (batch)" in note.message and "example's 4" in note.message
    # the relation torch.export needs (an even batch) is applied and said, as with any narrowing fix
    assert "dynamic_shapes = {'x': {0: 2*_batch}}" in codes["CAP007"].message, codes["CAP007"].message
