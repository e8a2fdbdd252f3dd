"""Analysis of the decomposed program before translation: values and dtypes the user should know about.

Runs at the start of the translate stage, so its findings are in
``ExportError.diagnostics`` even when translation fails. It only reports; it
never changes the program. Each check is isolated: a check that raises is
recorded as an INT001 note and the export goes on.

Checks (rule codes in the catalog):
- VAL001 Python scalars among the inputs, specialised to the example value
- VAL002 / VAL005 tensors created in forward() and lifted as constants (numpy-built or not)
- VAL003 data-dependent values (``.item()``, ``nonzero``, ...) and the runtime assertions guarding them
- VAL004 ``Tensor.data`` on a captured line
- IO005 in-place updates of buffers or inputs, which ONNX drops
- DTY001 dtypes ONNX cannot hold (DTY002, no ONNX Runtime kernel, comes from the runtime itself)
- DTY004 where a computation is promoted to float64
- OPS005 ops whose ONNX form differs at edge cases; OPS007 random ops; OPS010 FFTs left to ONNX Runtime's
  imprecise DFT
"""

from __future__ import annotations

import linecache
import operator
import re
from typing import Any, Callable, Iterator, Sequence

import torch
from torch.export import graph_signature as gs

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, Level, node_location
from onnxsight.exporter import _dtypes
from onnxsight.exporter.ops._dft_basis import runtime_dft_dims

_DATA_DEPENDENT = frozenset({"_local_scalar_dense", "item", "nonzero", "masked_select", "_unique2", "unique_dim",
                             "unique_consecutive", "repeat_interleave"})
_ASSERTS = frozenset({"_assert_scalar", "_assert_async", "sym_constrain_range", "sym_constrain_range_for_size"})
_RANDOM = frozenset({"rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
                     "normal", "uniform", "multinomial", "native_dropout", "exponential", "poisson"})
_NAN = ("NaN propagation: PyTorch returns NaN when a compared element is NaN; the ONNX specification leaves it "
        "unspecified, so a runtime may return the other value")
_DIVISION = ("rounding_mode='{mode}' with negative operands or a zero divisor (an error for integers in PyTorch, "
             "undefined in ONNX)")
_EDGE_CASES: dict[str, str] = {
    "floor_divide": _DIVISION.format(mode="floor"),
    "fmod": "the sign of the result for negative operands and a zero divisor (ONNX Mod with fmod=1)",
    "remainder": "the sign of the result for negative operands (it follows the divisor) and a zero divisor",
    "maximum": _NAN, "minimum": _NAN, "amax": _NAN, "amin": _NAN, "max": _NAN, "min": _NAN,
    "topk": "the order of equal elements (ties) may differ", "sort": "the order of equal elements may differ",
    "argsort": "the order of equal elements may differ",
    "bitwise_right_shift": "ONNX BitShift is defined for unsigned integers; shifting negative signed values differs",
}
_NUMPY_LINE = re.compile(r"\bnp\.|\bnumpy\b|from_numpy")
_DATA_ATTR = re.compile(r"\.data\b(?!\s*\()")


def analyze_program(program: torch.export.ExportedProgram, ctx: DiagnosticContext, *,
                    inputs: Sequence[tuple[str, Any]] = ()) -> None:
    """Run every check over ``program``; ``inputs`` are ``(readable path, leaf)`` of forward()'s arguments."""
    checks: tuple[Callable[..., None], ...] = (_baked_inputs, _lifted_constants, _state_mutations, _node_checks)
    for check in checks:
        try:
            check(program, ctx, inputs)
        except Exception as exc:  # noqa: BLE001 - advisory analysis must never stop an export
            ctx.emit(rules.INTERNAL_ERROR, level=Level.NOTE, stage=f"analysis ({check.__name__.strip('_')})",
                     error_type=type(exc).__name__, error=str(exc)[:300])


# -- inputs, constants, state ---------------------------------------------------------------------
def _baked_inputs(program: torch.export.ExportedProgram, ctx: DiagnosticContext,
                  inputs: Sequence[tuple[str, Any]]) -> None:
    """VAL001: Python scalars and strings among the inputs (not those torch.export kept symbolic)."""
    symbolic = {node.name for node in program.graph_module.graph.nodes
                if node.op == "placeholder" and isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat,
                                                                                   torch.SymBool))}
    for path, leaf in inputs:
        if isinstance(leaf, (bool, int, float, str)) and path not in symbolic:
            ctx.emit(rules.PYTHON_SCALAR_BAKED, input=path, type=type(leaf).__name__, value=repr(leaf)[:80])


