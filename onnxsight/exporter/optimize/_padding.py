"""BERT's (batch, keys) padding mask from a model input, written with a finite fill and without torch's guard in
the additive form ONNX Runtime's attention fuser and onnxscript's rewriter both match; static or dynamic sizes,
float32, float16 and bfloat16. The note ONX008 says what it costs (a sequence of padding only).
"""

from __future__ import annotations

import numpy as np
import onnx
import torch

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.optimize._attention import guarded_adds
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph
from onnxsight.exporter.optimize._sized_mask import _is_mask, mask_subgraph, subgraph_model, zeros

# Score dtypes the additive form is written in: each with its own lowest finite value.
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
# The mask's subgraph is checked by running it; a larger one is left as it is.
_MAX_MASK_NODES = 64


# NOTE: a padding mask that is an input of the model (BERT's ``attention_mask``) is not a constant, so torch's
# fully-masked-row guard cannot be dropped by ``constant_masks``, and no guard fits inside the pattern ONNX
# Runtime's BERT attention fuser matches (Softmax feeds the MatMul with V directly). Such a mask is rewritten
# into BERT's form, ``scores + Where(1 - mask, lowest, 0)`` with ``lowest`` the scores' dtype's most negative
# finite value, which ORT's fuser reads as a key-padding mask (``mask_filter_value = lowest``), and onnxscript's
# rewriter as an attention bias. Every row that attends to at least one key gives torch's numbers (the masked
# keys' weights underflow to 0; in float16 a masked score below about -16 becomes -inf, whose weight is 0 too). A row whose every key is masked (a sequence of padding
# only) gives the mean of the values in float32 and bfloat16, as ONNX Runtime's fused Attention does (in float16
# another average, or NaN where every masked score became -inf); PyTorch gives zeros there. verify() with such an
# input names the first attention output as the root cause.
def padding_masks(graph: Graph, inputs: dict[tuple[str, str], int] | None = None) -> int:
    """Guarded attention whose bool mask broadcasts a (batch, keys) value -> BERT's additive padding mask;
    ``inputs`` counts the attentions rewritten per (graph input the mask comes from, scores' dtype) (for the note
    ONX008)."""
    done = 0
    # (key-padding value, scores dtype, queries) -> the additive mask made from it: the mask has the queries' axis,
    # so a decoder's cross-attention (DETR's object queries) over the encoder's padded keys gets its own
    made: dict[tuple[str, int, object], str] = {}
    checked: dict[tuple, str | None] = {}   # every layer adds the same mask: its subgraph is run once
    for where, softmax, add in guarded_adds(graph):
        found = _padding_mask(graph, add, checked)
        if found is None:
            continue
        index, keys = found
        dtype, scores = graph.elem_type(add.output[0]), add.input[1 - index]
        made_key = (keys, dtype, _queries(graph, scores))
        if made_key not in made:
            made[made_key] = _additive_mask(graph, keys, dtype, add, scores)
        if inputs is not None:
            for name in _graph_inputs_of(graph, keys):
                key = (name, str(to_torch(dtype)).removeprefix("torch."))
                inputs[key] = inputs.get(key, 0) + 1
        graph.set_input(add, index, made[made_key])
        graph.replace_uses(where.output[0], softmax.output[0])
        done += 1
    return done


def _queries(graph: Graph, scores: str) -> int | str | None:
    """The queries' count (axis 2) of 4-D ``scores``: an int, or its symbol."""
    shape = graph.symbolic_shape(scores) or ()
    return shape[2] if len(shape) == 4 else None


def _graph_inputs_of(graph: Graph, value: str) -> list[str]:
    """The graph inputs ``value`` is computed from."""
    found, seen, stack = [], set(), [value]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph.graph_inputs:
            found.append(name)
        node = graph.producer.get(name)
        stack.extend(n for n in (node.input if node is not None else ()) if n)
    return sorted(found)


def _padding_mask(graph: Graph, add: onnx.NodeProto, checked: dict[tuple, str | None]) -> tuple[int, str] | None:
    """(index of the mask among ``add``'s inputs, the bool (batch, keys) value it broadcasts), or None.

    ``add`` = ``scores + Where(mask, 0, -inf)`` in float32, float16 or bfloat16 with 4-D scores of known (or
    symbolic) shape, and ``mask`` computed from one (batch, keys) bool value by a subgraph that, run on it,
    gives ``value[:, None, None, :]``.
    """
    for index in (1, 0):
        scores = graph.producer.get(add.input[1 - index])
        if not _is_mask(graph, add.input[index]) or scores is None or scores.op_type not in ("Div", "Mul", "MatMul") \
                or graph.elem_type(add.output[0]) not in _FLOATS:
            continue
        where = graph.producer[add.input[index]]
        shape, mask = graph.symbolic_shape(add.output[0]), graph.symbolic_shape(where.input[0])
        if shape is None or mask is None or len(shape) != 4:
            continue
        key = (where.input[0], shape[0], shape[-1], mask)
        if key not in checked:
            checked[key] = _broadcast_keys(graph, where.input[0], (shape[0], shape[-1]), mask)
        keys = checked[key]
        if keys is not None:
            return index, keys
    return None


