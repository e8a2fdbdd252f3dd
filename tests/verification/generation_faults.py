"""Faults of a generation step injected into its ONNX model: the bugs a verified generation must place at
their step, node and line (a cache update that keeps the old cache, a position off by one, a mask ignored)."""

from __future__ import annotations

import onnx
from onnx import helper

from onnxsight.verification._graph import GraphIndex
from tests.verification import faults


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def keep_old_cache(model: onnx.ModelProto, present: str = "present.0.key") -> onnx.ModelProto:
    """The Concat that appends the new keys to the cache returns the old cache instead (a Concat of the old
    cache alone: the node keeps its op, as a translation bug would)."""
    faulty = _copy(model)
    node = faulty.graph.node[GraphIndex.build(faulty).producer[present]]
    if node.op_type != "Concat" or not node.input[0].startswith("past_key_values."):
        raise ValueError(f"{present} is made by {node.op_type}({', '.join(node.input)}), not the cache's Concat")
    del node.input[1:]
    return faulty


def new_keys_first(model: onnx.ModelProto, present: str = "present.0.key") -> onnx.ModelProto:
    """The cache update concatenates the new keys before the old ones (a bug only a later step sees)."""
    return faults.swap_inputs(model, present)


def shift_input(model: onnx.ModelProto, name: str, offset: int = 1) -> onnx.ModelProto:
    """Every reader of input ``name`` (position ids) reads it plus ``offset``."""
    faulty = _copy(model)
    shifted, constant = f"{name}__shifted", f"{name}__offset"
    elem_type = next(i.type.tensor_type.elem_type for i in faulty.graph.input if i.name == name)
    for node in faulty.graph.node:
        node.input[:] = [shifted if i == name else i for i in node.input]
    faulty.graph.node.insert(0, helper.make_node("Add", [name, constant], [shifted]))
    faulty.graph.node.insert(0, helper.make_node("Constant", [], [constant],
                                                 value=helper.make_tensor(constant, elem_type, [], [offset])))
    return faulty


def ignore_input(model: onnx.ModelProto, name: str = "attention_mask") -> onnx.ModelProto:
    """Every reader of input ``name`` (the attention mask) reads ones of its shape: the padding is attended."""
    faulty = _copy(model)
    ones, shape = f"{name}__ones", f"{name}__shape"
    elem_type = next(i.type.tensor_type.elem_type for i in faulty.graph.input if i.name == name)
    for node in faulty.graph.node:
        if node.op_type != "Shape":
            node.input[:] = [ones if i == name else i for i in node.input]
    faulty.graph.node.insert(0, helper.make_node("ConstantOfShape", [shape], [ones],
                                                 value=helper.make_tensor("one", elem_type, [1], [1])))
    faulty.graph.node.insert(0, helper.make_node("Shape", [name], [shape]))
    return faulty
