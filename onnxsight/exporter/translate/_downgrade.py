"""``opset_version`` below the lowest opset onnxsight translates at (15, 16): ONNX's version converter.

Older runtimes and hardware toolchains ask for opset 15 or 16, and torch.onnx exports them. The
translations here target opset 17 and newer; rather than a second set of translations, the model
translated at 17 is converted down with ``onnx.version_converter`` and then checked and verified
like any other export (the check stage and ``verify=`` see the converted graph).

Before converting, every ONNX operator is looked up at the requested opset: one that does not exist
there is replaced by its ONNX function body where it has one (``LayerNormalization``, new in 17, is
ReduceMean, Sub, Sqrt, ... before), and otherwise is OPS003 at the user's line, naming the op and
the lowest opset that has it, instead of the converter's message about an adapter. The converter drops node
metadata (the user's line, the FX node): it is copied back by output name.
"""

from __future__ import annotations

import dataclasses

import onnx
import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter._builder import Value, value_info
from onnxsight.exporter.translate._graph import TranslatedGraph
from onnxsight.exporter.translate._nodes import op_display

FX_NODE_KEY = "pkg.torch.onnx.fx_node"
IDENTITY_ADAPTED = 16  # the converter cannot take Identity below its opset-16 version (optional types)


def convert_opset(translated: TranslatedGraph, target: int, program: torch.export.ExportedProgram,
                  ctx: DiagnosticContext) -> TranslatedGraph | None:
    """``translated`` at opset ``target``; None when an op or the conversion is refused (OPS003/ONX007)."""
    source = translated.opset_imports.get("", target)
    model = onnx.helper.make_model(translated.graph, opset_imports=[
        onnx.helper.make_opsetid(domain, version) for domain, version in translated.opset_imports.items()])
    for name, tensor in translated.initializers.items():  # typed inputs: the converter needs no weight bytes
        model.graph.input.append(value_info(Value(name, tensor.dtype, tuple(tensor.shape))))
    _expand_missing_ops(model, source, target)
    if _refuse_missing_ops(model.graph, target, program, ctx):
        return None
    try:
        converted = onnx.version_converter.convert_version(model, target)
    except Exception as exc:  # noqa: BLE001 - the converter's reason is the message
        ctx.emit(rules.OPSET_CONVERSION_FAILED, source=source, target=target, error=str(exc).strip()[:500],
                 changed=_changed_ops(translated.graph, source, target))
        return None
    graph = onnx.GraphProto()
    graph.CopyFrom(converted.graph)
    del graph.input[len(translated.graph.input):]  # the weights go back to being initializers
    metadata = {node.output[0]: node.metadata_props for node in model.graph.node if node.output}  # expanded too
    for node in graph.node:
        if node.output and not node.metadata_props and node.output[0] in metadata:
            node.metadata_props.extend(metadata[node.output[0]])
    return dataclasses.replace(translated, graph=graph, opset_imports={**translated.opset_imports, "": target})


