"""An index over an ONNX graph, backward slices, and the small models built from them.

The engine never builds one model per node: it asks for the slice that
produces a set of values (stopping at values it can feed), and turns that
slice into one model whose outputs are those values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import onnx
from onnx import helper

# Suffix for graph inputs that replace a value with the reference's copy of it (isolated mode).
FED_SUFFIX = "::reference"

_ELEM_NAMES = {v: k.lower() for k, v in onnx.TensorProto.DataType.items()}


def elem_type_name(elem_type: int) -> str:
    """ONNX elem type -> dtype name used by Tolerance (``FLOAT`` -> ``float32``)."""
    name = _ELEM_NAMES.get(elem_type, "unknown")
    return {"float": "float32", "double": "float64"}.get(name, name)


def elem_type_of(dtype_name: str) -> int:
    """dtype name -> ONNX elem type (``float32`` -> ``FLOAT``)."""
    # torch's float8_e4m3fn is ONNX's FLOAT8E4M3FN; its float4_e2m1fn_x2 (pairs) holds FLOAT4E2M1 values
    key = {"float32": "FLOAT", "float64": "DOUBLE", "float4_e2m1fn_x2": "FLOAT4E2M1"}.get(
        dtype_name, dtype_name.upper().replace("_", ""))
    return int(getattr(onnx.TensorProto, key, onnx.TensorProto.UNDEFINED))


def _implicit_inputs(node: onnx.NodeProto) -> list[str]:
    """Outer-scope names that ``node``'s subgraphs (If/Loop/Scan bodies) read."""
    names: list[str] = []
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
            for inner in graph.node:
                for name in list(inner.input) + _implicit_inputs(inner):
                    if name and name not in defined and name not in names:
                        names.append(name)
                defined.update(inner.output)
    return names


@dataclass
class GraphIndex:
    """Producers, consumers, initializers and declared element types of one ONNX graph."""

    model: onnx.ModelProto
    producer: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=dict)
    node_inputs: list[list[str]] = field(default_factory=list)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    graph_inputs: list[str] = field(default_factory=list)
    graph_outputs: list[str] = field(default_factory=list)
    elem_types: dict[str, int] = field(default_factory=dict)
    # The initializers' bytes where the model holds none, and which ones chunk sessions share
    # (a verification._weights.Weights); None: every initializer is embedded in the model.
    weights: Any = None
    # value -> the optimisation pass that removed it (the exporter's own passes record them in the model)
    optimized_away: dict[str, str] = field(default_factory=dict)

    @classmethod
    def build(cls, model: onnx.ModelProto, weights: Any = None) -> "GraphIndex":
        """Index ``model``; onnxsight's module functions are inlined first, with the flat export's names,
        so values inside functions are paired and compared like any other (``module_functions=``)."""
        from onnxsight.exporter import inline_functions

        flat = inline_functions(model, initializers=False)  # the weights stay the model's own, not copied
        graph = flat.graph
        index = cls(model=flat, weights=weights)
        index.initializers = {t.name: t for t in model.graph.initializer}
        index.graph_inputs = [v.name for v in graph.input if v.name not in index.initializers]
        index.graph_outputs = [v.name for v in graph.output]
        index.optimized_away = optimized_away(model)
        for info in list(graph.input) + list(graph.value_info) + list(graph.output):
            if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
                index.elem_types[info.name] = info.type.tensor_type.elem_type
        for name, tensor in index.initializers.items():
            index.elem_types[name] = tensor.data_type
        for i, node in enumerate(graph.node):
            inputs = [n for n in node.input if n] + _implicit_inputs(node)
            index.node_inputs.append(inputs)
            for name in inputs:
                index.consumers.setdefault(name, []).append(i)
            for name in node.output:
                if name:
                    index.producer[name] = i
        return index

    @property
    def nodes(self) -> Sequence[onnx.NodeProto]:
        return self.model.graph.node

    def initializer_proto(self, name: str) -> onnx.TensorProto:
        """The initializer with its bytes (from ``weights`` when the model holds only its type)."""
        if self.weights is not None and name in self.weights.detached:
            return self.weights.proto(name)
        return self.initializers[name]

    def shared_weights(self, nodes: Sequence[int]) -> list[str]:
        """The shared initializers ``nodes`` read, which a chunk session is fed instead of embedding."""
        shared = self.weights.shared if self.weights is not None else ()
        return sorted({n for i in nodes for n in self.node_inputs[i] if n in shared and n in self.initializers})

    def op_type(self, value: str) -> str | None:
        i = self.producer.get(value)
        return None if i is None else self.nodes[i].op_type

    def is_computed(self, value: str) -> bool:
        """True for values some node produces (not graph inputs or initializers)."""
        return value in self.producer and value not in self.initializers

    def slice(self, targets: Iterable[str], stop: Mapping[str, object] | set[str]) -> list[int]:
        """Indices (in graph order) of the nodes needed to compute ``targets`` from ``stop`` values.

        Graph inputs and initializers always stop the walk. A target itself is computed
        even when it is in ``stop``.
        """
        seen: set[int] = set()
        stack = [self.producer[t] for t in targets if t in self.producer]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            for name in self.node_inputs[i]:
                if name in stop or name in self.initializers or name not in self.producer:
                    continue
                stack.append(self.producer[name])
        return sorted(seen)


