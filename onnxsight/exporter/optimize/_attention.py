"""Attention in the forms ONNX Runtime's transformer optimizer fuses: masks and torch's fully-masked-row guard
where they change nothing, pre-LN projection biases as rows.

transformers builds an all-attend mask when it is called without ``attention_mask``;
folded, it is a constant. ``scaled_dot_product_attention``'s translation adds the
mask to the scores and guards rows whose every score is -inf (torch's
``_safe_softmax`` gives 0 there, Softmax gives NaN). With a constant mask that
masks no whole row, such a row needs every score to be -inf already (infinite
inputs), so the guard is dropped; an all-zero mask that does not broadcast the
scores to a larger shape is dropped too. What is left is the form ONNX Runtime's
attention fusers match (``Softmax <- Div <- MatMul``). ``projection_biases`` runs once after
the simplifying passes (its NOTE says why); input padding masks are ``_padding``'s.
"""

from __future__ import annotations

import math
from typing import Iterator

import onnx
import torch

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, attribute, parent


def constant_masks(graph: Graph) -> int:
    """Where(Equal(RowMax(S), -inf), 0, Softmax(S)) -> Softmax(S) for S = X + constant mask; X + 0 -> X.

    RowMax is TopK(k=1)'s values (ReduceMax for half-precision scores)."""
    done = 0
    for where, softmax, add in guarded_adds(graph):
        mask = _constant_operand(graph, add)
        if mask is None or not has_no_dead_row(mask[1]):
            continue
        graph.replace_uses(where.output[0], softmax.output[0])
        done += 1
        other = add.input[1 - mask[0]]
        dims = list(mask[1].shape) if graph.constant(add.input[mask[0]]) is not None \
            else graph.dims(add.input[mask[0]])
        fits = _broadcasts_into(dims, graph.dims(other))
        if bool((mask[1] == 0).all()) and fits and add.output[0] not in graph.pinned:
            graph.replace_uses(add.output[0], add.input[1 - mask[0]])
            done += 1
    return done


def nan_guards(graph: Graph) -> int:
    """Where(Equal(RowMax(S), -inf), 0, Softmax(S)) -> Where(IsNaN(Softmax(S)), 0, Softmax(S)): the guards no pass
    could drop (a mask from an input's values, a mask that may mask a whole row) as torch.onnx writes them, which
    onnxscript's attention rule takes in (and which costs no TopK). The same zeros for a row whose every key is
    masked (Softmax gives NaN there); a row with a NaN score is zeros too, where torch gives NaN."""
    done, emit = 0, Emitter(graph)
    for where in list(graph.nodes):
        softmax = _guarded_softmax(graph, where)
        if softmax is None:
            continue
        nan = emit.op("IsNaN", softmax.output[0], hint=f"isnan_{softmax.output[0]}")
        emit.place(where)
        graph.set_input(where, 0, nan)   # the row maximum and its Equal are dead code now
        done += 1
    return done


def has_no_dead_row(mask: torch.Tensor) -> bool:
    """True when no row (last axis) of the additive mask is -inf throughout."""
    if mask.dim() == 0 or not mask.dtype.is_floating_point:
        return False
    return not bool(torch.isneginf(mask).all(dim=-1).any())


def guarded_adds(graph: Graph) -> Iterator[tuple[onnx.NodeProto, onnx.NodeProto, onnx.NodeProto]]:
    """(torch's fully-masked-row guard, its Softmax, the Add of scores and a mask before that) for each guard whose
    value may be bypassed (no graph output): the guards the mask passes look at."""
    for where in list(graph.nodes):
        softmax = _guarded_softmax(graph, where)
        add = graph.made_by(softmax.input[0], "Add") if softmax is not None else None
        if add is not None and where.output[0] not in graph.pinned:
            yield where, softmax, add


def _guarded_softmax(graph: Graph, where: onnx.NodeProto) -> onnx.NodeProto | None:
    """The Softmax of torch's fully-masked-row guard ``where``, or None if ``where`` is not one."""
    if where.op_type != "Where" or where.domain or len(where.input) != 3:
        return None
    equal, softmax = graph.made_by(where.input[0], "Equal"), graph.made_by(where.input[2], "Softmax")
    row_max = graph.producer.get(equal.input[0]) if equal is not None else None
    if softmax is None or row_max is None or row_max.input[0] != softmax.input[0] or not _is_row_max(graph, row_max) \
            or graph.scalar(where.input[1]) != 0.0 or graph.scalar(equal.input[1]) != -math.inf \
            or attribute(softmax, "axis", -1) != -1:
        return None
    return softmax


