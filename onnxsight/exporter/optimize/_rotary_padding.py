"""A LLaMA decoder called with an ``attention_mask`` (batch, keys): its causal and padding mask in ORT's rotary form.

transformers combines the causal mask with a 2-D padding mask read from an input (``generate()``'s prompt step
with padded sequences, a decode step over a KV cache with the mask of past and new keys). Such a mask depends on
the input's values, so ``_sized_mask.causal_fill_at_sizes`` cannot prove it causal, and with left padding a
query row can have every key masked, which the translation guards (torch's zeros) and ORT's
``MultiHeadAttention`` does not: an ``attention_bias`` row of ``-inf`` gives NaN, which the next layer spreads.

This module checks that the translated mask is exactly "causal (after the past positions) and padding from that
input" by running its subgraph with ONNX's reference evaluator at sample sizes and on several 0/1 masks (with
static sizes at the one size the graph has, on more masks: nothing else can vary), and
writes it in the form ORT's ``FusionRotaryAttention`` takes for a 2-D padding mask (``Where(blocked, lowest, 1 -
Cast(Expand(Unsqueeze(Unsqueeze(mask)))))``, passed on as ``attention_bias``) with a FINITE fill, the scores'
dtype's lowest: a row with at least one key attended gives PyTorch's numbers exactly (the masked keys' weights
underflow to 0), a fully masked row gives the mean of the values (finite) where PyTorch gives zeros, as BERT's
additive form does (``_padding.py``, the note ONX008).
"""

from __future__ import annotations

import numpy as np
import onnx
import torch

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph
from onnxsight.exporter.optimize._sized_mask import (blocked_fill, causal, float_values, mask_subgraph, sampled_sizes,
                                                     subgraph_model, zeros)

_SIZES = (1, 2, 3, 8, 9)       # each symbol takes each of these (every combination); _sized_mask adds sizes
                               # around constants over 8 only
_PADDING_TYPES = (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL)
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def padded_causal_fill(graph: Graph, mask: str, scores: tuple[int | str, ...]) -> tuple[float, str] | None:
    """(the masked-out value, the padding input) where the additive (batch, 1, queries, keys) ``mask`` added to
    scores of shape ``scores`` is, at every size and padding mask sampled, exactly ``causal & padding[:, None,
    None, :]`` (query i of S attends the keys up to i + T - S of T that its row of the padding input does not
    mask) with every masked key one value of at most the dtype's lowest; None otherwise."""
    found = mask_subgraph(graph, mask)   # the one input whose values it reads, others read for their sizes
    if found is None or len(found[2]) != 1 or graph.elem_type(found[2][0]) not in _PADDING_TYPES:
        return None
    body, sized, (padding,) = found
    if graph.elem_type(mask) not in (*_FLOATS, None):   # None: a form of an earlier pass (BERT's, a step of one
        return None                                      # token at static sizes); _check sees its values' dtype
    shapes = {name: graph.symbolic_shape(name) for name in (padding, *sized)}
    if any(s is None or any(isinstance(d, str) and not d.isidentifier() for d in s) for s in shapes.values()):
        return None
    pad_shape = shapes[padding]
    if len(pad_shape) != 2 or pad_shape[0] != scores[0] or not isinstance(scores[-2], (int, str)):
        return None
    symbols = sorted({d for s in shapes.values() for d in s if isinstance(d, str)})
    # the padding mask's length: its own symbol (a cache step: past + new keys) is set to the keys the mask has
    free = pad_shape[1] if isinstance(pad_shape[1], str) and \
        not any(pad_shape[1] in s for n, s in shapes.items() if n != padding) and pad_shape[1] != scores[-2] else None
    chosen = [s for s in symbols if s != free]
    # NOTE: with no size to vary (static sizes) only the mask's values are; the constants are then the sizes
    # fixed at export, not windows to sample around
    samples = sampled_sizes(graph, body, chosen, _SIZES) if chosen else [{}]
    if samples is None:
        return None
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(subgraph_model(graph, body, [padding, *sized], mask))
        fills = set()
        for sizes in samples:
            fill = _check(graph, evaluator, padding, sized, sizes, free, scores[-2], one_size=not chosen)
            if fill is None:
                return None
            fills |= fill
    except Exception:  # noqa: BLE001 - a mask the reference cannot run is left as it is
        return None
    return (fills.pop(), padding) if len(fills) == 1 else None


