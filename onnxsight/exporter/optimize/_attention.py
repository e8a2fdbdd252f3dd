"""Attention with a mask known at export: the mask and torch's fully-masked-row guard, where they change nothing.

transformers builds an all-attend mask when it is called without ``attention_mask``;
folded, it is a constant. ``scaled_dot_product_attention``'s translation adds the
mask to the scores and guards rows whose every score is -inf (torch's
``_safe_softmax`` gives 0 there, Softmax gives NaN). With a constant mask that
masks no whole row, such a row needs every score to be -inf already (infinite
inputs), so the guard is dropped; an all-zero mask that does not broadcast the
scores to a larger shape is dropped too. What is left is the form ONNX Runtime's
attention fusers match (``Softmax <- Div <- MatMul``).
"""

from __future__ import annotations

import math

import onnx
import torch

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._graph import Graph, attribute


def constant_masks(graph: Graph) -> int:
    """Where(Equal(ReduceMax(S), -inf), 0, Softmax(S)) -> Softmax(S) for S = X + constant mask; X + 0 -> X."""
    done = 0
    for where in list(graph.nodes):
        softmax = _guarded_softmax(graph, where)
        if softmax is None:
            continue
        add = graph.producer.get(softmax.input[0])
        mask = _constant_operand(graph, add)
        if mask is None or not has_no_dead_row(mask[1]):
            continue
        if where.output[0] in graph.pinned:
            continue
        graph.replace_uses(where.output[0], softmax.output[0])
        done += 1
        if bool((mask[1] == 0).all()) and _keeps_shape(graph, add.input[1 - mask[0]], mask[1]) \
                and add.output[0] not in graph.pinned:
            graph.replace_uses(add.output[0], add.input[1 - mask[0]])
            done += 1
    return done


def has_no_dead_row(mask: torch.Tensor) -> bool:
    """True when no row (last axis) of the additive mask is -inf throughout."""
    if mask.dim() == 0 or not mask.dtype.is_floating_point:
        return False
    return not bool(torch.isneginf(mask).all(dim=-1).any())


def _guarded_softmax(graph: Graph, where: onnx.NodeProto) -> onnx.NodeProto | None:
    """The Softmax of torch's fully-masked-row guard ``where``, or None if ``where`` is not one."""
    if where.op_type != "Where" or where.domain or len(where.input) != 3:
        return None
    equal, zero, softmax = graph.producer.get(where.input[0]), graph.constant(where.input[1]), \
        graph.producer.get(where.input[2])
    if equal is None or equal.op_type != "Equal" or softmax is None or softmax.op_type != "Softmax":
        return None
    if zero is None or zero.numel() != 1 or float(zero.reshape(-1)[0]) != 0.0:
        return None
    reduce_max = graph.producer.get(equal.input[0])
    lowest = graph.constant(equal.input[1])
    if reduce_max is None or reduce_max.op_type != "ReduceMax" or reduce_max.input[0] != softmax.input[0]:
        return None
    if lowest is None or lowest.numel() != 1 or float(lowest.reshape(-1)[0]) != -math.inf:
        return None
    if attribute(softmax, "axis", -1) != -1:
        return None
    return softmax


def _constant_operand(graph: Graph, add: onnx.NodeProto | None) -> tuple[int, torch.Tensor] | None:
    if add is None or add.op_type != "Add" or add.domain:
        return None
    for index in (1, 0):
        tensor = graph.constant(add.input[index])
        if tensor is not None and graph.constant(add.input[1 - index]) is None:
            return (index, tensor) if has_data(tensor) else None
    return None


def _keeps_shape(graph: Graph, other: str, mask: torch.Tensor) -> bool:
    """Whether adding ``mask`` to ``other`` leaves ``other``'s shape as it is (the mask broadcasts into it)."""
    info = graph.info(other)
    if info is None or not info.type.tensor_type.HasField("shape"):
        return False
    dims = info.type.tensor_type.shape.dim
    if len(dims) < mask.dim():
        return False
    for size, dim in zip(reversed(mask.shape), reversed(dims)):
        if size != 1 and not (dim.HasField("dim_value") and dim.dim_value == size):
            return False
    return True