def _is_row_max(graph: Graph, node: onnx.NodeProto) -> bool:
    """Whether ``node`` is the guard's row maximum: ReduceMax, or TopK(k=1) over the last axis (its values)."""
    if node.domain:
        return False
    if node.op_type == "ReduceMax":
        return True
    return node.op_type == "TopK" and len(node.input) > 1 and graph.scalar(node.input[1]) == 1 \
        and attribute(node, "axis", -1) == -1 and attribute(node, "largest", 1) == 1


def _constant_operand(graph: Graph, add: onnx.NodeProto) -> tuple[int, torch.Tensor] | None:
    for index in (1, 0):
        if graph.constant(add.input[1 - index]) is not None:
            continue
        tensor = _mask_rows(graph, add.input[index])
        if tensor is not None:
            return index, tensor
    return None


def _mask_rows(graph: Graph, name: str, depth: int = 0) -> torch.Tensor | None:
    """A constant whose rows (last axis, broadcast) are the rows of ``name``'s value, or None.

    The value itself when it is a constant; through ``Expand`` (which only repeats rows: the mask a dynamic-batch
    export builds, ``Expand(constant, [batch, 1, L, S])``) and ``Where(cond, a, b)`` with one-element constant
    branches (a bool mask made additive). Enough for the guard, which asks whether a row is -inf throughout."""
    tensor = graph.constant(name)
    if tensor is not None:
        return tensor if has_data(tensor) else None
    node = graph.producer.get(name)
    if node is None or node.domain or depth > 4:
        return None
    if node.op_type == "Expand":
        return _mask_rows(graph, node.input[0], depth + 1)
    if node.op_type in ("GreaterOrEqual", "Greater"):   # e.g. arange(seq) >= 0: True throughout, one row [True]
        bound, low = graph.constant(node.input[1]), _lower_bound(graph, node.input[0], depth + 1)
        if bound is None or bound.numel() != 1 or not has_data(bound) or bound.dtype.is_floating_point \
                or low is None:
            return None
        bound_value = int(bound.reshape(-1)[0])
        true = low >= bound_value if node.op_type == "GreaterOrEqual" else low > bound_value
        return torch.ones(1, dtype=torch.bool) if true else None
    if node.op_type == "Where" and len(node.input) == 3:
        cond = _mask_rows(graph, node.input[0], depth + 1)
        a, b = graph.constant(node.input[1]), graph.constant(node.input[2])
        if cond is None or cond.dtype != torch.bool or a is None or b is None or a.numel() != 1 \
                or b.numel() != 1 or not has_data(a) or not has_data(b) or a.dtype != b.dtype:
            return None
        return torch.where(cond, a.reshape(()), b.reshape(()))
    return None


def _lower_bound(graph: Graph, name: str, depth: int = 0) -> int | None:
    """A lower bound of every element of the integer value ``name``, or None: constants, ``Range(start, n, step)``
    with a constant start and a positive constant step, sums of those, and reshapes of them."""
    tensor = graph.constant(name)
    if tensor is not None:
        if not has_data(tensor) or tensor.dtype.is_floating_point or tensor.dtype == torch.bool \
                or tensor.numel() == 0:
            return None
        return int(tensor.min())
    node = graph.producer.get(name)
    if node is None or node.domain or depth > 6:
        return None
    if node.op_type == "Range":
        start, step = graph.constant(node.input[0]), graph.constant(node.input[2])
        if start is None or step is None or not has_data(start) or not has_data(step) \
                or start.dtype.is_floating_point or int(step.reshape(-1)[0]) <= 0:
            return None
        return int(start.reshape(-1)[0])
    if node.op_type == "Add":
        bounds = [_lower_bound(graph, n, depth + 1) for n in node.input]
        return None if None in bounds else sum(bounds)  # type: ignore[arg-type]
    if node.op_type in ("Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity"):
        return _lower_bound(graph, node.input[0], depth + 1)
    return None


def _broadcasts_into(mask: list[int | str | None] | None, other: list[int | str | None] | None) -> bool:
    """Whether a mask of (symbolic) shape ``mask`` broadcasts into ``other``'s: each of its dims is 1 or the same size
    as ``other``'s (the same number, or the same symbol)."""
    return mask is not None and other is not None and len(mask) <= len(other) \
        and all(d == 1 or (d is not None and d == o) for d, o in zip(reversed(mask), reversed(other)))


