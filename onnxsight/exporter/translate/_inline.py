"""Inlining onnxsight's module functions back into one flat graph, with the flat export's names.

``module_functions=True`` turns each module call into a call of an ONNX local
function (``_functions.py``). Calls with the same signature share one
function, whose body carries the value names of the first such call. Every
other call node records, under :data:`NAMES_KEY`, the names its values had
in the flat graph, in the order :func:`expansion` lists the function's
values. Inlining renames each call's copy of the body with that list, so the
inlined graph has exactly the value and node names of the flat export: the
naming contract (an FX node's output is the ONNX value of the same name)
holds inside functions too, and the verification engine pairs values there.

``onnx.inliner.inline_local_functions`` does not do this: it prefixes every
inner name per call, which breaks the pairing.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

import onnx

FUNCTION_DOMAIN = "pkg.onnxsight.modules"
# On a call node: JSON {"values": [...], "nodes": [...]}, the flat names of the function's values and nodes.
NAMES_KEY = "pkg.onnxsight.names"
# On a Constant copied into a function body (a constant the builder shares between callers).
SHARED_CONSTANT_KEY = "pkg.onnxsight.shared_constant"


def _meta(node: onnx.NodeProto, key: str) -> str | None:
    return next((p.value for p in node.metadata_props if p.key == key), None)


def is_shared_constant(node: onnx.NodeProto) -> bool:
    return node.op_type == "Constant" and _meta(node, SHARED_CONSTANT_KEY) is not None


def call_names(node: onnx.NodeProto) -> tuple[list[str], list[str]] | None:
    """(value names, node names) recorded on a call node; None for the call the body was taken from."""
    text = _meta(node, NAMES_KEY)
    if text is None:
        return None
    names = json.loads(text)
    return list(names["values"]), list(names["nodes"])


def defined_names(node: onnx.NodeProto) -> list[str]:
    """The values ``node`` defines: its outputs, then what its subgraphs (If/Loop/Scan bodies) define."""
    names = [o for o in node.output if o]
    for graph in graphs(node):
        names.extend(v.name for v in graph.input)
        for inner in graph.node:
            names.extend(defined_names(inner))
    return names


def graphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs: list[onnx.GraphProto] = []
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            graphs.append(attr.g)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attr.graphs)
    return graphs


class Expander:
    """Expands calls of onnxsight module functions; the builder and the inliner share its order of names."""

    def __init__(self, functions: Mapping[str, onnx.FunctionProto]) -> None:
        self.functions = functions
        self._names: dict[str, tuple[list[str], list[str]]] = {}
        self._bodies: dict[str, tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]] = {}

    def function_of(self, node: onnx.NodeProto) -> onnx.FunctionProto | None:
        return self.functions.get(node.op_type) if node.domain == FUNCTION_DOMAIN else None

    def names(self, nodes: Iterable[onnx.NodeProto]) -> tuple[list[str], list[str]]:
        """(value names, node names) of ``nodes`` with every call expanded, shared constants left out."""
        values: list[str] = []
        node_names: list[str] = []
        for node in nodes:
            function = self.function_of(node)
            if function is not None:
                recorded = call_names(node)
                inner = recorded if recorded is not None else self.function_names(function)
                values.extend(inner[0])
                node_names.extend(inner[1])
            elif not is_shared_constant(node):
                values.extend(defined_names(node))
                node_names.append(node.name)
        return values, node_names

    def function_names(self, function: onnx.FunctionProto) -> tuple[list[str], list[str]]:
        if function.name not in self._names:
            self._names[function.name] = self.names(function.node)
        return self._names[function.name]

    def body(self, function: onnx.FunctionProto) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
        """The function's nodes with its own calls inlined, in the function's names (cached)."""
        if function.name not in self._bodies:
            nodes, infos = self.expand(function.node)
            self._bodies[function.name] = (nodes, [*infos, *function.value_info])
        return self._bodies[function.name]

    def expand(self, nodes: Sequence[onnx.NodeProto]) -> tuple[list[onnx.NodeProto], list[onnx.ValueInfoProto]]:
        """``nodes`` with every call replaced by the callee's body, renamed to this call's names."""
        out: list[onnx.NodeProto] = []
        infos: list[onnx.ValueInfoProto] = []
        for node in nodes:
            function = self.function_of(node)
            if function is None:
                out.append(node)
                continue
            body, body_infos = self.body(function)
            values: dict[str, str] = {}
            node_names: dict[str, str] = {}
            recorded = call_names(node)
            if recorded is not None:
                own_values, own_nodes = self.function_names(function)
                if (len(own_values), len(own_nodes)) != (len(recorded[0]), len(recorded[1])):
                    # A body edited after export (a fault injected, an optimiser): keep the graph valid,
                    # this call's inner values prefixed with its node name (they are not paired).
                    recorded = ([f"{node.name}/{v}" for v in own_values], [f"{node.name}/{n}" for n in own_nodes])
                values.update(zip(own_values, recorded[0]))
                node_names.update(zip(own_nodes, recorded[1]))
            values.update(zip(function.input, node.input))
            values.update(zip(function.output, node.output))
            out.extend(_renamed(n, values, node_names) for n in body)
            infos.extend(_renamed_info(v, values) for v in body_infos)
        return out, infos


def _renamed(node: onnx.NodeProto, values: Mapping[str, str], node_names: Mapping[str, str]) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = node_names.get(node.name, node.name)
    if values:
        _rename_in_place(copy, values)
    return copy


def _rename_in_place(node: onnx.NodeProto, values: Mapping[str, str]) -> None:
    for i, name in enumerate(node.input):
        node.input[i] = values.get(name, name)
    for i, name in enumerate(node.output):
        node.output[i] = values.get(name, name)
    for graph in graphs(node):
        for group in (graph.input, graph.output, graph.value_info):
            for value in group:
                value.name = values.get(value.name, value.name)
        for inner in graph.node:
            _rename_in_place(inner, values)


def _renamed_info(info: onnx.ValueInfoProto, values: Mapping[str, str]) -> onnx.ValueInfoProto:
    copy = onnx.ValueInfoProto()
    copy.CopyFrom(info)
    copy.name = values.get(info.name, info.name)
    return copy


def inline_functions(model: onnx.ModelProto, *, initializers: bool = True) -> onnx.ModelProto:
    """The model with onnxsight's module functions inlined: one flat graph with the flat export's names.

    Returns ``model`` itself when it calls no such function. Other local functions
    (not made by onnxsight) are left as they are. Weights are copied into the new
    model (external-data references stay references); ``initializers=False`` leaves
    them out, for a reader that takes them from ``model`` (the verifier's index).
    """
    functions = {f.name: f for f in model.functions if f.domain == FUNCTION_DOMAIN}
    if not functions:
        return model
    nodes, infos = Expander(functions).expand(model.graph.node)
    flat = onnx.ModelProto()
    _copy_fields(model, flat, skip=("graph",))
    _copy_fields(model.graph, flat.graph, skip=("node",) if initializers else ("node", "initializer"))
    flat.graph.node.extend(_dedupe_constants(nodes))
    known = {v.name for v in flat.graph.value_info} | {v.name for v in flat.graph.output}
    flat.graph.value_info.extend(v for v in infos if v.name not in known and not known.add(v.name))  # type: ignore[func-returns-value]
    kept = [f for f in flat.functions if f.domain != FUNCTION_DOMAIN]
    del flat.functions[:]
    flat.functions.extend(kept)
    opsets = [o for o in flat.opset_import if o.domain != FUNCTION_DOMAIN]
    del flat.opset_import[:]
    flat.opset_import.extend(opsets)
    return flat


def _copy_fields(source: Any, target: Any, *, skip: tuple[str, ...]) -> None:
    """Copy every set field of a protobuf message but ``skip`` (no copy of what is left out)."""
    for field, value in source.ListFields():
        if field.name in skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _dedupe_constants(nodes: Sequence[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """One definition per name: a shared constant copied into several bodies is the flat graph's one node.

    NOTE: only Constants may repeat (the builder shares one constant between every caller of
    the same value, and each function body holds its own copy); any other repeated name is a
    broken expansion, raised rather than hidden.
    """
    defined: set[str] = set()
    kept: list[onnx.NodeProto] = []
    for node in nodes:
        outputs = [o for o in node.output if o]
        if any(o in defined for o in outputs):
            if node.op_type == "Constant":
                continue
            raise ValueError(f"inlining defines {outputs} twice (node {node.name}, {node.op_type})")
        defined.update(outputs)
        kept.append(node)
    for node in kept:
        for entry in [p for p in node.metadata_props if p.key == SHARED_CONSTANT_KEY]:
            node.metadata_props.remove(entry)
    return kept
