"""The opset a captured program's dtypes need: float8 exists in ONNX from opset 19, float4 from 23.

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
    torch.float4_e2m1fn_x2: 23,
}


def choose_opset(program: torch.export.ExportedProgram, opset: int, ctx: DiagnosticContext, *,
                 chosen: bool, default: int) -> int | None:
    """The opset to translate at: ``opset``, or higher when not ``chosen``; None after DTY005."""
    needed = _first_needing(program, opset)
    if needed is None:
        return opset
    node, dtype, required = needed
    if node.op == "call_function":
        op = op_display(node.target)
    else:  # a weight or input has no line of its own: the first op that reads it has
        reader = next((user for user in node.users if user.op == "call_function"), None)
        op = _input_kind(program, node) + (f", read by {op_display(reader.target)}" if reader else "")
        node = reader or node
    name = str(dtype).removeprefix("torch.")
    if chosen:
        ctx.emit(rules.DTYPE_NEEDS_NEWER_OPSET, node=node, dtype=name, op=op, required=required, opset=opset)
        return None
    ctx.emit(rules.OPSET_RAISED_FOR_DTYPE, node=node, dtype=name, op=op, required=required, default=default)
    return max(required, *(_required(dtype) for _, dtype in _dtypes(program)))


def _input_kind(program: torch.export.ExportedProgram, node: Any) -> str:
    """``buffer w``, ``parameter fc.weight``, ``input x``: a placeholder as the user names it."""
    for spec in program.graph_signature.input_specs:
        if getattr(spec.arg, "name", None) == node.name:
            kind = spec.kind.name.lower().replace("user_input", "input").replace("constant_tensor", "constant")
            return f"{kind} {spec.target or node.name}"
    return f"input {node.name}"


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