def _lifted_constants(program: torch.export.ExportedProgram, ctx: DiagnosticContext, _: Any) -> None:
    """VAL002 (built with numpy) / VAL005 (other): tensors created in forward() and lifted as constants."""
    nodes = {node.name: node for node in program.graph_module.graph.nodes}
    for spec in program.graph_signature.input_specs:
        if spec.kind != gs.InputKind.CONSTANT_TENSOR:
            continue
        placeholder = nodes.get(getattr(spec.arg, "name", ""))
        user = next((u for u in (placeholder.users if placeholder is not None else ())
                     if node_location(u)[0] is not None), None)
        code = _source_line(user) if user is not None else ""
        value = program.constants.get(spec.target)
        shape = list(value.shape) if isinstance(value, torch.Tensor) else "?"
        if _NUMPY_LINE.search(code):
            ctx.emit(rules.NUMPY_CALL_BAKED, node=user, detail=f"{spec.target} = {code.strip()}"[:200],
                     properties={"constant": spec.target, "shape": shape})
        else:
            ctx.emit(rules.CONSTANT_TENSOR_BAKED, node=user, name=spec.target, shape=shape,
                     properties={"constant": spec.target})


def _state_mutations(program: torch.export.ExportedProgram, ctx: DiagnosticContext, _: Any) -> None:
    """IO005: buffers and inputs updated in place; the ONNX model keeps no state."""
    nodes = {node.name: node for node in program.graph_module.graph.nodes}
    for spec in program.graph_signature.output_specs:
        if spec.kind == gs.OutputKind.BUFFER_MUTATION:
            kind = "buffer"
        elif spec.kind == gs.OutputKind.USER_INPUT_MUTATION:
            kind = "input"
        else:
            continue
        ctx.emit(rules.STATE_MUTATION_DROPPED, node=nodes.get(getattr(spec.arg, "name", "")), kind=kind,
                 target=spec.target)


# -- per node ---------------------------------------------------------------------------------------
def _node_checks(program: torch.export.ExportedProgram, ctx: DiagnosticContext, _: Any) -> None:
    """Per-node rules, each reported once per (rule, op, source line)."""
    seen: set[tuple[str, str, str]] = set()
    user_inputs = set(program.graph_signature.user_inputs)
    targets = {spec.arg.name: spec.target for spec in program.graph_signature.input_specs  # b_w -> w
               if spec.target and hasattr(spec.arg, "name")}
    user_dtypes = {val.dtype for node in program.graph_module.graph.nodes
                   if node.op == "placeholder" and node.name in user_inputs
                   for val in [node.meta.get("val")] if isinstance(val, torch.Tensor)}

    def emit(rule: rules.Rule, node: torch.fx.Node, **fields: Any) -> None:
        location = node_location(node)[0]
        key = (rule.code, str(fields.get("op", "")), str(location) if location else node.name)
        if key not in seen:
            seen.add(key)
            ctx.emit(rule, node=node, **fields)

    for node in _call_nodes(program.graph_module):
        op, base, overload = _op_name(node.target)
        if base in _DATA_DEPENDENT:
            emit(rules.DATA_DEPENDENT_VALUE, node, op=op, guards=_guards_text(_count_guards(node)))
        if base in _RANDOM and (base != "native_dropout" or node.args[2:3] != (False,)):
            emit(rules.NONDETERMINISTIC_OP, node, op=op)
        detail = _edge_case(base, overload, node)
        if detail:
            emit(rules.EDGE_CASE_SEMANTICS, node, op=op, detail=detail)
        for dim, length in runtime_dft_dims(node)[:1]:
            emit(rules.IMPRECISE_RUNTIME_DFT, node, op=op, dim=dim, length=length)
        code = _source_line(node)
        if code and _DATA_ATTR.search(code):
            emit(rules.TENSOR_DATA_USE, node, code=code.strip()[:120])
        _dtype_checks(node, op, emit, allow_float64=torch.float64 in user_dtypes)
        if op not in _FLOAT4_OPS:
            _float4_check(node, op, emit, targets)


def _dtype_checks(node: torch.fx.Node, op: str, emit: Callable[..., None], *, allow_float64: bool) -> None:
    """DTY001 (no ONNX type), DTY004 (first float64 value of a float32 computation).

    Complex values are carried as real pairs by the translator, which reports DTY001 itself
    where an op has no complex-aware translation.
    """
    outputs = [v for v in _vals(node) if isinstance(v, torch.Tensor)]
    for val in outputs:
        if val.dtype.is_complex and val.dtype is not torch.complex32:
            continue
        try:
            _dtypes.to_onnx(val.dtype)
        except TypeError:
            emit(rules.DTYPE_NOT_REPRESENTABLE, node, op=op, value=node.name,
                 dtype=str(val.dtype).replace("torch.", ""))
    if allow_float64 or not any(v.dtype is torch.float64 for v in outputs) or _quantization_parameters(node):
        return
    inputs = [v for n in node.all_input_nodes for v in _vals(n) if isinstance(v, torch.Tensor)]
    others = sorted({str(v.dtype).replace("torch.", "") for v in inputs if v.dtype is not torch.float64})
    if others or not inputs:
        emit(rules.FLOAT64_COMPUTATION, node, op=op, value=node.name,
             from_dtype=", ".join(others) if others else "Python values")