def _check(graph: Graph, evaluator: object, padding: str, sized: list[str], sizes: dict[str, int],
           free: str | None, queries: int | str, *, one_size: bool) -> set[float] | None:
    """The fills seen at ``sizes`` on each padding mask sampled (empty where nothing is masked); None where the
    mask is not causal & padding there. ``one_size``: the only size the mask is run at (static sizes), where
    more masks are sampled."""
    feeds = zeros(graph, sized, sizes)
    pad_type = onnx.helper.tensor_dtype_to_np_dtype(graph.elem_type(padding))
    first, second = graph.symbolic_shape(padding)
    batch = sizes[first] if isinstance(first, str) else first
    if free is not None:   # the keys the mask computes: run once on a mask of ones of one key, read its length
        probe = evaluator.run(None, {padding: np.ones((batch, 1), pad_type), **feeds})[0]  # type: ignore[attr-defined]
        keys = int(np.asarray(probe).shape[-1])
    else:
        keys = sizes[second] if isinstance(second, str) else second
    length = sizes[queries] if isinstance(queries, str) else queries
    if length is None or keys < length:
        return None
    attends = causal(length, keys)
    fills: set[float] = set()
    for sample in _masks(batch, keys, one_size=one_size):
        run = evaluator.run(None, {padding: sample.astype(pad_type), **feeds})  # type: ignore[attr-defined]
        found = float_values(np.asarray(run[0]))
        if found is None:
            return None
        value, lowest = found
        if value.ndim != 4 or value.shape[1] != 1 or value.shape[0] != batch or value.shape[2:] != (length, keys):
            return None
        fill = blocked_fill(value[:, 0], attends[None, :, :] & sample[:, None, :], lowest)
        if fill is None:
            return None
        fills |= set() if fill is True else {fill}
    return fills


def _masks(batch: int, keys: int, *, one_size: bool) -> list[np.ndarray]:
    """The (batch, keys) 0/1 masks the check runs: all ones, all zeros, left and right padding of a different
    length per row, two random ones; at ``one_size`` also left and right padding shifted by 1, half and all the
    keys per row, and random masks of densities 0.1 to 0.9 (ten in all)."""
    rng = np.random.default_rng(keys * 31 + batch)
    rows = np.arange(batch)[:, None]
    cols = np.arange(keys)[None, :]
    shifts = (0, 1, keys // 2, keys) if one_size else (0,)
    densities = np.linspace(0.1, 0.9, 10) if one_size else (0.3, 0.7)
    return [np.ones((batch, keys), bool), np.zeros((batch, keys), bool),
            *(cols >= ((rows + shift) % (keys + 1)) for shift in shifts),         # left padding
            *(cols < keys - ((rows + shift) % (keys + 1)) for shift in shifts),   # right padding
            *(rng.random((batch, keys)) < density for density in densities)]


def padded_causal_mask_form(emit: Emitter, root: str, past: str | None, padding: str, dtype: int) -> str:
    """The causal mask of ``root``'s length S after ``past``'s P positions (none without a cache) combined with the
    (batch, P + S) padding mask ``padding`` as transformers' LLaMA did, ORT's form for a 2-D mask, with the finite
    fill ``lowest``: ``Where(key - P > query or not mask, lowest, 1 - Cast(Expand(Unsqueeze(Unsqueeze(mask)))))``
    (the else branch is 0 wherever it is taken)."""
    sizes = emit.op("Shape", root)
    count = emit.op("Gather", sizes, emit.const("_index1", 1), axis=0, hint="length")
    before = emit.op("Gather", emit.op("Shape", past), emit.const("_index2", 2), axis=0, hint="past_length") \
        if past is not None else None
    total = emit.op("Add", before, count, hint="total_length") if before is not None else count
    batch, length, keys = (emit.op("Unsqueeze", value, emit.const("_axis0", [0]))
                           for value in (emit.op("Gather", sizes, emit.const("_index0", 0), axis=0), count, total))
    attends = emit.op("Cast", padding, to=onnx.TensorProto.BOOL, hint="attends")   # any nonzero value attends
    expanded = emit.op("Expand", emit.op("Unsqueeze", emit.op("Unsqueeze", attends, emit.const("_axis1", [1])),
                                         emit.const("_axis2", [2])),
                       emit.op("Concat", batch, emit.const("_one_dim", [1]), length, keys, axis=0),
                       hint="padding_mask")
    kind = to_torch(dtype)
    inverted = emit.op("Sub", emit.const("_one_f", torch.tensor(1.0, dtype=kind)), emit.op("Cast", expanded, to=dtype))
    one, zero = emit.const("_one", 1), emit.const("_zero", 0)
    queries = emit.op("Range", zero, count, one)
    shifted = emit.op("Range", emit.op("Neg", before), count, one) if before is not None else queries
    causal = emit.op("Greater", emit.op("Unsqueeze", shifted, emit.const("_axis0", [0])),
                     emit.op("Unsqueeze", queries, emit.const("_axis1", [1])), hint="causal_blocked")
    blocked = emit.op("Or", causal, emit.op("Not", expanded), hint="blocked")
    lowest = emit.const("_lowest", torch.tensor(torch.finfo(kind).min, dtype=kind))
    return emit.op("Where", blocked, lowest, inverted, hint="padded_causal_mask")
