"""Translate a whole ExportedProgram: graph inputs, weights, nodes, outputs, names, metadata.

Naming contract: every FX node's output becomes the ONNX value of the same name
(``name__0``, ``name__1`` when a node has several outputs). getitem nodes are
not materialised; ``value_names`` maps every FX node name to the ONNX value
that holds it (parameters map to their state-dict names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import onnx
import torch
from onnx import helper
from torch.export import graph_signature as gs

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.translate._complex_io import split_complex
from onnxsight.exporter._builder import GraphBuilder, Value, value_info
from onnxsight.exporter.translate._functions import modularize
from onnxsight.exporter._registry import Registry
from onnxsight.exporter.translate._nodes import Translator, find_unsupported, names_read


@dataclass
class TranslatedGraph:
    """The translator's output, before it is assembled into a ModelProto."""

    graph: onnx.GraphProto
    initializers: dict[str, torch.Tensor]
    opset_imports: dict[str, int]
    value_names: dict[str, str]
    input_names: list[str]
    output_names: list[str]
    metadata: dict[str, str] = field(default_factory=dict)
    initializer_kinds: dict[str, str] = field(default_factory=dict)  # PARAMETER / BUFFER / CONSTANT_TENSOR
    complex_inputs: dict[str, torch.dtype] = field(default_factory=dict)   # name -> complex dtype (real pairs)
    complex_outputs: dict[str, torch.dtype] = field(default_factory=dict)
    functions: list[onnx.FunctionProto] = field(default_factory=list)   # module_functions= (see _functions.py)
    # Set by the optimize stage: initializer -> (weight it was computed from, permutation or None for the same
    # elements in another shape), initializer -> how it is computed from several weights (``compute(tensors)``
    # of its ``sources``: a batch norm folded), and value -> the pass that removed it (verification lists it
    # with that reason).
    derived: dict[str, tuple[str, tuple[int, ...] | None]] = field(default_factory=dict)
    computed: dict[str, Any] = field(default_factory=dict)
    optimized_away: dict[str, str] = field(default_factory=dict)


