"""Higher-order control flow: torch.cond -> If, while_loop -> Loop, scan and map -> Scan.

The branch/body GraphModules arrive as arguments (the translator binds
``get_attr`` nodes to the modules). Each is translated into a child builder
with ``b.translate_subgraph``; operands and additional inputs are bound to the
outer Values directly, so the ONNX bodies read them from the outer scope
(lifted parameters included) instead of taking them as formal inputs.

NOTE: ONNX requires every value name to be unique across a graph and all its
subgraphs, and a body output to be produced inside the body. Body values are
prefixed ``<fx node>_<role>_<n>/`` (``n`` from the builder's shared counter,
so nested bodies never collide), and outputs that are outer values, body
inputs or repeats are copied with an Identity (:func:`_body_outputs`).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation

higher_order = torch.ops.higher_order


def _prefix(b: GraphBuilder, role: str) -> str:
    """A unique prefix for the values of one body of the current FX node."""
    node = b.node.name
    return f"{node}{b.fresh(role)}/"


def _as_value(b: GraphBuilder, item: Any) -> Value:
    """A body input/output as a Value: Python scalars (SymInt/SymBool that were specialised) become constants."""
    if isinstance(item, Value):
        return item
    if isinstance(item, (bool, int, float)):
        return b.const(item)
    raise TypeError(f"control-flow operand must be a tensor or a Python scalar, got {type(item).__name__}")


def _body_outputs(child: GraphBuilder, outputs: Sequence[Any]) -> list[Value]:
    """Outputs of a body, each produced by a node of the body and listed once."""
    produced = {name for node in child.nodes for name in node.output}
    seen: set[str] = set()
    result: list[Value] = []
    for item in outputs:
        value = _as_value(child, item)
        if value.name not in produced or value.name in seen:
            copy = child.op("Identity", value, dtype=value.dtype, shape=value.shape)
            value = copy
            produced.add(copy.name)
        seen.add(value.name)
        result.append(value)
    return result


def _formal(b: GraphBuilder, like: Value, hint: str, *, drop_first: bool = False) -> Value:
    """A formal input of a body typed like ``like`` (without its first dim for scan slices)."""
    shape = like.shape
    if drop_first and shape is not None:
        shape = shape[1:]
    return Value(b.fresh(hint), like.dtype, shape)


def _bool_scalar(b: GraphBuilder, pred: Any) -> Value:
    """A predicate (bool tensor, SymBool translated to a Value, or a specialised bool) as a bool Value."""
    if isinstance(pred, bool):
        return b.const(pred, torch.bool)
    return b.cast(_as_value(b, pred), torch.bool)


def _single(outs: Value | tuple[Value, ...]) -> tuple[Value, ...]:
    """``b.op`` returns a Value for one output; higher-order ops always produce a sequence."""
    return outs if isinstance(outs, tuple) else (outs,)


@translation(higher_order.cond)
def higher_order_cond(b: GraphBuilder, pred: Any, true_fn: torch.fx.GraphModule,
                      false_fn: torch.fx.GraphModule, operands: Sequence[Any]) -> tuple[Value, ...]:
    """cond(Tensor|SymBool pred, GraphModule true_fn, GraphModule false_fn, Tensor[] operands) -> Tensor[]"""
    condition = _bool_scalar(b, pred)
    branches = []
    for role, fn in (("then", true_fn), ("else", false_fn)):
        child = b.subgraph()
        outputs = b.translate_subgraph(child, fn, list(operands), _prefix(b, role))
        values = _body_outputs(child, outputs)
        branches.append(child.make_graph(f"{b.node.name}_{role}", [], values))
    count = len(branches[0].output)
    outs = b.op("If", condition, outputs=count, then_branch=branches[0], else_branch=branches[1])
    return _single(outs)


def _inline(b: GraphBuilder, fn: torch.fx.GraphModule, inputs: Sequence[Any], role: str) -> list[Any]:
    """Translate ``fn`` into ``b`` itself (through a child builder whose nodes are moved over)."""
    child = b.subgraph()
    outputs = b.translate_subgraph(child, fn, list(inputs), _prefix(b, role))
    b.nodes.extend(child.nodes)
    return list(outputs)


@translation(higher_order.while_loop)
def higher_order_while_loop(b: GraphBuilder, cond_fn: torch.fx.GraphModule, body_fn: torch.fx.GraphModule,
                            carried_inputs: Sequence[Any], additional_inputs: Sequence[Any]) -> tuple[Value, ...]:
    """while_loop(GraphModule cond_fn, GraphModule body_fn, Tensor[] carried_inputs,
    Tensor[] additional_inputs) -> Tensor[]

    ONNX Loop without a trip count: the condition is evaluated once before the
    loop and again at the end of every iteration on the new carried values.
    """
    carried = [_as_value(b, c) for c in carried_inputs]
    extra = list(additional_inputs)
    (first,) = _inline(b, cond_fn, [*carried, *extra], "cond")
    condition = _bool_scalar(b, first)
    body = b.subgraph()
    iteration = Value(b.fresh("iter"), torch.int64, ())
    cond_in = Value(b.fresh("cond_in"), torch.bool, ())
    formals = [_formal(b, c, "carried") for c in carried]
    new = b.translate_subgraph(body, body_fn, [*formals, *extra], _prefix(b, "body"))
    new_values = [_as_value(body, v) for v in new]
    (again,) = b.translate_subgraph(body, cond_fn, [*new_values, *extra], _prefix(b, "cond"))
    outputs = _body_outputs(body, [_bool_scalar(body, again), *new_values])
    graph = body.make_graph(f"{b.node.name}_body", [iteration, cond_in, *formals],
                            outputs)
    outs = b.op("Loop", None, condition, *carried, outputs=len(carried), body=graph)
    return _single(outs)


def _scan(b: GraphBuilder, fn: torch.fx.GraphModule, init: Sequence[Value], xs: Sequence[Value],
          extra: Sequence[Any]) -> tuple[Value, ...]:
    """ONNX Scan over dim 0 of ``xs``: ``fn(*carries, *slices, *extra) -> (*next_carries, *ys)``."""
    if not xs:
        raise UnsupportedVariant("xs", "[]", "at least one tensor to scan over (ONNX Scan needs one)")
    body = b.subgraph()
    states = [_formal(b, c, "state") for c in init]
    slices = [_formal(b, x, "slice", drop_first=True) for x in xs]
    outputs = b.translate_subgraph(body, fn, [*states, *slices, *extra], _prefix(b, "body"))
    values = _body_outputs(body, outputs)
    graph = body.make_graph(f"{b.node.name}_body", [*states, *slices], values)
    outs = b.op("Scan", *init, *xs, outputs=len(values), body=graph, num_scan_inputs=len(xs))
    return _single(outs)


@translation(higher_order.scan)
def higher_order_scan(b: GraphBuilder, combine_fn: torch.fx.GraphModule, init: Sequence[Any],
                      xs: Sequence[Value], additional_inputs: Sequence[Any]) -> tuple[Value, ...]:
    """scan(GraphModule combine_fn, Tensor[] init, Tensor[] xs, Tensor[] additional_inputs) -> Tensor[]

    Always over dim 0 (``dim=``/``reverse=`` are applied around the op by torch).
    Outputs: the final carries, then each per-step output stacked along dim 0.
    """
    return _scan(b, combine_fn, [_as_value(b, c) for c in init], list(xs), list(additional_inputs))


@translation(higher_order.map_impl)
def higher_order_map_impl(b: GraphBuilder, f: torch.fx.GraphModule, xs: Sequence[Value],
                          pos_args: Sequence[Any]) -> tuple[Value, ...]:
    """map_impl(GraphModule f, Tensor[] xs, Tensor[] pos_args) -> Tensor[]  (a Scan without carries)"""
    return _scan(b, f, [], list(xs), list(pos_args))
