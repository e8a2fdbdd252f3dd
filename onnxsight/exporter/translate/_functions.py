"""Module calls as ONNX local functions (``export(..., module_functions=True)``).

After translation every ONNX node knows the module calls it was emitted
under (the FX node's ``nn_module_stack``, recorded by the builder). This pass
groups the flat node list by those calls, outermost first, and turns each
selected call into one node calling a FunctionProto in the domain
:data:`FUNCTION_DOMAIN`, named after the module's class (``Linear``,
``TransformerEncoderLayer``); the call node is named after the module path
(``encoder.layers.0``, ``blocks.1@1`` for a module's second call). Calls
whose bodies are the same up to value names, with the same input types,
share one function (the 12 layers of an encoder: one function, 12 calls);
weights are function inputs, never embedded. Nested modules nest functions.

Names: the flat export's names are kept. A function's body has the names of
the first call that produced it; every other call records its own names
(``_inline.NAMES_KEY``) so :func:`onnxsight.exporter.inline_functions` gives
back exactly the flat graph, which is what the verifier compares.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import onnx
import torch
from onnx import helper

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.translate._graph_order import node_outputs, node_reads, ordered, topological, units_on_cycles
from onnxsight.exporter.translate._inline import FUNCTION_DOMAIN, NAMES_KEY, SHARED_CONSTANT_KEY, Expander, graphs


@dataclass(frozen=True)
class ModuleCall:
    """One call of one module, as torch.export's ``nn_module_stack`` records it."""

    key: str    # unique per call: "L__self__a", "L__self__a@1" for the second call of the same module
    path: str   # "encoder.layers.0"
    cls: str    # "torch.nn.modules.linear.Linear"

    @property
    def call_name(self) -> str:
        """The call node's name: the module path, with ``@N`` for the module's (N+1)-th call."""
        return self.path + ("@" + self.key.rsplit("@", 1)[1] if "@" in self.key else "")

    @property
    def class_name(self) -> str:
        return self.cls.rsplit(".", 1)[-1]


def module_calls(node: torch.fx.Node) -> tuple[ModuleCall, ...]:
    """The module calls ``node`` ran under, outermost first (the root module left out)."""
    stack = node.meta.get("nn_module_stack") or {}
    calls = []
    for key, (path, cls) in stack.items():
        if path:
            name = cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}"
            calls.append(ModuleCall(str(key), str(path), name))
    return tuple(calls)


