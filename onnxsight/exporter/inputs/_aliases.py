"""One tensor passed as two inputs of ``forward()``: an input each, unless the model writes to it (ARG021, ARG012).

torch.export traces two arguments holding one tensor as one: its graph reads the second placeholder for
both (``x + y`` becomes ``add(y, y)``), so an ONNX model from it computes a wrong answer for a caller who
passes two different tensors. The capture is given a copy in each later place instead (equal values, so
the model takes the same path), and the graph then reads each input where the model does. That is the
model's computation as long as nothing writes to the shared tensor in place: a write through one name is
seen through the other in eager, never between two graph inputs. Such a write is refused (ARG012) after
capture, at the line that writes; otherwise a note (ARG021) says the inputs were exported apart.
"""

from __future__ import annotations

import inspect
import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext


@dataclass(frozen=True)
class Aliased:
    """The places (``forward()`` argument paths) and leaf indices of one tensor passed more than once."""

    places: tuple[str, ...]
    leaves: tuple[int, ...]   # positions among pytree.tree_leaves((args, kwargs)): torch.export's user inputs


def separate(model: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict, list[Aliased]]:
    """(args, kwargs) with every repeat of a tensor replaced by a copy, and the tensors that were repeated."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    first: dict[int, int] = {}
    groups: dict[int, list[int]] = {}
    for index, leaf in enumerate(leaves):
        if not isinstance(leaf, torch.Tensor):
            continue
        if id(leaf) in first:
            groups.setdefault(first[id(leaf)], [first[id(leaf)]]).append(index)
            leaves[index] = leaf.clone()
        else:
            first[id(leaf)] = index
    if not groups:
        return args, kwargs, []
    places = _places(model, args, kwargs)
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    return args, kwargs, [Aliased(tuple(places[i] for i in group), tuple(group)) for group in groups.values()]


def _places(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[str]:
    """Each leaf's path under forward()'s argument names: ``x``, ``pair[1]``, ``cache['k']``."""
    try:
        parameters = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        parameters = []
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    places = []
    for path, _ in pytree.tree_flatten_with_path((args, kwargs))[0]:
        where, key = path[0], path[1]
        if getattr(where, "idx", 1) == 0:  # a positional argument
            name = positional[key.idx] if key.idx < len(positional) else f"args[{key.idx}]"
        else:
            name = str(key.key)
        places.append(name + pytree.keystr(path[2:]))
    return places


def check_writes(ctx: DiagnosticContext, program: torch.export.ExportedProgram, aliased: list[Aliased]) -> None:
    """ARG012 where the captured graph writes in place to a tensor passed twice; else ARG021 for it."""
    inputs = [spec.arg.name for spec in program.graph_signature.input_specs if spec.kind.name == "USER_INPUT"]
    written = _written_inputs(program)
    for group in aliased:
        if max(group.leaves) >= len(inputs):  # the user inputs are not the leaves one to one: cannot tell
            hit: tuple[str, torch.fx.Node | None] | None = (group.places[0], None)
        else:
            hit = next(((place, written[inputs[leaf]]) for place, leaf in zip(group.places, group.leaves)
                        if inputs[leaf] in written), None)
        if hit is None:
            ctx.emit(rules.SAME_TENSOR_EXPORTED_APART, first=group.places[0], others=", ".join(group.places[1:]))
            continue
        place, node = hit
        ctx.emit(rules.SAME_TENSOR_TWICE, node=node, first=group.places[0], second=", ".join(group.places[1:]),
                 written=place, op=str(node.target) if node is not None else "an in-place op")


def _written_inputs(program: torch.export.ExportedProgram) -> dict[str, torch.fx.Node | None]:
    """Placeholder name -> the node that writes to it in place (through views; None: a mutation the
    signature records), for the inputs the captured graph writes to."""
    found: dict[str, torch.fx.Node | None] = {
        spec.target: None for spec in program.graph_signature.output_specs
        if spec.kind.name == "USER_INPUT_MUTATION" and spec.target}
    for node in program.graph_module.graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None or not schema.is_mutable:
            continue
        for argument, value in zip(schema.arguments, node.args):
            source = _base(value) if argument.alias_info is not None and argument.alias_info.is_write else None
            if source is not None and source.op == "placeholder" and found.get(source.name) is None:
                found[source.name] = node
    return found


def _base(value: Any) -> torch.fx.Node | None:
    """The tensor ``value`` is a view of: back through view ops (``select``, ``view``, ``getitem``)."""
    while isinstance(value, torch.fx.Node) and value.op == "call_function" and value.args and _is_view(value.target):
        value = value.args[0]
    return value if isinstance(value, torch.fx.Node) else None


def _is_view(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    return target is operator.getitem or (schema is not None and any(r.alias_info is not None for r in schema.returns))
