"""One tensor passed as two inputs (torch.onnx's tests pass ``(x, x)``): an input each, unless the model
writes to it in place (ARG021 note, ARG012 error)."""

from __future__ import annotations

import pytest
import torch

import onnxsight
from onnxsight.exporter import InvalidArgumentError

X = torch.randn(2, 3)


class Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y * 2


class Pair(torch.nn.Module):
    def forward(self, pair: list[torch.Tensor], scale: torch.Tensor) -> torch.Tensor:
        return pair[0] * pair[1] - scale


class Accumulate(torch.nn.Module):
    def forward(self, total: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
        total.add_(step)
        return total * step


class WriteRow(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x[0] = 0.0
        return x + y


class WriteOther(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        z.mul_(2)
        return x + y + z


def _notes(program: onnxsight.ONNXProgram) -> list[str]:
    return [d.message for d in program.diagnostics if d.rule.code == "ARG021"]


@pytest.mark.parametrize("model, args, kwargs, places", [
    (Add(), (X, X), {}, ("as x and as y",)),
    (Add(), (X,), {"y": X}, ("as x and as y",)),
    (Pair(), ([X, X], X), {}, ("as pair[0] and as pair[1], scale",)),
], ids=["positional", "keyword", "nested"])
def test_each_place_is_an_input_of_its_own(model: torch.nn.Module, args: tuple, kwargs: dict,
                                           places: tuple[str, ...]) -> None:
    program = onnxsight.export(model, args, kwargs=kwargs)
    (note,) = _notes(program)
    assert all(place in note for place in places), note
    count = len(program.model_proto.graph.input)
    assert count == len(args) + len(kwargs) + (1 if isinstance(args[0], list) else 0)
    # different tensors give what eager gives: the graph reads each input where the model does
    others = [torch.randn(2, 3) for _ in range(count)]
    if isinstance(model, Pair):
        expected = model([others[0], others[1]], others[2])
    else:
        expected = model(others[0], others[1])
    torch.testing.assert_close(program(*others)[0], expected)


@pytest.mark.parametrize("model, written, op", [
    (Accumulate(), "total", "aten.add_.Tensor"),
    (WriteRow(), "x", "aten.fill_.Tensor"),
], ids=["add_", "row-assignment"])
def test_a_write_to_the_shared_tensor_is_refused(model: torch.nn.Module, written: str, op: str) -> None:
    t = torch.randn(2, 3)
    with pytest.raises(InvalidArgumentError) as info:
        onnxsight.export(model, (t, t))
    (error,) = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert error.rule.code == "ARG012"
    assert f"writes to {written} in place ({op})" in error.message, error.message
    assert error.location is not None and error.location.file == __file__  # the line that writes


def test_a_write_to_another_input_does_not_refuse_the_shared_one() -> None:
    t = torch.randn(2, 3)
    program = onnxsight.export(WriteOther(), (t, t, torch.randn(2, 3)))
    assert _notes(program) and len(program.model_proto.graph.input) == 3


def test_the_user_s_tensors_are_untouched() -> None:
    t = torch.randn(2, 3)
    before = t.clone()
    onnxsight.export(Add(), (t, t))
    assert torch.equal(t, before)