def invalid_selection(value: Any) -> str | None:
    """Why ``module_functions=value`` is not a bool or a collection of nn.Module classes (ARG015); None if valid."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, bytes)):
        return f"the string {value!r} (pass the class itself, not its name)"
    if isinstance(value, torch.nn.Module):
        name = type(value).__qualname__
        return f"a {name} instance (pass its class in a set: {{{name}}})"
    if isinstance(value, type):
        return f"the class {value.__qualname__} alone (wrap it in a set: {{{value.__qualname__}}})"
    if not isinstance(value, (set, frozenset, list, tuple)):
        return f"a {type(value).__name__}"
    for item in value:
        if isinstance(item, torch.nn.Module):
            return f"a {type(item).__name__} instance in the set (pass its class, {type(item).__qualname__})"
        if not (isinstance(item, type) and issubclass(item, torch.nn.Module)):
            shown = repr(item) if isinstance(item, str) else (item.__qualname__ if isinstance(item, type)
                                                              else type(item).__name__)
            return f"{shown} in the set, which is not a torch.nn.Module class"
    return None


class Selection:
    """Which module calls become functions: all (``True``) or those of some classes and their subclasses."""

    def __init__(self, value: bool | Iterable[type]) -> None:
        self.everything = value is True
        self.classes: tuple[type, ...] = () if isinstance(value, bool) else tuple(value)
        self._resolved: dict[str, bool] = {}
        self.matched: set[type] = set()

    def __call__(self, call: ModuleCall) -> bool:
        if self.everything:
            return True
        if call.cls not in self._resolved:
            cls = _resolve_class(call.cls)
            hits = [c for c in self.classes
                    if (cls is not None and issubclass(cls, c)) or f"{c.__module__}.{c.__qualname__}" == call.cls]
            self.matched.update(hits)
            self._resolved[call.cls] = bool(hits)
        return self._resolved[call.cls]


def _resolve_class(qualified: str) -> type | None:
    """``"pkg.mod.Outer.Inner"`` -> the class, from modules already imported (never imports)."""
    parts = qualified.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:split]))
        if module is None:
            continue
        obj: Any = module
        for attr in parts[split:]:
            obj = getattr(obj, attr, None)
        return obj if isinstance(obj, type) else None
    return None


@dataclass
class _Function:
    proto: onnx.FunctionProto
    names: tuple[list[str], list[str]]   # (values, nodes) of the first call, in Expander order


class Modularizer:
    """Groups a flat, topologically sorted node list into module functions (see the module docstring)."""

    def __init__(self, nodes: Sequence[onnx.NodeProto], stacks: Sequence[tuple[ModuleCall, ...]],
                 infos: Mapping[str, onnx.ValueInfoProto], graph_outputs: Iterable[str], opsets: Mapping[str, int],
                 ctx: DiagnosticContext) -> None:
        self.flat = list(nodes)
        self.stacks = [list(s) for s in stacks]
        self.infos = infos
        self.opsets = dict(opsets)
        self.ctx = ctx
        self.outputs = set(graph_outputs)
        self.reads = [node_reads(n) for n in self.flat]
        self.consumers: dict[str, set[int]] = {}
        for i, names in enumerate(self.reads):
            for name in names:
                self.consumers.setdefault(name, set()).add(i)
        self.constants = {n.output[0]: i for i, n in enumerate(self.flat) if _is_copyable(n)}
        self.functions: dict[bytes, _Function] = {}
        self.by_name: dict[str, onnx.FunctionProto] = {}
        self.expander = Expander(self.by_name)

    def run(self) -> tuple[list[onnx.NodeProto], list[onnx.FunctionProto]]:
        nodes = self._level(list(range(len(self.flat))), 0, "the main graph")
        read = {name for node in nodes for name in node_reads(node)} | self.outputs
        nodes = [n for n in nodes if not _is_copyable(n) or n.output[0] in read]
        return nodes, [f.proto for f in self.functions.values()]

    # -- one level of the hierarchy -------------------------------------------------------------------
    def _level(self, items: list[int], depth: int, parent: str) -> list[onnx.NodeProto]:
        """The nodes of ``items`` (flat indices) with their calls at ``depth`` made functions, in graph order."""
        while True:
            units, groups = self._units(items, depth)
            cyclic = self._cyclic(units, groups)
            if not cyclic:
                break
            for key in cyclic:  # flatten: these calls' nodes join this level, their inner calls stay eligible
                call = self.stacks[groups[key][0]][depth]
                self.ctx.emit(rules.MODULE_CALL_KEPT_INLINE, call=call.call_name, cls=call.cls, parent=parent,
                              module=call.path,
                              reason="a value it computes is used outside it and flows back into it")
                for i in groups[key]:
                    del self.stacks[i][depth]
        produced: list[onnx.NodeProto] = []
        for unit in units:
            if isinstance(unit, int):
                produced.append(self.flat[unit])
            else:
                produced.append(self._call(groups[unit], depth))
        return topological(produced)

    def _units(self, items: list[int], depth: int) -> tuple[list[int | str], dict[str, list[int]]]:
        units: list[int | str] = []
        groups: dict[str, list[int]] = {}
        for i in items:
            stack = self.stacks[i]
            if len(stack) > depth:
                key = stack[depth].key
                if key not in groups:
                    groups[key] = []
                    units.append(key)
                groups[key].append(i)
            else:
                units.append(i)
        return units, groups

    def _cyclic(self, units: list[int | str], groups: dict[str, list[int]]) -> list[str]:
        """Calls whose nodes cannot be one node: something outside reads one of their values and feeds them."""
        owner: dict[int, int] = {}
        for u, unit in enumerate(units):
            for i in (groups[unit] if isinstance(unit, str) else [unit]):
                owner[i] = u
        producer = {name: owner[i] for i in owner for name in node_outputs(self.flat[i])}
        edges: list[set[int]] = [set() for _ in units]
        for i, u in owner.items():
            for name in self.reads[i]:
                v = producer.get(name)
                if v is not None and v != u and not (isinstance(units[u], str) and name in self.constants):
                    edges[v].add(u)
        return [units[u] for u in units_on_cycles(edges) if isinstance(units[u], str)]

    # -- one call ----------------------------------------------------------------------------------------
    def _call(self, items: list[int], depth: int) -> onnx.NodeProto:
        call = self.stacks[items[0]][depth]
        body = self._level(items, depth + 1, call.call_name)
        members = set(items)
        defined = {name for node in body for name in node_outputs(node)}
        inputs = ordered(name for node in body for name in node_reads(node) if name not in defined)
        copies = [_shared_copy(self.flat[self.constants[n]]) for n in inputs if n in self.constants]
        inputs = [n for n in inputs if n not in self.constants]
        outputs = [name for node in body for name in node_outputs(node)
                   if name in self.outputs or self.consumers.get(name, set()) - members]
        body = copies + body
        signature = _signature(call.cls, body, inputs, outputs, self.infos)
        node = helper.make_node("", inputs, outputs, name=call.call_name, domain=FUNCTION_DOMAIN)
        _set_meta(node, call_metadata(self.stacks[items[0]][: depth + 1]))
        known = self.functions.get(signature)
        if known is None:
            proto = self._function(call, body, inputs, outputs)
            self.functions[signature] = known = _Function(proto, self.expander.names(body))
            self.by_name[proto.name] = proto
        else:
            values, nodes = self.expander.names(body)
            if (len(values), len(nodes)) != tuple(map(len, known.names)):
                raise AssertionError(f"calls of {known.proto.name} expand to different numbers of values")
            _set_meta(node, {NAMES_KEY: json.dumps({"values": values, "nodes": nodes}, separators=(",", ":"))})
        node.op_type = known.proto.name
        return node

    def _function(self, call: ModuleCall, body: list[onnx.NodeProto], inputs: list[str],
                  outputs: list[str]) -> onnx.FunctionProto:
        name, n = call.class_name, 0
        while name in self.by_name:
            n += 1
            name = f"{call.class_name}_{n}"
        domains = {node.domain for node in body} | {""}
        opsets = [helper.make_opsetid(d, self.opsets.get(d, 1)) for d in sorted(domains)]
        proto = helper.make_function(FUNCTION_DOMAIN, name, inputs, outputs, body, opsets,
                                     doc_string=f"{call.cls} (first called as {call.call_name})")
        names = set(inputs) | {v for node in body for v in node_outputs(node)}
        proto.value_info.extend(self.infos[v] for v in ordered([*inputs, *sorted(names)]) if v in self.infos)
        _set_meta(proto, {"pkg.onnxsight.module_class": call.cls})
        return proto


def call_metadata(stack: Sequence[ModuleCall]) -> dict[str, str]:
    """metadata_props of a call node, as torch.onnx writes a node's scope (Model Explorer reads them)."""
    return {
        "namespace": "/".join(f"{c.path}: {c.cls}" for c in stack),
        "pkg.torch.onnx.class_hierarchy": repr([c.cls for c in stack]),
        "pkg.torch.onnx.name_scopes": repr([c.path for c in stack]),
    }