def build_model(index: GraphIndex, nodes: Sequence[int], inputs: Sequence[tuple[str, int]],
                outputs: Sequence[str], *, renames: Mapping[str, str] | None = None,
                name: str = "chunk", shared: Sequence[str] = ()) -> onnx.ModelProto:
    """A model of ``nodes`` reading ``inputs`` ((name, elem type)) and exposing ``outputs``.

    ``renames`` rewrites explicit node inputs (a value fed from the reference instead of computed).
    Initializers the nodes read are copied in, except ``shared`` ones, declared as typed graph
    inputs (the caller feeds them); outputs carry no type (ONNX Runtime infers it).
    """
    renames = renames or {}
    graph_nodes: list[onnx.NodeProto] = []
    used: set[str] = set()
    for i in nodes:
        node = onnx.NodeProto()
        node.CopyFrom(index.nodes[i])
        if renames:
            for k, value in enumerate(node.input):
                if value in renames:
                    node.input[k] = renames[value]
        graph_nodes.append(node)
        used.update(index.node_inputs[i])
    initializers = [index.initializer_proto(n) for n in sorted(used) if n in index.initializers and n not in shared]
    declared = [helper.make_tensor_value_info(n, t, None) for n, t in inputs]
    declared += [helper.make_tensor_value_info(n, index.initializers[n].data_type, list(index.initializers[n].dims))
                 for n in shared]
    graph = helper.make_graph(
        graph_nodes, name, declared, [onnx.ValueInfoProto(name=n) for n in outputs], initializer=initializers)
    model = helper.make_model(graph, opset_imports=list(index.model.opset_import),
                              producer_name="onnxsight.verification")
    model.ir_version = index.model.ir_version
    model.functions.extend(index.model.functions)
    return model


def chunk_inputs(index: GraphIndex, nodes: Sequence[int], renames: Mapping[str, str]) -> list[str]:
    """Names the nodes read that none of them produces (after ``renames``), in first-use order."""
    produced = {o for i in nodes for o in index.nodes[i].output if o}
    names: list[str] = []
    for i in nodes:
        explicit = [renames.get(n, n) for n in index.nodes[i].input if n]
        for name in explicit + _implicit_inputs(index.nodes[i]):
            if name in produced or name in index.initializers or name in names:
                continue
            names.append(name)
    return names


def optimized_away(model: onnx.ModelProto) -> dict[str, str]:
    """The values onnxsight's optimisation passes removed, by the pass that removed each (model metadata)."""
    import json

    from onnxsight.exporter import OPTIMIZED_AWAY_KEY

    for entry in model.metadata_props:
        if entry.key == OPTIMIZED_AWAY_KEY:
            try:
                return dict(json.loads(entry.value))
            except ValueError:
                return {}
    return {}