def _expand_missing_ops(model: onnx.ModelProto, source: int, target: int) -> None:
    """Each node whose op opset ``target`` lacks replaced by the op's ONNX function body, where it has one.

    Below 16, a tensor's Identity becomes a Cast to its own type (no converter adapter for Identity).

    ``LayerNormalization`` (opset 17) is defined in ONNX as a function of older ops (ReduceMean, Sub,
    Sqrt, ...): expanded, a transformer exports at opset 16 as torch.onnx's older exporter wrote it.
    The body's nodes keep the node's metadata (the user's line); its own values get the node's name
    as a prefix, its inputs and outputs are the node's.
    """
    types: dict[str, onnx.TypeProto] | None = None
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        default = node.domain in ("", "ai.onnx")
        required = first_opset(node.op_type) if default else None
        identity = default and node.op_type == "Identity" and target < IDENTITY_ADAPTED
        body = None
        if identity or (required is not None and required > target):
            if types is None:
                inferred = onnx.shape_inference.infer_shapes(model)
                types = {v.name: v.type for v in (*inferred.graph.input, *inferred.graph.value_info,
                                                   *inferred.graph.output)}
            body = _identity_as_cast(node, types) if identity else _function_body(node, types, source)
        nodes.extend(body if body is not None else [node])
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _identity_as_cast(node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> list[onnx.NodeProto] | None:
    """Identity of a tensor as a Cast to its own type: ONNX's converter has no adapter from Identity-16."""
    kind = types.get(node.input[0]) if node.input else None
    if kind is None or not kind.HasField("tensor_type") or not kind.tensor_type.elem_type:
        return None
    cast = onnx.helper.make_node("Cast", list(node.input), list(node.output), name=node.name,
                                 to=kind.tensor_type.elem_type)
    cast.metadata_props.extend(node.metadata_props)
    return [cast]


def _function_body(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], opset: int) -> list[onnx.NodeProto] | None:
    """``node`` as the nodes of its op's function body at ``opset``; None when the op has none."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset)
        if schema.has_context_dependent_function:
            data = schema.get_context_dependent_function(
                node.SerializeToString(), [types.get(name, onnx.TypeProto()).SerializeToString() for name in node.input])
        elif schema.has_function:
            data = schema.function_body.SerializeToString()
        else:
            return None
    except Exception:  # noqa: BLE001 - no body for these input types: the op is then refused by name
        return None
    function = onnx.FunctionProto.FromString(data)
    prefix = f"{node.name or node.output[0]}/"
    names = dict(zip(function.input, node.input))
    names.update((inner, outer) for inner, outer in zip(function.output, node.output) if outer)
    attributes = {a.name: a for a in node.attribute}
    body = []
    for index, inner in enumerate(function.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}{inner.name or inner.op_type}_{index}"
        copy.input[:] = [names.get(n, prefix + n) if n else "" for n in inner.input]
        copy.output[:] = [names.get(n, prefix + n) if n else "" for n in inner.output]
        del copy.attribute[:]
        for attribute in inner.attribute:
            if attribute.ref_attr_name:  # an attribute of the function: the node's value, if it has one
                if attribute.ref_attr_name in attributes:
                    copy.attribute.append(attributes[attribute.ref_attr_name])
                    copy.attribute[-1].name = attribute.name
            else:
                copy.attribute.append(attribute)
        copy.metadata_props.extend(node.metadata_props)
        body.append(copy)
    return body


def _changed_ops(graph: onnx.GraphProto, source: int, target: int) -> str:
    """``ScatterElements (changed in opset 16)``: the model's ops defined anew between target and source."""
    changed = {}
    for node in _nodes(graph):
        if node.domain in ("", "ai.onnx") and node.op_type not in changed:
            try:
                since = onnx.defs.get_schema(node.op_type, source).since_version
            except onnx.defs.SchemaError:
                continue
            if since > target:
                changed[node.op_type] = since
    return ", ".join(f"{op} (changed in opset {since})" for op, since in sorted(changed.items())) or "none"


def first_opset(op_type: str) -> int | None:
    """The lowest opset of the default domain that has ``op_type``; None when none has it."""
    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op_type
                and s.domain in ("", "ai.onnx")]
    return min(versions, default=None)


def _refuse_missing_ops(graph: onnx.GraphProto, target: int, program: torch.export.ExportedProgram,
                        ctx: DiagnosticContext) -> bool:
    """OPS003 for each default-domain op that opset ``target`` does not have, at the FX node it came from."""
    fx_nodes = {node.name: node for node in program.graph_module.graph.nodes}
    seen: set[tuple[str, str]] = set()
    for node in _nodes(graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        required = first_opset(node.op_type)
        if required is None or required <= target:
            continue
        origin = next((p.value for p in node.metadata_props if p.key == FX_NODE_KEY), "")  # "%name : ... = ..."
        fx_node = fx_nodes.get(origin.split(" ", 1)[0].lstrip("%")) if origin else None
        target_op = f" (the translation of {op_display(fx_node.target)})" if fx_node is not None and \
            fx_node.op == "call_function" else ""
        if (node.op_type, target_op) in seen:
            continue  # one error per op and ATen op: twelve LayerNormalizations are one problem
        seen.add((node.op_type, target_op))
        ctx.emit(rules.OP_NEEDS_NEWER_OPSET, node=fx_node, op=f"ONNX {node.op_type}{target_op}", required=required,
                 opset=target)
    return bool(seen)


def _nodes(graph: onnx.GraphProto):  # noqa: ANN202 - an iterator of NodeProto, subgraphs included
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)
