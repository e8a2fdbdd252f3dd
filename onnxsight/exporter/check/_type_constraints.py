"""ONX004: every node's input and output element types against its ONNX operator schema.

``onnx.checker`` checks attributes and graph structure but not the type
constraints of operator schemas (``Celu``'s ``T`` is ``tensor(float)`` only),
and strict shape inference only catches some of them: such a model is written
without a word and ONNX Runtime refuses to load it. This check walks the graph
and its subgraphs once, with the element types ONNX's own shape inference gave
each value, and reports every value whose type its schema does not allow, at
the user's source line recorded on the node.

IO006 lives here too: the other check a model must pass before it is written
(a graph with no output, which no runtime can load).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

import onnx
from onnx import defs

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, parse_stack_trace, user_frame

STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"
FX_NODE_KEY = "pkg.torch.onnx.fx_node"


@dataclass(frozen=True)
class Violation:
    """One value whose element type its node's schema does not allow."""

    node: onnx.NodeProto
    role: str          # "input" / "output"
    index: int
    name: str
    dtype: str         # "tensor(double)"
    allowed: tuple[str, ...]
    opset: int


def type_string(proto: onnx.TypeProto) -> str | None:
    """The schema notation of a TypeProto (``tensor(float)``, ``seq(tensor(int64))``); None when unknown."""
    kind = proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(proto, kind).elem_type
        if not elem:
            return None
        wrapper = "tensor" if kind == "tensor_type" else "sparse_tensor"
        return f"{wrapper}({onnx.TensorProto.DataType.Name(elem).lower()})"
    if kind in ("sequence_type", "optional_type"):
        inner = type_string(getattr(proto, kind).elem_type)
        return None if inner is None else f"{'seq' if kind == 'sequence_type' else 'optional'}({inner})"
    return None


@dataclass(frozen=True)
class _Formal:
    """One formal input/output of a schema, as plain Python (pybind attribute reads are slow)."""

    name: str
    type_str: str
    homogeneous: bool
    variadic: bool


@lru_cache(maxsize=None)
def _signature(op_type: str, opset: int, domain: str) -> tuple[tuple[_Formal, ...], tuple[_Formal, ...],
                                                               dict[str, tuple[str, ...]]] | None:
    """(inputs, outputs, type constraints) of the schema in force at ``opset``; None for unknown ops."""
    try:
        schema = defs.get_schema(op_type, opset, domain)
    except defs.SchemaError:
        return None
    variadic = defs.OpSchema.FormalParameterOption.Variadic

    def formals(params: Any) -> tuple[_Formal, ...]:
        return tuple(_Formal(p.name, p.type_str, p.is_homogeneous, p.option == variadic) for p in params)

    constraints = {c.type_param_str: tuple(c.allowed_type_strs) for c in schema.type_constraints}
    return formals(schema.inputs), formals(schema.outputs), constraints


def _formal(params: tuple[_Formal, ...], index: int) -> _Formal | None:
    """The formal parameter of actual position ``index`` (the last one repeats when variadic)."""
    if index < len(params):
        return params[index]
    return params[-1] if params and params[-1].variadic else None


def _scope_types(graph: onnx.GraphProto, outer: Mapping[str, str]) -> dict[str, str]:
    types = dict(outer)
    for init in graph.initializer:
        types[init.name] = f"tensor({onnx.TensorProto.DataType.Name(init.data_type).lower()})"
    for info in (*graph.input, *graph.value_info, *graph.output):
        text = type_string(info.type)
        if text is not None:
            types[info.name] = text
    return types


def _node_violations(node: onnx.NodeProto, types: Mapping[str, str], opset: int) -> Iterable[Violation]:
    signature = _signature(node.op_type, opset, node.domain)
    if signature is None:
        return
    inputs, outputs, constraints = signature
    bound: dict[str, str] = {}
    for role, names, params in (("input", node.input, inputs), ("output", node.output, outputs)):
        for index, name in enumerate(names):
            param = _formal(params, index)
            dtype = types.get(name) if name else None
            if param is None or dtype is None:
                continue
            allowed = constraints.get(param.type_str, (param.type_str,))
            if dtype not in allowed:
                yield Violation(node, role, index, f"{param.name}={name}", dtype, allowed, opset)
            elif param.homogeneous and param.type_str in constraints \
                    and bound.setdefault(param.type_str, dtype) != dtype:
                yield Violation(node, role, index, f"{param.name}={name}", dtype, (bound[param.type_str],), opset)


def find_violations(graph: onnx.GraphProto, opsets: Mapping[str, int],
                    outer: Mapping[str, str] | None = None) -> list[Violation]:
    """Every type-constraint violation in ``graph`` and its subgraphs (If/Loop/Scan bodies)."""
    types = _scope_types(graph, outer or {})
    found: list[Violation] = []
    for node in graph.node:
        opset = opsets.get(node.domain or "", opsets.get("ai.onnx"))
        if opset is not None:
            found.extend(_node_violations(node, types, opset))
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found.extend(find_violations(sub, opsets, types))
    return found


def _metadata(node: onnx.NodeProto, key: str) -> str | None:
    return next((entry.value for entry in node.metadata_props if entry.key == key), None)


def check_type_constraints(ctx: DiagnosticContext, model: onnx.ModelProto) -> list[Violation]:
    """Emit ONX004 for each violation in ``model`` (typed by shape inference); returns them.

    ``model`` should carry inferred ``value_info`` (``onnx.shape_inference``):
    values whose type is unknown are not judged.
    """
    opsets = {entry.domain or "": entry.version for entry in model.opset_import}
    violations = find_violations(model.graph, opsets)
    seen: set[str] = set()
    for v in violations:
        if v.node.name in seen:  # the first offending value of a node says it; its output follows from it
            continue
        seen.add(v.node.name)
        stack = parse_stack_trace(_metadata(v.node, STACK_TRACE_KEY))
        ctx.emit(rules.TYPE_CONSTRAINT_VIOLATED, location=user_frame(stack), stack=stack,
                 properties={"onnx_node": v.node.name, "fx_node": _metadata(v.node, FX_NODE_KEY)},
                 onnx_node=v.node.name, op=v.node.op_type, role=v.role, index=v.index, name=v.name,
                 dtype=v.dtype, opset=v.opset, allowed=", ".join(v.allowed))
    return violations


def require_outputs(ctx: DiagnosticContext, graph: onnx.GraphProto, exported: Any) -> bool:
    """IO006 when the graph has no output (forward() returned only Python values, or nothing).

    NOTE: such values are not exported as constant outputs: torch.export has already
    specialised them to what they were while tracing, so a graph of constants would
    present a trace-time value as a computation. A graph with zero outputs is never
    written (ONNX Runtime cannot load it).
    """
    if len(graph.output):
        return True
    from torch.export import graph_signature as gs
    from torch.utils import _pytree as pytree

    specs = [s for s in exported.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT]
    values = [s.arg.value if isinstance(s.arg, gs.ConstantArgument) else type(s.arg).__name__ for s in specs]
    shown = "none: forward() returns nothing"
    spec = getattr(exported.call_spec, "out_spec", None)
    try:
        flat = pytree.tree_flatten_with_path(pytree.tree_unflatten(values, spec))[0] if spec is not None else []
        shown = ", ".join(f"{pytree.keystr(path) or 'output'} = {value!r}" for path, value in flat) or shown
    except Exception:  # noqa: BLE001 - an unusual spec only costs the readable paths
        shown = ", ".join(repr(v) for v in values) or shown
    ctx.emit(rules.NO_TENSOR_OUTPUTS, outputs=f"({shown})")
    return False