# ops translated on float4_e2m1fn_x2 values: its byte views (ops/float4.py), copies (Identity), empty
_FLOAT4_OPS = frozenset({"aten.view.dtype", "aten.clone.default", "aten.alias.default", "aten.alias_copy.default",
                         "aten.detach.default", "aten._assert_tensor_metadata.default", "aten.empty.memory_format"})


def _float4_check(node: torch.fx.Node, op: str, emit: Callable[..., None], targets: dict[str, str]) -> None:
    """DTY007: an op on packed float4 pairs other than a byte view or a copy (see ops/float4.py).

    ``targets``: a lifted weight's placeholder -> its name in the model (``b_w`` -> ``w``).
    """
    float4 = torch.float4_e2m1fn_x2
    values = [(targets.get(n.name, n.name), v) for n in node.all_input_nodes for v in _vals(n)]
    values += [(node.name, v) for v in _vals(node)]
    name = next((name for name, v in values if isinstance(v, torch.Tensor) and v.dtype is float4), None)
    if name is not None:
        emit(rules.FLOAT4_OP_NOT_TRANSLATED, node, op=op, value=name)


def _quantization_parameters(node: torch.fx.Node) -> bool:
    """A quantization op's float64 scale (``choose_qparams``, torch.ao's convention): no float64 computation."""
    source = node.args[0] if node.target is operator.getitem and node.args else node
    return isinstance(source, torch.fx.Node) and str(source.target).startswith(("quantized_decomposed.", "torchao."))


def _edge_case(base: str, overload: str, node: torch.fx.Node) -> str | None:
    if base == "div" and overload.endswith("_mode"):
        mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
        return _DIVISION.format(mode=mode) if mode in ("floor", "trunc") else None
    if base == "round" and overload == "decimals":
        return "round(decimals=n) scales by 10**n first, so halfway cases can round differently"
    if base == "sort" and (node.kwargs.get("stable") or (len(node.args) > 1 and node.args[1] is True)):
        return None
    return _EDGE_CASES.get(base)


def _count_guards(node: torch.fx.Node) -> int:
    """Runtime assertions reachable from ``node`` through symbolic (non-tensor) values."""
    count, stack, seen = 0, list(node.users), {node}
    while stack:
        user = stack.pop()
        if user in seen:
            continue
        seen.add(user)
        if _op_name(user.target)[1] in _ASSERTS:
            count += 1
        elif not isinstance(user.meta.get("val"), torch.Tensor):
            stack.extend(user.users)
    return count


def _guards_text(count: int) -> str:
    if count == 0:
        return "with no runtime assertion about it"
    return f"guarded by {count} runtime assertion{'s' if count != 1 else ''}"


# -- helpers ------------------------------------------------------------------------------------------
def _call_nodes(gm: torch.fx.GraphModule) -> Iterator[torch.fx.Node]:
    """call_function nodes of ``gm`` and of its nested graph modules (cond/while bodies)."""
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(gm, str(node.target), None)
            if isinstance(sub, torch.fx.GraphModule):
                yield from _call_nodes(sub)
        elif node.op == "call_function":
            yield node


def _op_name(target: Any) -> tuple[str, str, str]:
    """(``aten.div.Tensor_mode``, ``div``, ``Tensor_mode``) for an OpOverload; best effort otherwise."""
    name = getattr(target, "_opname", None)
    if name is not None:
        overload = getattr(target, "_overloadname", "default")
        namespace = getattr(target, "namespace", "aten")
        return f"{namespace}.{name}.{overload}", name, overload
    text = getattr(target, "__name__", None) or str(target)
    return text, text, ""


def _vals(node: torch.fx.Node) -> tuple[Any, ...]:
    val = node.meta.get("val")
    return tuple(val) if isinstance(val, (list, tuple)) else (val,)


def _source_line(node: torch.fx.Node | None) -> str:
    """The text of the node's user source line ('' when unknown)."""
    location = node_location(node)[0] if node is not None else None
    if location is None:
        return ""
    if location.code:
        return location.code
    return linecache.getline(location.file, location.line or 0) if location.line else ""
