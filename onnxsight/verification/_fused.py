"""What a node of an optimised model replaced: the exported graph's nodes it stands for, their FX nodes and the
user's lines they came from, so a fusion that changes the numbers is named by what it fused.

An optimiser (ONNX Runtime's transformer optimizer, its session-level optimisation) keeps the names of the values
it leaves alone. The nodes a fused node replaced are found in the exported graph by walking back from the fused
node's outputs until values the optimised model still has: every node on the way was folded into it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import onnx

from onnxsight.diagnostics import module_path, node_location
from onnxsight.verification._graph import GraphIndex

# The most replaced nodes a message lists by name; the rest are counted.
_LISTED = 8
_OUTPUT_SUFFIX = re.compile(r"__\d+$")


@dataclass(frozen=True)
class Replaced:
    """The exported graph's nodes one fused node stands for: ONNX nodes (op type and name), FX nodes, the user's
    lines they came from, and their modules (the place to look where the lines are a library's)."""

    onnx_nodes: tuple[str, ...]
    fx_nodes: tuple[str, ...]
    lines: tuple[str, ...]
    modules: tuple[str, ...]

    def text(self) -> str:
        """``, which replaced 11 ONNX nodes (MatMul, Add, ...) of FX nodes linear, view, ... from model.py:12 in
        encoder.layer.0.attention``."""
        ops = ", ".join(dict.fromkeys(op.split(" ", 1)[0] for op in self.onnx_nodes))
        text = f", which replaced {len(self.onnx_nodes)} ONNX nodes ({ops})"
        if self.fx_nodes:
            text += f" of FX nodes {_listing(self.fx_nodes)}"
        if self.lines:
            text += f" from {_listing(self.lines)}"
        if self.modules:
            text += f" in {_listing(self.modules)}"
        return text


def replaced_nodes(prog: Any, index: GraphIndex, values: Sequence[str]) -> dict[str, Replaced]:
    """value -> what the node of ``index`` (an optimised model) making it replaced in ``prog``'s own graph,
    for the ``values`` whose node is not the exported graph's node for that value (a fusion)."""
    exported = list(prog.model_proto.graph.node)
    producer = {name: node for node in exported for name in node.output if name}
    position = {id(node): i for i, node in enumerate(exported)}
    kept = set(index.producer) | set(index.initializers) | set(index.graph_inputs)
    fx_of: dict[str, list[str]] = {}
    for fx, onnx_name in prog.value_names.items():
        fx_of.setdefault(onnx_name, []).append(fx)
    fx_nodes = {node.name: node for node in prog.exported_program.graph.nodes}
    found: dict[str, Replaced] = {}
    for value in values:
        i = index.producer.get(value)
        if i is None or value not in producer:
            continue
        fused = index.nodes[i]
        region = sorted(_region(fused, producer, kept), key=lambda node: position[id(node)])
        original = producer[value]
        if len(region) < 2 and (original.op_type, original.domain) == (fused.op_type, fused.domain):
            continue  # the exported node itself, not a fusion
        fx = _fx_nodes([fx for node in region for out in node.output for fx in fx_of.get(out, ())], fx_nodes)
        by_file: dict[str, list[str]] = {}
        for loc in dict.fromkeys(node_location(node)[0] for node in fx):
            if loc is not None:
                by_file.setdefault(loc.file, []).append(str(loc.line or "?"))
        lines = [f"{path}:{', '.join(numbers)}" for path, numbers in by_file.items()]
        modules = _outermost(m for m in dict.fromkeys(module_path(node) for node in fx) if m)
        found[value] = Replaced(tuple(f"{n.op_type} {n.name}".strip() for n in region),
                                tuple(node.name for node in fx), tuple(lines), modules)
    return found


def fused_op(prog: Any, index: GraphIndex, value: str) -> str | None:
    """The op type of the node of ``index`` (an optimised model) making ``value`` when that node is a fusion
    the exported graph does not have; None when the exported graph's own node makes it."""
    if value not in replaced_nodes(prog, index, [value]):
        return None
    return index.nodes[index.producer[value]].op_type


def _fx_nodes(keys: Sequence[str], fx_nodes: Mapping[str, Any]) -> list[Any]:
    """The FX nodes of ``value_names`` keys (``split__0`` is an output of the node ``split``), each once."""
    found: dict[str, Any] = {}
    for key in keys:
        name = key if key in fx_nodes else _OUTPUT_SUFFIX.sub("", key)
        if name in fx_nodes:
            found.setdefault(name, fx_nodes[name])
    return list(found.values())


def _region(fused: onnx.NodeProto, producer: Mapping[str, onnx.NodeProto], kept: set[str]) -> list[onnx.NodeProto]:
    """The exported graph's nodes between the values the optimised model still has and ``fused``'s outputs."""
    seen: dict[int, onnx.NodeProto] = {}
    stack = [producer[name] for name in fused.output if name in producer]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(producer[name] for name in node.input
                     if name in producer and (name not in kept or name in fused.output))
    return list(seen.values())


def _outermost(paths: Iterable[str]) -> tuple[str, ...]:
    """The module paths, each once, without those that merely contain another (``a.b`` and ``a.b.c``: ``a.b``)."""
    paths = list(paths)
    return tuple(p for p in paths if not any(q != p and p.startswith(q + ".") for q in paths))


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown if len(items) <= _LISTED else f"{shown} and {len(items) - _LISTED} more"