def _set_meta(proto: Any, entries: Mapping[str, str]) -> None:
    for key, value in entries.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value


def _is_copyable(node: onnx.NodeProto) -> bool:
    """A constant the builder shares between callers (it has no module of its own): copied into bodies."""
    return node.op_type == "Constant" and not node.metadata_props


def _shared_copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    _set_meta(copy, {SHARED_CONSTANT_KEY: "1"})
    return copy


def _signature(cls: str, body: Sequence[onnx.NodeProto], inputs: Sequence[str], outputs: Sequence[str],
               infos: Mapping[str, onnx.ValueInfoProto]) -> bytes:
    """What makes two calls one function: the class, the body up to names, the inputs' types."""
    rename = {name: f"i{k}" for k, name in enumerate(inputs)}
    parts = [cls.encode()]
    for name in inputs:
        info = infos.get(name)
        parts.append(info.type.SerializeToString(deterministic=True) if info is not None else b"?")
    for node in body:
        parts.append(_canonical(node, rename).SerializeToString(deterministic=True))
    parts.append(",".join(rename.get(o, o) for o in outputs).encode())
    return b"\0".join(parts)


def _canonical(node: onnx.NodeProto, rename: dict[str, str]) -> onnx.NodeProto:
    """``node`` with names numbered in order of definition and no name, doc or metadata of its own."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.name = ""
    copy.doc_string = ""
    del copy.metadata_props[:]
    _canonical_names(copy, rename)
    return copy


def _canonical_names(node: onnx.NodeProto, rename: dict[str, str]) -> None:
    for i, name in enumerate(node.input):
        node.input[i] = rename.get(name, name)
    for graph in graphs(node):
        for value in graph.input:
            value.name = rename.setdefault(value.name, f"v{len(rename)}")
        for inner in graph.node:
            inner.name = ""
            del inner.metadata_props[:]
            _canonical_names(inner, rename)
        for value in graph.output:
            value.name = rename.get(value.name, value.name)
        del graph.value_info[:]
    for i, name in enumerate(node.output):
        if name:
            node.output[i] = rename.setdefault(name, f"v{len(rename)}")


def modularize(nodes: Sequence[onnx.NodeProto], origins: Mapping[str, Any],
               infos: Sequence[onnx.ValueInfoProto], typed: Sequence[onnx.ValueInfoProto],
               graph_outputs: Sequence[str], opsets: dict[str, int], selection: bool | Iterable[type],
               ctx: DiagnosticContext) -> tuple[list[onnx.NodeProto], list[onnx.FunctionProto],
                                                list[onnx.ValueInfoProto]]:
    """The main graph's nodes, the functions they call, and the main graph's value_info.

    ``origins``: node name -> the ``NodeInfo`` it was emitted for; ``infos``: the graph's
    value_info (intermediate values); ``typed``: graph inputs, outputs and weights, typed.
    Adds :data:`FUNCTION_DOMAIN` to ``opsets`` when a function was made.
    """
    select = Selection(selection)
    stacks = _stacks(nodes, origins, select)
    known = {info.name: info for info in [*infos, *typed]}
    main, functions = Modularizer(nodes, stacks, known, graph_outputs, opsets, ctx).run()
    missing = [c for c in select.classes if c not in select.matched]
    if missing:
        called = sorted({c.class_name for info in origins.values() for c in info.module_stack})
        ctx.emit(rules.MODULE_CLASS_NOT_CALLED, classes=", ".join(sorted(c.__qualname__ for c in select.classes)),
                 which=", ".join(sorted(c.__qualname__ for c in missing)), called=", ".join(called) or "none")
    if functions:
        opsets[FUNCTION_DOMAIN] = 1
    top = {name for node in main for name in node_outputs(node)}
    return main, functions, [info for info in infos if info.name in top]


def _stacks(nodes: Sequence[onnx.NodeProto], origins: Mapping[str, Any],
            select: Selection) -> list[tuple[ModuleCall, ...]]:
    """The selected module calls of each node.

    NOTE: a size (a node computing a SymInt: ``sym_size``, arithmetic on sizes) belongs to no
    module: torch.export records it once, under the first module that needed it (with a dynamic
    batch, the first encoder layer reads the batch size from the input and the others reuse it).
    Left there, the first layer's function would differ from the others'. A size goes where its
    inputs are computed instead (the deepest call they share; the main graph for a graph input),
    and reaches the modules that read it as a function input.
    """
    stacks: list[tuple[ModuleCall, ...]] = []
    where: dict[str, tuple[ModuleCall, ...]] = {}
    for node in nodes:
        info = origins.get(node.name)
        if info is not None and _is_size(info.meta_vals):
            sources = [where[name] for name in node_reads(node) if name in where]
            stack = _common_prefix(sources) if sources else ()
        else:
            stack = tuple(c for c in (info.module_stack if info is not None else ()) if select(c))
        stacks.append(stack)
        where.update((name, stack) for name in node_outputs(node))
    return stacks


def _is_size(vals: Sequence[Any]) -> bool:
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    return bool(vals) and all(isinstance(v, symbolic) for v in vals)


def _common_prefix(stacks: Sequence[tuple[ModuleCall, ...]]) -> tuple[ModuleCall, ...]:
    prefix = stacks[0]
    for stack in stacks[1:]:
        n = 0
        while n < min(len(prefix), len(stack)) and prefix[n] == stack[n]:
            n += 1
        prefix = prefix[:n]
    return prefix
