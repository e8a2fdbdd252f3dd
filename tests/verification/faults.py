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
    faulty = _copy(model)
    index = GraphIndex.build(faulty)
    position = index.producer[value]
    node = faulty.graph.node[position]
    raw = f"{value}__unscaled"
    node.output[list(node.output).index(value)] = raw
    elem_type = index.elem_types.get(value, onnx.TensorProto.FLOAT)
    const = helper.make_node("Constant", [], [f"{value}__factor"],
                             value=helper.make_tensor(f"{value}__factor", elem_type, [], [factor]))
    mul = helper.make_node("Mul", [raw, f"{value}__factor"], [value])
    faulty.graph.node.insert(position + 1, const)
    faulty.graph.node.insert(position + 2, mul)
    return faulty


def swap_inputs(model: onnx.ModelProto, value: str) -> onnx.ModelProto:
    """The first two inputs of the node producing ``value`` swapped (Sub, Div, MatMul)."""
    faulty = _copy(model)
    node = faulty.graph.node[GraphIndex.build(faulty).producer[value]]
    node.input[0], node.input[1] = node.input[1], node.input[0]
    return faulty
