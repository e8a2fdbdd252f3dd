"""A capture that will fail gives up early, and one that succeeds runs once (issue 33, 'Export time').

Hiera's pooler (``AdaptiveAvgPool1d`` over a transposed tensor) makes torch guard ``batch <= 1`` when
the example has one image: a size-oblivious capture is then bound to end in a constraint violation, and
the example grown to two images is what captures the model. A batch-1 example is therefore captured from
the grown example first (one torch.export call, checked at the example); an empty batch (size 0, not grown
first) is captured size-oblivious first, and that attempt stops at the guard, not at the end of the trace,
its record naming the guard and the line. Where the grown example fails, the size-oblivious capture that
follows reuses it instead of tracing it again.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import onnxsight


REACHED: list[str] = []   # outside the modules: torch.export puts back the attributes a trace assigns


class Counted(nn.Module):
    """A layer that notes each call: the trace (or a run) reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        REACHED.append(type(x).__name__)
        return torch.relu(self.linear(x))


class PoolFirst(nn.Module):
    """The pooler that guards `batch <= 1` at batch 1 first, then more layers."""

    def __init__(self) -> None:
        super().__init__()
        self.proj, self.pool = nn.Linear(8, 8), nn.AdaptiveAvgPool1d(1)
        self.after = nn.Sequential(*(Counted() for _ in range(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = torch.flatten(self.pool(self.proj(x).transpose(1, 2)), 1)
        return self.after(pooled)


def test_a_guard_ruling_out_size_two_stops_the_size_oblivious_attempt_there() -> None:
    model = PoolFirst().eval()
    x = torch.randn(0, 5, 8)   # an empty batch: captured size-oblivious first (a size 0 is not grown first)
    REACHED.clear()
    program = onnxsight.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    first, second = program.record.attempts
    assert not first.success and first.error_type == "SizeOneGuard" and first.rule == "CAP004"
    assert "`batch <= 1`" in (first.error or "") and "test_capture_early_stop.py" in (first.error or "")
    assert second.success and "grown to 2" in second.strategy
    # the stopped trace never reached the layers after the pooler: they ran in the grown capture (fake
    # tensors) and in the check at the example (real ones) only, where a full first trace made two captures
    assert len(REACHED) == 6 and REACHED.count("Tensor") == 3
    x3 = torch.randn(3, 5, 8)
    torch.testing.assert_close(program(x3)[0], model(x3), rtol=1e-5, atol=1e-5)
    assert "CAP009" in [d.rule.code for d in program.diagnostics]   # batch kept dynamic, as before


def test_a_batch_one_example_is_captured_from_the_grown_example_first(monkeypatch: Any) -> None:
    """The capture Hiera needs, first: one torch.export call, the graph checked at one image, batch dynamic."""
    calls = _counted(monkeypatch)
    model = PoolFirst().eval()
    x = torch.randn(1, 5, 8)
    REACHED.clear()
    program = onnxsight.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    [attempt] = program.record.attempts
    assert attempt.success and "grown to 2" in attempt.strategy and calls == [False]
    assert REACHED == ["FakeTensor"] * 3 + ["Tensor"] * 3   # the trace, then the check at the example
    notes = [d for d in program.diagnostics if d.rule.code == "CAP009"]
    assert len(notes) == 1 and "grown to size 2" in notes[0].message and "size 1" in notes[0].message
    shape = program.model_proto.graph.input[0].type.tensor_type.shape
    assert [d.dim_param or d.dim_value for d in shape.dim] == ["batch", 5, 8]
    for batch in (1, 3):
        xb = torch.randn(batch, 5, 8)
        torch.testing.assert_close(program(xb)[0], model(xb), rtol=1e-5, atol=1e-5)
    # the program keeps the user's example, the one it was checked at, and verify() runs it by default
    (example,), _ = program.exported_program.example_inputs
    assert example is x
    result = onnxsight.verify(program)
    assert result.passed and result.outputs["shape"].iloc[0] in ((1, 8), [1, 8])


class SqueezeOne(nn.Module):
    """Computes something else at batch 1: the grown example's graph fails the check at the example."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.squeeze(0) if x.shape[0] == 1 else x  # @squeeze


def test_the_grown_example_tried_first_is_not_captured_again(monkeypatch: Any) -> None:
    """It fails the check at the example; the size-oblivious capture (stopped at `Eq(batch, 1)`) sends capture
    to that grown example, whose outcome is reused: two torch.export calls, and CAP008 at the model's line."""
    calls = _counted(monkeypatch)
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(SqueezeOne(), (torch.randn(1, 3),), dynamic_shapes=({0: torch.export.Dim("batch")},))
    strategies = [a.strategy.split(", ", 1)[1] for a in info.value.record.attempts]
    assert strategies == ["example grown to 2", "size-oblivious", "example grown to 2 (the first attempt's outcome)"]
    assert calls == [False, False]
    [refused] = [d for d in info.value.diagnostics if d.rule.code == "CAP008"]
    assert refused.location is not None and refused.location.file == __file__
    assert "# @squeeze" in (refused.location.code or "")


def test_a_guard_the_requested_range_allows_does_not_stop_the_attempt() -> None:
    model = PoolFirst().eval()
    x = torch.randn(1, 5, 8)
    with_max = torch.export.Dim("batch", max=1)
    try:
        program = onnxsight.export(model, (x,), dynamic_shapes=({0: with_max},))
    except onnxsight.ExportError as exc:
        attempts = exc.record.attempts
    else:
        attempts = program.record.attempts
    assert all(a.error_type != "SizeOneGuard" for a in attempts)


def test_a_capture_that_succeeds_runs_torch_export_once(monkeypatch: Any) -> None:
    calls = _counted(monkeypatch)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    program = onnxsight.export(model, (torch.randn(2, 3, 8, 8),),
                               dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert calls == [False] and len(program.record.attempts) == 1
    assert next(s for s in program.record.stages if s.name == "decompose").status == "skipped"


def _counted(monkeypatch: Any) -> list:
    """torch.export.export calls, by their ``strict`` argument."""
    calls: list = []
    export = torch.export.export

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("strict"))
        return export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counted)
    return calls
