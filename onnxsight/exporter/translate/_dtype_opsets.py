"""The opset a captured program's dtypes need: float8 exists in ONNX from opset 19.

Checked before translation: translated anyway, a float8 model at opset 18 fails the ONNX checker on
a Cast node the user never wrote (ONX004). Without ``opset_version`` the export targets the lowest
opset that holds every dtype (DTY006, a note); with one that is too low it is refused (DTY005) at the
user's line that makes the dtype.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.translate._nodes import op_display

#: dtype -> the first opset of the default domain whose Cast takes it.
DTYPE_OPSETS: dict[torch.dtype, int] = {
    torch.float8_e4m3fn: 19, torch.float8_e4m3fnuz: 19, torch.float8_e5m2: 19, torch.float8_e5m2fnuz: 19,
}


def choose_opset(program: torch.export.ExportedProgram, opset: int, ctx: DiagnosticContext, *,
                 chosen: bool, default: int) -> int | None:
    """The opset to translate at: ``opset``, or higher when not ``chosen``; None after DTY005."""
    needed = _first_needing(program, opset)
    if needed is None:
        return opset
    node, dtype, required = needed
    op = op_display(node.target) if node.op == "call_function" else f"input {node.name}"
    name = str(dtype).removeprefix("torch.")
    if chosen:
        ctx.emit(rules.DTYPE_NEEDS_NEWER_OPSET, node=node, dtype=name, op=op, required=required, opset=opset)
        return None
    ctx.emit(rules.OPSET_RAISED_FOR_DTYPE, node=node, dtype=name, op=op, required=required, default=default)
    return max(required, *(_required(dtype) for _, dtype in _dtypes(program)))


def _first_needing(program: torch.export.ExportedProgram, opset: int) -> tuple[Any, torch.dtype, int] | None:
    for node, dtype in _dtypes(program):
        required = _required(dtype)
        if required > opset:
            return node, dtype, required
    return None


def _required(dtype: torch.dtype) -> int:
    return DTYPE_OPSETS.get(dtype, 0)


def _dtypes(program: torch.export.ExportedProgram) -> Iterator[tuple[Any, torch.dtype]]:
    """(FX node, dtype) of every tensor value the program's graph holds."""
    for node in program.graph_module.graph.nodes:
        values = node.meta.get("val")
        for value in values if isinstance(values, (list, tuple)) else (values,):
            if isinstance(value, torch.Tensor):
                yield node, value.dtype