# -- ONNX Runtime's transformer optimizer ---------------------------------------------------------------------
# NOTE: optimize_model(model_type="vit"/"bert") first runs ONNX Runtime's level-1 session optimisations, whose
# MatMulAddFusion turns MatMul + Add(bias) on a 3-D input into Reshape/Gemm/Reshape, hiding the projections
# the Python attention fuser looks for (Add <- MatMul). It leaves alone the projections of a post-LN block
# (BERT's: the LayerNormalization feeds Q, K, V and the residual Add), and any MatMul + Add whose bias is not
# 1-D. A pre-LN block (ViT's) is not recognised, so with ``optimize="ort-fusion"`` its four biases are stored as
# [1, N] rows (the same bytes; ``graph.derived`` records them with no permutation): the same numbers, and the
# Python fusers, which read the bias as an initializer, fuse the block at every opt_level. Not by default:
# onnxscript's attention rule packs the Q, K, V biases along axis 0, which [1, N] rows make a bias ORT refuses.
def projection_biases(graph: Graph) -> int:
    """Pre-LN attention: its Q, K, V and output projections add their bias as a [1, N] row."""
    done = 0
    for softmax in list(graph.nodes):
        for add in _projection_adds(graph, softmax) or ():
            index = 1 if _bias(graph, add.input[1]) else 0
            source = add.input[index]
            row = f"{source}.row"
            if row not in graph.initializers:
                graph.initializers[row] = graph.initializers[source].unsqueeze(0)
                graph.derived[row] = (source, None)
                graph.weights.add(row)
            graph.set_input(add, index, row)
            done += 1
    return done


def _bias(graph: Graph, name: str) -> bool:
    tensor = graph.constant(name)
    return tensor is not None and tensor.dim() == 1 and name in graph.weights


def _projection_input(graph: Graph, add: onnx.NodeProto | None) -> str | None:
    """The input ``x`` of ``add`` = ``Add(MatMul(x, W), bias)`` (W a matrix, bias a 1-D weight); else None."""
    if add is None or add.op_type != "Add" or add.domain or not any(_bias(graph, name) for name in add.input):
        return None
    matmul = next((graph.producer[n] for n in add.input if n in graph.producer), None)
    if matmul is None or matmul.op_type != "MatMul" or graph.static_rank(matmul.input[1]) != 2 \
            or graph.uses(matmul.output[0]) != 1:
        return None
    return matmul.input[0]


def _head_projection(graph: Graph, value: str) -> onnx.NodeProto | None:
    """The bias Add that ``value`` = ``Transpose(Reshape(Add(MatMul(x, W), bias)))`` comes from."""
    reshape = parent(graph, graph.made_by(value, "Transpose"), 0, "Reshape")
    return graph.producer.get(reshape.input[0]) if reshape is not None else None


def _projection_adds(graph: Graph, softmax: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    """The Q, K, V and output projections' bias Adds of a pre-LN attention around ``softmax`` (scores
    ``Div(MatMul(Q, K^T), c)``, with or without a mask added)."""
    if softmax.op_type != "Softmax" or softmax.domain or attribute(softmax, "axis", -1) != -1:
        return None
    scaled = graph.producer.get(softmax.input[0])
    if scaled is not None and scaled.op_type == "Add":  # a mask added to the scores
        scaled = next((graph.producer[n] for n in scaled.input
                       if n in graph.producer and graph.producer[n].op_type == "Div"), None)
    if scaled is None or scaled.op_type != "Div" or graph.constant(scaled.input[1]) is None:
        return None
    scores = graph.producer.get(scaled.input[0])
    readers = graph.readers.get(softmax.output[0], [])
    if scores is None or scores.op_type != "MatMul" or len(readers) != 1 or readers[0].op_type != "MatMul":
        return None
    adds = [_head_projection(graph, scores.input[0]), _head_projection(graph, scores.input[1]),
            _head_projection(graph, readers[0].input[1]),
            _reader_path(graph, readers[0].output[0], "Transpose", "Reshape", "MatMul", "Add")]
    roots = [_projection_input(graph, add) for add in adds]
    if None in roots or len(set(roots[:3])) != 1 or _post_ln(graph, roots[0]):
        return None
    return adds


def _reader_path(graph: Graph, value: str, *path: str) -> onnx.NodeProto | None:
    """The last node of a chain of sole readers of ``value`` with op types ``path``."""
    node = None
    for op_type in path:
        node = graph.sole_reader(value, op_type)
        if node is None:
            return None
        value = node.output[0]
    return node


def _post_ln(graph: Graph, root: str) -> bool:
    """Whether ``root`` is a LayerNormalization that also feeds one residual Add (ORT keeps such blocks)."""
    producer = graph.producer.get(root)
    readers = [r.op_type for r in graph.readers.get(root, [])]
    return producer is not None and producer.op_type == "LayerNormalization" and readers.count("Add") == 1
