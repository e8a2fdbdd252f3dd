"""The analysis pass over the decomposed graph: cases the fixture table cannot build with a small model."""

from __future__ import annotations

import os
from typing import Any

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, Level
from onnxsight.exporter.translate._analysis import analyze_program

HERE = os.path.abspath(__file__)


def _program(model: torch.nn.Module, *args: Any, **options: Any) -> torch.export.ExportedProgram:
    return torch.export.export(model, args, strict=False, **options).run_decompositions()


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _codes(ctx: DiagnosticContext) -> list[str]:
    return [d.code for d in ctx.diagnostics]


def test_tensor_data_on_a_captured_line_is_val004() -> None:
    program = _program(Double(), torch.randn(3))
    node = next(n for n in program.graph_module.graph.nodes if n.op == "call_function")
    node.meta["stack_trace"] = f'  File "{HERE}", line 7, in forward\n    return x.data * 2\n'
    ctx = DiagnosticContext()
    analyze_program(program, ctx)
    (diagnostic,) = [d for d in ctx.diagnostics if d.code == "VAL004"]
    assert diagnostic.location.line == 7 and "x.data * 2" in diagnostic.message


def test_a_failing_check_is_an_internal_note_not_a_crash() -> None:
    class Broken:
        @property
        def graph_module(self) -> Any:
            raise RuntimeError("graph unavailable")
        graph_signature = None
        constants: dict = {}

    ctx = DiagnosticContext()
    analyze_program(Broken(), ctx, inputs=[("scale", 0.5)])  # type: ignore[arg-type]
    assert set(_codes(ctx)) == {"INT001"}
    assert all(d.level is Level.NOTE for d in ctx.diagnostics) and not ctx.errors


def test_guards_are_counted_for_item() -> None:
    class Item(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            n = x.sum().int().item()
            torch._check(n >= 0)
            torch._check(n < 100)
            return x * n

    ctx = DiagnosticContext()
    analyze_program(_program(Item(), torch.ones(3)), ctx)
    (diagnostic,) = [d for d in ctx.diagnostics if d.code == "VAL003"]
    assert "aten._local_scalar_dense.default" in diagnostic.message and "runtime assertion" in diagnostic.message


def test_edge_cases_flag_only_the_risky_variants() -> None:
    class Ops(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return (torch.div(x, 2, rounding_mode="trunc"), torch.div(x, 2), torch.sort(x, stable=True)[0],
                    torch.remainder(x, 2), torch.maximum(x, x))

    ctx = DiagnosticContext()
    analyze_program(_program(Ops(), torch.randn(4)), ctx)
    ops = sorted(d.fields["op"] for d in ctx.diagnostics if d.rule is rules.EDGE_CASE_SEMANTICS)
    assert ops == ["aten.div.Tensor_mode", "aten.maximum.default", "aten.remainder.Scalar"]


def test_float64_models_and_symbolic_ints_are_not_flagged() -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            return x * 2 + n

    dim = torch.export.Dim.DYNAMIC
    program = _program(Scale(), torch.randn(3, dtype=torch.float64), 3, dynamic_shapes={"x": None, "n": dim})
    ctx = DiagnosticContext()
    analyze_program(program, ctx, inputs=[("x", torch.randn(3)), ("n", 3)])
    assert "DTY004" not in _codes(ctx) and "VAL001" not in _codes(ctx)


def test_input_mutation_is_io005() -> None:
    class Inplace(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.add_(1)
            return x * 2

    ctx = DiagnosticContext()
    analyze_program(_program(Inplace(), torch.randn(3)), ctx)
    (diagnostic,) = [d for d in ctx.diagnostics if d.code == "IO005"]
    assert diagnostic.message.startswith("input x is mutated")
