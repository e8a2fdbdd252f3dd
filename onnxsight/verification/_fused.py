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
    fusions = Fusions(prog, index)
    fx_of: dict[str, list[str]] = {}
    for fx, onnx_name in prog.value_names.items():
        fx_of.setdefault(onnx_name, []).append(fx)
    fx_nodes = {node.name: node for node in prog.exported_program.graph.nodes}
    found: dict[str, Replaced] = {}
    for value in values:
        region = fusions.region(value)
        if region is None:
            continue
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


class Fusions:
    """Which values of ``index`` (an optimised model) a fused node makes, a node ``prog``'s exported graph
    does not have; the exported graph is indexed once, each value is looked at once."""

    def __init__(self, prog: Any, index: GraphIndex) -> None:
        exported = list(prog.model_proto.graph.node)
        self.index = index
        self.producer = {name: node for node in exported for name in node.output if name}
        self.position = {id(node): i for i, node in enumerate(exported)}
        self.kept = set(index.producer) | set(index.initializers) | set(index.graph_inputs)
        self._regions: dict[str, list[onnx.NodeProto] | None] = {}

    def region(self, value: str) -> list[onnx.NodeProto] | None:
        """The exported graph's nodes that the node making ``value`` replaced, in graph order; None when that
        node is the exported graph's own (or ``value`` is not made by a node on both sides)."""
        if value not in self._regions:
            self._regions[value] = self._find(value)
        return self._regions[value]

    def op(self, value: str) -> str | None:
        """The op type of the fused node making ``value``; None when it is not a fusion."""
        return None if self.region(value) is None else self.index.op_type(value)

    def _find(self, value: str) -> list[onnx.NodeProto] | None:
        i = self.index.producer.get(value)
        if i is None or value not in self.producer:
            return None
        fused = self.index.nodes[i]
        region = sorted(_region(fused, self.producer, self.kept), key=lambda node: self.position[id(node)])
        original = self.producer[value]
        if len(region) < 2 and (original.op_type, original.domain) == (fused.op_type, fused.domain):
            return None  # the exported node itself, not a fusion
        return region


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
