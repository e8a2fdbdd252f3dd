"""An editable view of one translated graph for the optimisation passes: who makes and who reads each value.

Passes rewrite ``graph.node`` in place and keep the view's indexes true through
its methods (:meth:`Graph.replace_uses`, :meth:`Graph.remove`), so each pass can
ask "is this value read anywhere else?" without rescanning the graph. Values read
inside If/Loop/Scan bodies count as reads of the main graph (a pass never removes
them), and so do graph outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import onnx
import torch

from onnxsight.exporter._dtypes import to_onnx
from onnxsight.exporter.inputs._fake import has_data


@dataclass
class Graph:
    """The main graph's nodes, its weights (torch tensors), and what the passes changed.

    ``aliases``: value -> the value that now holds it (an Identity removed, a Cast that changed
    nothing); ``removed``: value -> the pass that removed it with no value left to compare it by;
    ``derived``: initializer -> (the initializer it was computed from, the permutation applied; None: the
    same elements in another shape);
    ``computed``: initializer -> how it is computed from several weights (``_batchnorm.FoldedWeight``).
    """

    proto: onnx.GraphProto
    initializers: dict[str, torch.Tensor]
    _nodes: list[onnx.NodeProto] = field(default_factory=list)   # :attr:`nodes`
    aliases: dict[str, str] = field(default_factory=dict)
    removed: dict[str, str] = field(default_factory=dict)
    derived: dict[str, tuple[str, tuple[int, ...] | None]] = field(default_factory=dict)
    computed: dict[str, Any] = field(default_factory=dict)
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    readers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    pinned: set[str] = field(default_factory=set)   # graph inputs/outputs and values read by subgraphs
    infos: dict[str, onnx.ValueInfoProto] = field(default_factory=dict)
    opset_imports: dict[str, int] = field(default_factory=dict)
    # The model's own weights (and what is computed from them): a checkpoint may replace them at save(), so
    # nothing is folded from them but their layout (``derived``).
    weights: set[str] = field(default_factory=set)
    _inferred: bool = False
    _dropped: dict[int, onnx.NodeProto] = field(default_factory=dict)   # removed, still in ``_nodes``

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        """The nodes in order (written back to ``proto`` by :meth:`commit`).

        NOTE: :meth:`remove` only marks nodes; the list is rebuilt without them when next asked for. The
        passes remove one node at a time as often as many, and a new list for each was quadratic in the
        graph's size. A list obtained before a removal keeps the removed nodes, as it did when each
        removal made a new list.
        """
        if self._dropped:
            self._nodes = [n for n in self._nodes if id(n) not in self._dropped]
            self._dropped = {}
        return self._nodes

    @nodes.setter
    def nodes(self, nodes: list[onnx.NodeProto]) -> None:
        self._nodes, self._dropped = nodes, {}

    @classmethod
    def build(cls, proto: onnx.GraphProto, initializers: dict[str, torch.Tensor],
              opset_imports: dict[str, int] | None = None, weights: set[str] | None = None) -> "Graph":
        # NOTE: standalone copies: protobuf hands out a new wrapper for a repeated field's element on each
        # access, and rebuilding the field copies its elements, so indexes of proto.node go stale.
        nodes = []
        for node in proto.node:
            own = onnx.NodeProto()
            own.CopyFrom(node)
            nodes.append(own)
        graph = cls(proto, initializers, nodes, opset_imports=dict(opset_imports or {"": 18}),
                    weights=set(weights if weights is not None else initializers))
        graph.reindex()
        return graph

    def commit(self) -> None:
        """Write the edited node list back into the GraphProto."""
        del self.proto.node[:]
        self.proto.node.extend(self.nodes)

    def reindex(self) -> None:
        self.producer, self.readers, self.pinned = {}, {}, set()
        for node in self.nodes:
            self.index(node)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    self.pinned |= _outer_reads(attr.g)
        self.pinned |= {v.name for v in self.proto.input} | {v.name for v in self.proto.output}
        self.infos = {v.name: v for v in [*self.proto.input, *self.proto.value_info, *self.proto.output]}
        self._inferred = False

    def info(self, name: str) -> onnx.ValueInfoProto | None:
        """The declared type of ``name``; values the translator left untyped (its temporaries) are typed
        by ONNX's shape inference over the graph as it is now, once, when first asked."""
        if name not in self.infos and not self._inferred:
            self._inferred = True
            self.infos.update({v.name: v for v in _inferred_types(self) if v.name not in self.infos})
        return self.infos.get(name)

    # -- questions ---------------------------------------------------------------------------
    def uses(self, name: str) -> int:
        """How many node inputs read ``name`` (a graph output or a subgraph read counts as many)."""
        return len(self.readers.get(name, ())) + (1_000 if name in self.pinned else 0)

    def constant(self, name: str) -> torch.Tensor | None:
        """The weight or folded constant called ``name``; None for computed values."""
        return self.initializers.get(name) if name else None

    def ints(self, name: str) -> list[int] | None:
        """The elements of the constant ``name`` as ints, where it has data; else None."""
        value = self.constant(name)
        return None if value is None or not has_data(value) else [int(v) for v in value.reshape(-1).tolist()]

    def scalar(self, name: str) -> float | None:
        """The one element of the constant ``name`` (of any shape), where it has data; else None."""
        value = self.constant(name)
        return float(value.reshape(-1)[0]) if value is not None and value.numel() == 1 and has_data(value) else None

    def made_by(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The node making ``name`` where it is a standard ``op_type``; else None."""
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type and not node.domain else None

    def private(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The standard ``op_type`` node making ``name``, where ``name`` is read by one node alone (no graph output)."""
        return self.made_by(name, op_type) if self.uses(name) == 1 else None

    def sole_reader(self, name: str, op_type: str) -> onnx.NodeProto | None:
        """The one node reading ``name``, where it is a standard ``op_type`` (and ``name`` no graph output)."""
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 and readers[0].op_type == op_type and not readers[0].domain \
            and name not in self.pinned else None

    def static_shape(self, name: str) -> tuple[int, ...] | None:
        """The shape of ``name`` where every dim is a known int; else None."""
        shape = self.symbolic_shape(name)
        if shape is None or not all(isinstance(d, int) for d in shape):
            return None
        return tuple(int(d) for d in shape)

    def dims(self, name: str) -> list[int | str | None] | None:
        """The dims of ``name`` where its rank is known: each a known int, a named symbol (``batch``, torch's ``s0``:
        the same name is the same size) or None."""
        if name in self.initializers:
            return list(self.initializers[name].shape)
        info = self.info(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in info.type.tensor_type.shape.dim]

    def symbolic_shape(self, name: str) -> tuple[int | str, ...] | None:
        """The shape of ``name`` where every dim is a known int or a named symbol; else None."""
        dims = self.dims(name)
        return None if dims is None or None in dims else tuple(dims)  # type: ignore[arg-type]

    @property
    def graph_inputs(self) -> set[str]:
        return {v.name for v in self.proto.input}

    def static_rank(self, name: str) -> int | None:
        """The rank of ``name`` where it is known (symbolic dims included); else None."""
        dims = self.dims(name)
        return None if dims is None else len(dims)

    def elem_type(self, name: str) -> int | None:
        if name in self.initializers:
            return to_onnx(self.initializers[name].dtype)
        info = self.info(name)
        return info.type.tensor_type.elem_type or None if info is not None else None

    # -- edits -----------------------------------------------------------------------------
    def replace_uses(self, old: str, new: str) -> None:
        """Every node that read ``old`` reads ``new``; ``old`` is then an alias of ``new``."""
        for node in self.readers.pop(old, []):
            for i, name in enumerate(node.input):
                if name == old:
                    node.input[i] = new
            self.readers.setdefault(new, []).append(node)
        self.aliases[old] = new

    def remove(self, nodes: Iterable[onnx.NodeProto]) -> None:
        """Drop ``nodes`` (their outputs must be unread by now)."""
        doomed = {id(n): n for n in nodes if id(n) not in self._dropped}
        for node in doomed.values():
            for name in node.output:
                if self.producer.get(name) is node:
                    del self.producer[name]
            for name in node.input:
                readers = self.readers.get(name)
                if readers is not None:
                    self.readers[name] = [r for r in readers if id(r) not in doomed]
        self._dropped.update(doomed)

    def index(self, node: onnx.NodeProto) -> None:
        """Record a new node as the producer of its outputs and a reader of its inputs (placed by the caller)."""
        for name in node.output:
            if name:
                self.producer[name] = node
        for name in node.input:
            if name:
                self.readers.setdefault(name, []).append(node)

    def replace(self, nodes: list[onnx.NodeProto], node: onnx.NodeProto, why: str) -> None:
        """``node``, writing the value of the last of ``nodes``, where that one was; the other nodes' values are gone,
        removed by the pass ``why`` (the nodes must come before the last, and their values be unread but by them)."""
        *inner, last = nodes
        for old in inner:
            self.removed[old.output[0]] = why
        node.metadata_props.extend(last.metadata_props)
        self.remove(inner)
        at = next(i for i, n in enumerate(self.nodes) if n is last)
        self.remove([last])
        self.nodes.insert(at, node)
        self.index(node)

    def set_input(self, node: onnx.NodeProto, index: int, name: str) -> None:
        old = node.input[index]
        node.input[index] = name
        self.readers[old] = [r for r in self.readers.get(old, []) if r is not node]
        self.readers.setdefault(name, []).append(node)

    def fresh(self, hint: str) -> str:
        """A value name no node, weight or graph input uses yet."""
        name, n = hint, 0
        while name in self.producer or name in self.initializers or name in self.readers:
            n += 1
            name = f"{hint}_{n}"
        return name


def _inferred_types(graph: Graph) -> list[onnx.ValueInfoProto]:
    """ONNX shape inference over the current nodes, weights declared as typed inputs (no bytes copied)."""
    from onnxsight.exporter._builder import Value, value_info

    inputs = list(graph.proto.input) + [value_info(Value(name, t.dtype, tuple(t.shape)))
                                        for name, t in graph.initializers.items()]
    proto = onnx.helper.make_graph(graph.nodes, "infer", inputs, list(graph.proto.output),
                                   value_info=list(graph.proto.value_info))
    opsets = [onnx.helper.make_opsetid(domain, version) for domain, version in graph.opset_imports.items()]
    try:
        model = onnx.shape_inference.infer_shapes(onnx.helper.make_model(proto, opset_imports=opsets))
    except Exception:  # noqa: BLE001 - without inference, a pass that needs a shape leaves the node alone
        return []
    return list(model.graph.value_info)


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    """Names a subgraph reads that it does not define (values of the enclosing scopes)."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    reads: set[str] = set()
    for node in graph.node:
        reads.update(n for n in node.input if n and n not in defined)
        defined.update(node.output)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                reads |= _outer_reads(attr.g) - defined
    reads |= {v.name for v in graph.output if v.name not in defined}
    return reads


def attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return default


def set_attribute(node: onnx.NodeProto, name: str, value: Any) -> None:
    """``node``'s attribute ``name`` (which it has) set to ``value`` in place."""
    for attr in node.attribute:
        if attr.name == name:
            attr.CopyFrom(onnx.helper.make_attribute(name, value))


def parent(graph: Graph, node: onnx.NodeProto | None, index: int, op_type: str) -> onnx.NodeProto | None:
    """The node making ``node``'s input ``index`` where it is a standard ``op_type``; else None."""
    return graph.made_by(node.input[index], op_type) if node is not None and len(node.input) > index else None