def translate_program(program: torch.export.ExportedProgram, registry: Registry, opset: int,
                      ctx: DiagnosticContext, *, input_names: Sequence[str | None] | None = None,
                      output_names: Sequence[str | None] | None = None,
                      structure_names: Sequence[str | None] | None = None,
                      dim_names: dict[str, str] | None = None,
                      module_functions: bool | Iterable[type] = False) -> TranslatedGraph | None:
    """Translate the whole program; None when any node failed (diagnostics emitted).

    ``module_functions``: True, or nn.Module classes, to make module calls ONNX functions (_functions.py).
    ``structure_names``: output names from the model's output structure (``logits``), used where the user
    gave no ``output_names``; one that another value of the graph already has keeps the FX name.
    """
    gm = program.graph_module
    if find_unsupported(gm, registry, opset, ctx):
        return None
    builder = GraphBuilder(opset)
    tr = Translator(registry, builder, ctx, dim_names)
    sig = program.graph_signature
    specs = {spec.arg.name: spec for spec in sig.input_specs if hasattr(spec.arg, "name")}
    graph_inputs: list[Value] = []
    # The builder's dict: translations read weights from it and add ones they compute (ops/rnn.py).
    initializers: dict[str, torch.Tensor] = builder.initializers
    input_meta: dict[str, str] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            spec = specs.get(node.name)
            val = node.meta.get("val")
            kind = spec.kind if spec is not None else gs.InputKind.USER_INPUT
            if kind == gs.InputKind.USER_INPUT:
                if isinstance(val, torch.Tensor):
                    value = tr.meta_value(node.name, val)
                    graph_inputs.append(value)
                    tr.env[node.name] = value
                    tr.value_names[node.name] = node.name
                    input_meta[node.name] = kind.name
                else:
                    tr.env[node.name] = val  # a specialised non-tensor input; reported by the API layer
            elif kind in (gs.InputKind.PARAMETER, gs.InputKind.BUFFER, gs.InputKind.CONSTANT_TENSOR):
                target = spec.target
                tensor = _lookup_state(program, target)
                # a complex weight is written as its (real, imaginary) pairs, as its Value is carried
                initializers[target] = torch.view_as_real(tensor) if tensor.is_complex() else tensor
                value = Value(target, tensor.dtype, tuple(tensor.shape))
                tr.env[node.name] = value
                tr.value_names[node.name] = target
                input_meta[target] = kind.name
            else:
                tr.env[node.name] = None  # tokens and custom objects carry no tensor data
        elif node.op == "get_attr":
            attr = getattr(gm, node.target)
            tr.env[node.name] = attr
        elif node.op == "call_function":
            tr.call_function(node)
        elif node.op == "output":
            output_node = node
    if ctx.errors:
        return None
    outputs: list[Value] = []
    output_nodes: list[torch.fx.Node] = []
    flat_outputs = output_node.args[0]
    for spec, arg in zip(sig.output_specs, flat_outputs):
        if spec.kind != gs.OutputKind.USER_OUTPUT:
            continue  # buffer mutations are not model outputs for inference
        value = tr.arg(arg) if isinstance(arg, torch.fx.Node) else None
        if isinstance(value, Value):
            outputs.append(value)
            output_nodes.append(arg)
    if ctx.errors:
        return None
    # Outputs must be distinct values produced by nodes: inputs/initializers/repeats get an Identity.
    final: list[Value] = []
    seen: set[str] = set()
    input_set = {v.name for v in graph_inputs} | set(initializers)
    renames: dict[str, str] = {}
    singles: dict[str, Value] = {}
    for value, node in zip(outputs, output_nodes):
        if isinstance(node.meta.get("val"), (torch.SymFloat, float)):
            # NOTE: a Python float the model returns is computed as a double (symbolic.py) and returned as
            # torch.tensor(x) holds it, in the default dtype (float32), as torch.onnx returns it. The output
            # takes the FX value's name (the verifier pairs them by it); the double gets a name of its own.
            if value.name not in singles:
                singles[value.name] = builder.cast(value, torch.get_default_dtype())
                renames[value.name], renames[singles[value.name].name] = builder.fresh(value.name), value.name
            value = singles[value.name]
            tr.value_names[node.name] = value.name
        if value.name in seen or value.name in input_set:
            value = builder.op("Identity", value, shape=value.shape)
        seen.add(value.name)
        final.append(value)
    if input_names:  # a None keeps the value's own name
        for value, new in zip(graph_inputs, input_names):
            renames[value.name] = new or value.name
    if output_names:
        for value, new in zip(final, output_names):
            renames[value.name] = new or value.name
    elif structure_names:
        taken = {v.name for v in graph_inputs} | set(initializers) | {o for n in builder.nodes for o in n.output}
        for value, new in zip(final, structure_names):
            if new and (new == value.name or new not in taken):
                renames[value.name] = new
                taken.add(new)
    if renames:
        _rename_io(builder.nodes, renames)
        for vlist in (graph_inputs, final):
            for v in vlist:
                v.name = renames.get(v.name, v.name)
        tr.value_names = {k: renames.get(v, v) for k, v in tr.value_names.items()}
    # Complex inputs/outputs are real pairs with a trailing dim of 2, as torch.onnx exports them (IO007).
    complex_io = (split_complex(graph_inputs, ctx, "input"), split_complex(final, ctx, "output", output_nodes))
    if ctx.errors:
        return None
    # Weights no node reads (BatchNorm's num_batches_tracked, buffers only used in training) stay out.
    read = names_read(builder.nodes) | {v.name for v in final}
    initializers = {name: tensor for name, tensor in initializers.items() if name in read}
    io_names = {v.name for v in graph_inputs} | {v.name for v in final} | set(initializers)
    infos = [value_info(Value(renames.get(v.name, v.name), v.dtype, v.shape))
             for v in builder.value_info.values()
             if v.dtype is not None and renames.get(v.name, v.name) not in io_names]
    nodes, functions = builder.nodes, []
    if module_functions:
        typed = [value_info(v) for v in [*graph_inputs, *final]] + [
            value_info(Value(name, t.dtype, tuple(t.shape))) for name, t in initializers.items()]
        nodes, functions, infos = modularize(nodes, builder.origins, infos, typed, [v.name for v in final],
                                             builder.domains, module_functions, ctx)
    graph = helper.make_graph(nodes, "main_graph", [value_info(v) for v in graph_inputs],
                              [value_info(v) for v in final], value_info=infos)
    for value in graph.input:
        _set_meta(value, "pkg.torch.export.graph_signature.InputSpec.kind", "USER_INPUT")
    for value in graph.output:
        _set_meta(value, "pkg.torch.export.graph_signature.OutputSpec.kind", "USER_OUTPUT")
    metadata = {
        "pkg.torch.export.ExportedProgram.graph_signature": str(sig),
        "pkg.torch.export.ExportedProgram.range_constraints": str(program.range_constraints),
    }
    return TranslatedGraph(graph=graph, initializers=initializers, opset_imports=dict(builder.domains),
                           value_names=tr.value_names, input_names=[v.name for v in graph_inputs],
                           output_names=[v.name for v in final], metadata=metadata,
                           initializer_kinds={k: v for k, v in input_meta.items() if k in initializers},
                           complex_inputs=complex_io[0], complex_outputs=complex_io[1], functions=functions)


def _rename_io(nodes: Sequence[onnx.NodeProto], renames: dict[str, str]) -> None:
    """Give graph inputs/outputs the user's names, in every node and subgraph at once.

    NOTE: the one rename left: it runs after translation, over the whole graph, so
    nothing (no constant cache, no pending translation) still holds the old names.
    """
    for node in nodes:
        for i, name in enumerate(node.input):
            node.input[i] = renames.get(name, name)
        for i, name in enumerate(node.output):
            node.output[i] = renames.get(name, name)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _rename_io(attr.g.node, renames)
                for value in attr.g.output:
                    value.name = renames.get(value.name, value.name)


def _set_meta(proto: Any, key: str, value: str) -> None:
    entry = proto.metadata_props.add()
    entry.key, entry.value = key, value


def _lookup_state(program: torch.export.ExportedProgram, target: str) -> torch.Tensor:
    if target in program.state_dict:
        return program.state_dict[target]
    if target in program.constants:
        value = program.constants[target]
        if isinstance(value, torch.Tensor):
            return value
    raise KeyError(f"no tensor named {target} in the program's state_dict or constants")
