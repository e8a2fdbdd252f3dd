"""Fault injection into ONNX models: the bugs verification must localise."""

from __future__ import annotations

import onnx
from onnx import helper

from onnxsight.verification._graph import GraphIndex


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def scale_value(model: onnx.ModelProto, value: str, factor: float = 1.01) -> onnx.ModelProto:
    """``value`` multiplied by ``factor`` right where it is produced."""
    return _combine_at_producer(model, value, "Mul", factor, "unscaled", "factor")


def swap_inputs(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """The first two inputs of the node producing ``value`` swapped (Sub, Div, MatMul)."""
    faulty = _copy(model)
    node = faulty.graph.node[GraphIndex.build(faulty).producer[value]]
    node.input[0], node.input[1] = node.input[1], node.input[0]
    return faulty


def add_constant(model: onnx.ModelProto, value: str, constant: float) -> onnx.ModelProto:
    """``value`` plus ``constant`` right where it is produced."""
    return _combine_at_producer(model, value, "Add", constant, "clean", "offset")


def _combine_at_producer(model: onnx.ModelProto, value: str, op_type: str, scalar: float, raw_suffix: str,
                         const_suffix: str) -> onnx.ModelProto:
    """``value`` replaced by ``op_type(value, scalar)`` right after the node that produces it."""
    faulty = _copy(model)
    index = GraphIndex.build(faulty)
    position = index.producer[value]
    node = faulty.graph.node[position]
    raw, operand = f"{value}__{raw_suffix}", f"{value}__{const_suffix}"
    node.output[list(node.output).index(value)] = raw
    elem_type = index.elem_types.get(value, onnx.TensorProto.FLOAT)
    const = helper.make_node("Constant", [], [operand], value=helper.make_tensor(operand, elem_type, [], [scalar]))
    faulty.graph.node.insert(position + 1, const)
    faulty.graph.node.insert(position + 2, helper.make_node(op_type, [raw, operand], [value]))
    return faulty


def drop_cast(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """The Cast producing ``value`` replaced by Identity (the value keeps its input's dtype)."""
    faulty = _copy(model)
    node = faulty.graph.node[GraphIndex.build(faulty).producer[value]]
    if node.op_type != "Cast":
        raise ValueError(f"{value} is produced by {node.op_type}, not Cast")
    node.op_type = "Identity"
    del node.attribute[:]
    return faulty


def change_attribute(model: onnx.ModelProto, value: str, name: str, new: object) -> onnx.ModelProto:
    """Attribute ``name`` of the node producing ``value`` set to ``new`` (an int, float or list of ints)."""
    faulty = _copy(model)
    node = faulty.graph.node[GraphIndex.build(faulty).producer[value]]
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend(kept + [helper.make_attribute(name, new)])
    return faulty


def attribute_mutation(node: onnx.NodeProto, rank: int | None) -> tuple[str, object] | None:
    """A different, still plausible value for one attribute of ``node`` (axis, perm, epsilon, alpha, ...)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if "perm" in attrs and len(attrs["perm"]) > 1:
        perm = list(attrs["perm"])
        return "perm", perm[1:] + perm[:1]
    if "axis" in attrs and rank and rank > 1:
        axis = int(attrs["axis"]) % rank
        return "axis", (axis - 1) % rank
    for name, scale in (("epsilon", 1e4), ("alpha", 1.5), ("beta", 1.5)):
        if name in attrs and isinstance(attrs[name], float):
            return name, float(attrs[name]) * scale + 0.1
    for name in ("transB", "transA", "keepdims"):
        if name in attrs:
            return name, 1 - int(attrs[name])
    return None