def _broadcast_keys(graph: Graph, mask: str, wanted: tuple, shape: tuple) -> str | None:
    """The bool value of (symbolic) shape ``wanted`` that ``mask`` (of shape ``shape``) is ``value[:, None, None,
    :]`` of: its subgraph may read other graph inputs for their sizes only (``Shape``); run to check, on masks of
    several densities, at two sizes per symbol where sizes are dynamic."""
    def leaf(name: str) -> bool:
        return name != mask and graph.symbolic_shape(name) == wanted and graph.elem_type(name) == onnx.TensorProto.BOOL

    found = mask_subgraph(graph, mask, leaf)
    # one value the mask broadcasts; any other graph input read for its sizes alone (``Shape``)
    if found is None or len(found[0]) > _MAX_MASK_NODES or len(found[2]) != 1 or not leaf(found[2][0]) \
            or any(name not in graph.graph_inputs for name in found[1]):
        return None
    body, sized, (keys,) = found
    inputs = {name: graph.symbolic_shape(name) for name in sized}
    symbols = sorted({d for s in (wanted, shape, *inputs.values()) if s is not None for d in s if isinstance(d, str)})
    if any(s is None for s in inputs.values()) or any(not s.isidentifier() for s in symbols):
        return None   # a size written as an expression ("seq*batch") is not one to choose
    sizes = [dict(zip(symbols, range(3, 3 + len(symbols)))), dict(zip(symbols, range(5, 5 + 2 * len(symbols), 2)))] \
        if symbols else [{}]
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(subgraph_model(graph, body, [keys, *sized], mask))
        return keys if all(_broadcasts(graph, evaluator, keys, sized, wanted, shape, size) for size in sizes) else None
    except Exception:  # noqa: BLE001 - a mask the reference cannot load or run is left as it is
        return None


def _broadcasts(graph: Graph, evaluator: object, keys: str, sized: list[str], wanted: tuple, shape: tuple,
                size: dict[str, int]) -> bool:
    """Whether the mask's subgraph, at the sizes ``size`` gives to the symbols, broadcasts each sample of keys."""
    wanted_now = tuple(size.get(d, d) if isinstance(d, str) else d for d in wanted)
    shape_now = tuple(size.get(d, d) if isinstance(d, str) else d for d in shape)
    feeds = zeros(graph, sized, size)
    rng = np.random.default_rng(0)
    one_hot = np.zeros(wanted_now, bool)
    one_hot[np.arange(wanted_now[0]), np.arange(wanted_now[0]) % wanted_now[1]] = True
    samples = [rng.random(wanted_now) < p for p in (0.1, 0.5, 0.9)] + [np.ones(wanted_now, bool),
                                                                      np.zeros(wanted_now, bool), one_hot]
    return all(np.array_equal(np.asarray(evaluator.run(None, {keys: s, **feeds})[0]),  # type: ignore[attr-defined]
                              np.broadcast_to(s[:, None, None, :], shape_now)) for s in samples)


def _additive_mask(graph: Graph, keys: str, dtype: int, before: onnx.NodeProto, scores: str) -> str:
    """``Where(Cast(1 - m), lowest, 1 - m)`` with ``m = dtype(Expand(keys[:, None, None, :], [1, 1, L, 1]))``, ``L``
    the queries (transformers' expanded SDPA mask, ``(batch, 1, L, keys)``), in the node order ONNX Runtime's
    attention fuser matches: its name. The mask has the queries' axis because onnxscript's attention rule expands a
    ``(batch, 1, 1, keys)`` one itself from the projected queries' Shape, which keeps their bias from fusing."""
    emit = Emitter(graph)
    real = to_torch(dtype)
    shape = graph.symbolic_shape(scores) or ()
    queries, key_count = (shape[2], shape[3]) if len(shape) == 4 else (None, None)
    if isinstance(queries, int):
        rows = emit.const("_const_rows", [1, 1, queries, 1])
    else:   # the queries' count read at run time: from the mask itself where there are as many queries as keys
        length = emit.op("Shape", keys, start=1, end=2) if queries == key_count else \
            emit.op("Shape", scores, start=2, end=3)
        rows = emit.op("Concat", emit.const("_const_ones", [1, 1]), length, emit.const("_const_one", [1]), axis=0)
    wide = emit.op("Unsqueeze", emit.op("Unsqueeze", keys, emit.const("_const_axis_1", [1]), hint=f"{keys}_unsqueeze"),
                   emit.const("_const_axis_2", [2]), hint=f"{keys}_unsqueeze_1")
    float_mask = emit.op("Cast", emit.op("Expand", wide, rows, hint=f"{keys}_expand"), to=dtype, hint=f"{keys}_float")
    masked = emit.op("Sub", emit.const("_const_one", torch.tensor(1.0, dtype=real)), float_mask, hint=f"{keys}_masked")
    bias = emit.op("Where", emit.op("Cast", masked, to=onnx.TensorProto.BOOL, hint=f"{keys}_blocked"),
                   emit.const("_const_lowest", torch.tensor(torch.finfo(real).min, dtype=real)), masked,
                   hint=f"{keys}_bias")
    emit.place(before)
    return bias
