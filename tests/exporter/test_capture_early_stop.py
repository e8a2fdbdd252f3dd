"""A capture that will fail gives up early, and one that succeeds runs once (issue 33, 'Export time').

Hiera's pooler (``AdaptiveAvgPool1d`` over a transposed tensor) makes torch guard ``batch <= 1`` when
the example has one image: the size-oblivious capture is then bound to end in a constraint violation and
the example grown to two images is captured instead. The first attempt stops at that guard, not at the
end of the trace, and its record names the guard and the line.
"""

from __future__ import annotations

from typing import Any

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
    x = torch.randn(1, 5, 8)
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
    calls = []
    export = torch.export.export

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("strict"))
        return export(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counted)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).eval()
    program = onnxsight.export(model, (torch.randn(2, 3, 8, 8),),
                               dynamic_shapes=({0: torch.export.Dim("batch")},))
    assert calls == [False] and len(program.record.attempts) == 1
    assert next(s for s in program.record.stages if s.name == "decompose").status == "skipped"
