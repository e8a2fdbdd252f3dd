"""In-place ops on intermediates are made functional without a re-trace, and only where that is safe.

torchvision's ``ReLU(inplace=True)`` and ``out += identity`` used to send every such model through
run_decompositions (a whole re-trace, most of a dynamic-shape export's time). The rewrite must keep
the model's meaning where a write is visible elsewhere: through a view, on an input, on a weight.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import onnxsight


class Block(torch.nn.Module):
    """A residual block as torchvision writes it: in-place ReLU, in-place add, in-place hardswish."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.act = torch.nn.Hardswish(inplace=True)
        self.drop = torch.nn.Dropout(0.1, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn(self.conv(x)), inplace=True)
        before = out * 2                      # a use before the write sees the value before it
        out += x
        out = self.act(out)
        out.mul_(0.5)
        return self.drop(out) + before


class WriteThroughView(torch.nn.Module):
    """The write goes through a view: the base must see it (left to run_decompositions)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.view(-1)[0:1].add_(100.0)
        return y + 1


class WriteInput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1.0)
        return x * 2


class WriteBeforeViewUse(torch.nn.Module):
    """A view taken before the write is read after it: it must see the write."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        flat = y.flatten()
        y.relu_()
        return flat + 1


def _stage(program: onnxsight.ONNXProgram) -> object:
    return next(s for s in program.record.stages if s.name == "decompose")


def _calibrated(model: torch.nn.Module) -> torch.nn.Module:
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 4, 6, 6))
    return model.eval()


def test_torchvision_style_block_is_not_retraced_and_stays_right() -> None:
    model = _calibrated(Block())
    x = torch.randn(2, 4, 6, 6)
    program = onnxsight.export(model, (x.clone(),), dynamic_shapes={"x": {0: Dim("batch"), 2: Dim("h"), 3: Dim("w")}})
    stage = _stage(program)
    assert stage.status == "skipped", stage.detail
    assert "5 in-place op(s) rewritten" in stage.detail, stage.detail
    for shape in ((2, 4, 6, 6), (3, 4, 7, 9)):
        x = torch.randn(*shape)
        torch.testing.assert_close(program(x.clone())[0], model(x.clone()), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("model", [WriteThroughView(), WriteBeforeViewUse()], ids=lambda m: type(m).__name__)
def test_writes_seen_through_views_are_left_to_decomposition(model: torch.nn.Module) -> None:
    x = torch.randn(3, 4)
    program = onnxsight.export(model, (x.clone(),))
    assert _stage(program).status != "skipped"
    torch.testing.assert_close(program(x.clone())[0], model(x.clone()))


def test_write_to_an_input_is_not_rewritten() -> None:
    from onnxsight.exporter.decompose._core_aten import functionalize_inplace
    from onnxsight.exporter._registry import default_registry

    exported = torch.export.export(WriteInput(), (torch.randn(3),), strict=False)
    assert functionalize_inplace(exported, default_registry(), 18) == 0
