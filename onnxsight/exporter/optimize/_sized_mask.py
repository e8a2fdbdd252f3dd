"""Attention masks computed from the sizes of the graph's inputs, checked by running them at many sizes.

With ``dynamic_shapes``, transformers builds a decoder's causal mask at run time
(``arange``, index arithmetic, comparisons, ``Expand``) from the batch and sequence
sizes, so no pass can fold it to a constant and read it. Where every graph input
that the mask's subgraph reads is read by ``Shape`` only, the mask is a function
of the input sizes alone: this module runs that subgraph with ONNX's reference
implementation at a set of sizes and says whether it is the causal mask at each,
or masks no whole row at any. A causal mask over as many keys as queries is then
computed in seven nodes (``compact_causal_masks``), a mask masking no whole row
loses torch's fully-masked-row guard (``unguarded_sized_masks``), and the GPT-2
and LLaMA forms (``_decoder``, ``_rotary``) ask ``causal_fill_at_sizes``.

That is a check at sample sizes, not a proof. A mask that changes its form at some
size (a sliding window, causal only below its width) holds that size as an integer
constant, so each small integer constant of the subgraph adds the sizes around it to
the samples, and a subgraph holding a larger one (other than a ``Slice`` end meaning
"to the end") is not accepted.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np
import onnx
import torch

from onnxsight.exporter._builder import torch_to_tensor_proto
from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._attention import guarded_adds
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph

_SIZES = (1, 2, 3, 8)          # each symbol takes each of these (every combination)
_LARGEST = 256                 # sizes sampled around constants up to this; a larger constant is refused
_TO_THE_END = 2 ** 31 - 1      # Slice ends from here up mean "to the end", not a size
_MAX_NODES = 400
_RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


def compact_causal_masks(graph: Graph) -> int:
    """``Where(cond, 0, -inf)`` with ``cond`` transformers' run-time causal mask over as many keys as queries (about
    90 nodes of ``Range``/``Mod``/``GatherND``/comparisons for GPT-2) -> ``Where(Range(L) <= Range(L)[:, None], 0,
    -inf)``, L read from the graph input that holds it: seven nodes for all layers, the same values at every size
    (checked at the sizes sampled)."""
    done = 0
    made: dict[tuple[str, ...], str | None] = {}   # Where's inputs -> the compact mask (None: left as it is)
    emit = Emitter(graph)
    for where in list(graph.nodes):
        if where.op_type != "Where" or not _is_mask(graph, where.output[0]) or where.output[0] in graph.pinned \
                or graph.constant(where.input[0]) is not None:
            continue
        if not all(_attention_scores(graph, r) for r in graph.readers.get(where.output[0], [])):
            continue
        key = tuple(where.input)
        if key not in made:
            made[key] = _compact(emit, where)
        if made[key] is not None:
            graph.replace_uses(where.output[0], made[key])
            done += 1
    return done


def _attention_scores(graph: Graph, add: onnx.NodeProto) -> bool:
    """Whether ``add`` is ``scores + mask`` before a Softmax: scores are (batch, heads, queries, keys) in full, so
    a mask of (queries, keys) gives the sum the shape a (batch, 1, queries, keys) one gave."""
    return add.op_type == "Add" and not add.domain \
        and any(r.op_type == "Softmax" for r in graph.readers.get(add.output[0], []))


def _compact(emit: Emitter, where: onnx.NodeProto) -> str | None:
    graph = emit.graph
    shape = graph.symbolic_shape(where.input[0])
    if shape is None or len(shape) < 2 or shape[-1] != shape[-2] or not isinstance(shape[-1], str):
        return None
    source = next(((name, axis) for name in sorted(graph.graph_inputs) for axis, d in
                   enumerate(graph.symbolic_shape(name) or ()) if d == shape[-1]), None)
    if source is None or causal_fill_at_sizes(graph, where.output[0], shape[-1]) is None:
        return None
    length = emit.op("Gather", emit.op("Shape", source[0]), emit.const("_axis", source[1]), hint="length")
    positions = emit.op("Range", emit.const("_zero", 0), length, emit.const("_one", 1), hint="positions")
    keep = emit.op("LessOrEqual", emit.op("Unsqueeze", positions, emit.const("_axis0", [0])),
                   emit.op("Unsqueeze", positions, emit.const("_axis1", [1])), hint="causal")
    mask = emit.op("Where", keep, where.input[1], where.input[2], hint="causal_mask")
    emit.place(None)   # they read graph inputs and constants only
    return mask


def unguarded_sized_masks(graph: Graph) -> int:
    """Where(Equal(RowMax(S), -inf), 0, Softmax(S)) -> Softmax(S) for S = X + M, M computed at run time from the
    input sizes (a dynamic decoder's causal mask, with or without a KV cache) and masking no whole row at any size
    sampled; the constant masks are ``_attention.constant_masks``'s."""
    done = 0
    verdicts: dict[tuple[str, ...], bool] = {}   # each layer makes the same mask additive: run it once
    for where, softmax, add in guarded_adds(graph):
        masks = [name for name in add.input if graph.constant(name) is None and _is_mask(graph, name)]
        if len(masks) != 1:
            continue
        key = tuple(graph.producer[masks[0]].input)
        if key not in verdicts:
            verdicts[key] = masks_no_row_at_sizes(graph, masks[0])
        if verdicts[key]:
            graph.replace_uses(where.output[0], softmax.output[0])
            done += 1
    return done


def _is_mask(graph: Graph, name: str) -> bool:
    """``Where(cond, 0, -inf)``: a bool mask made additive (sdpa's translation), the form checked here."""
    node = graph.made_by(name, "Where")
    return node is not None and len(node.input) == 3 and graph.scalar(node.input[1]) == 0.0 \
        and graph.scalar(node.input[2]) == -math.inf


def causal_fill_at_sizes(graph: Graph, mask: str, length: str | int | None = None) -> float | None:
    """The masked-out value of the additive float mask ``mask`` where, at every size sampled (every combination of
    small sizes, and sizes around each integer constant of its subgraph, so a sliding window shows), it is exactly
    causal: query i (of S) attends the keys up to i + T - S (of T: a cache of T - S past positions before the S new
    ones), every other key masked by one value of at most the dtype's lowest, the same for every batch row and head.
    ``length``: S, with as many keys (T == S), a symbol of an input's dims (an int: a length fixed at export, the batch
    dynamic); None: any S and T. None where it is not causal, or not computed from the sizes of graph inputs alone
    (it reads an input's values: a padding mask)."""
    runs = mask_at_sizes(graph, mask, required=length if isinstance(length, str) else None)
    if runs is None:
        return None
    fills = set()
    for sizes, value in runs:
        rows = sizes[length] if isinstance(length, str) else length
        if rows is not None and (value.dtype.kind != "f" or not 2 <= value.ndim <= 4
                                 or value.shape[-2:] != (rows, rows)):
            return None
        fill = offset_causal_fill(value)
        if fill is False:
            return None
        fills |= set() if fill is True else {fill}
    return fills.pop() if len(fills) == 1 else None


def masks_no_row_at_sizes(graph: Graph, mask: str) -> bool:
    """Whether the additive float mask ``mask``, computed from the sizes of graph inputs alone, leaves at least one
    key to every query (no row -inf throughout) at every size sampled: torch's fully-masked-row guard then has
    nothing to do (a causal mask, with or without a KV cache's past)."""
    runs = mask_at_sizes(graph, mask)
    return runs is not None and all(value.dtype.kind == "f" and value.ndim >= 1
                                    and not np.isneginf(value).all(axis=-1).any() for _, value in runs)


def mask_at_sizes(graph: Graph, mask: str,
                  required: str | None = None) -> list[tuple[dict[str, int], np.ndarray]] | None:
    """``mask``'s value at each size sampled (symbol -> size), where it is computed from the sizes of graph inputs
    alone (``required``: a symbol that must be one of their dims) and ONNX's reference implementation runs it."""
    found = mask_subgraph(graph, mask)
    # no input's values read (a padding mask's): a function of sizes
    if found is None or found[2] or not found[1] \
            or any(graph.symbolic_shape(n) is None or graph.elem_type(n) is None for n in found[1]):
        return None
    body, inputs, _ = found
    symbols = sorted({d for name in inputs for d in graph.symbolic_shape(name) if isinstance(d, str)})
    samples = sampled_sizes(graph, body, symbols) if symbols and required in (None, *symbols) else None
    if samples is None:
        return None
    runs = []
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(subgraph_model(graph, body, inputs, mask))
        for sizes in samples:
            runs.append((sizes, np.asarray(evaluator.run(None, zeros(graph, inputs, sizes))[0])))
    except Exception:  # noqa: BLE001 - a mask the reference cannot run is left as it is
        return None
    return runs


def mask_subgraph(graph: Graph, mask: str, leaf: Callable[[str], bool] | None = None, *, weights: bool = False) \
        -> tuple[list[onnx.NodeProto], list[str], list[str]] | None:
    """(the nodes computing ``mask`` in graph order, the graph inputs they read through ``Shape`` only, the graph
    inputs whose values they read), where every constant is an exporter constant (or, with ``weights``, a weight)
    with data and no node is random, of another domain or holds a subgraph; else None. ``leaf``: which other values
    are taken for inputs (the walk stops there)."""
    nodes: dict[int, onnx.NodeProto] = {}
    inputs: set[str] = set()
    stack, seen = [mask], set()
    while stack:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        tensor = graph.constant(name)
        if tensor is not None:
            if (name in graph.weights and not weights) or not has_data(tensor):
                return None   # a weight a checkpoint may replace at save(), or no data to run
            continue
        if name in graph.graph_inputs or (leaf is not None and leaf(name)):
            inputs.add(name)
            continue
        node = graph.producer.get(name)
        if node is None or node.domain or node.op_type in _RANDOM or len(nodes) >= _MAX_NODES \
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        nodes[id(node)] = node
        stack.extend(node.input)
    by_value = {n for node in nodes.values() if node.op_type != "Shape" for n in node.input if n in inputs}
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    return sorted(nodes.values(), key=lambda n: order[id(n)]), sorted(inputs - by_value), sorted(by_value)


def sampled_sizes(graph: Graph, body: list[onnx.NodeProto], symbols: list[str],
                  sizes: tuple[int, ...] = _SIZES) -> list[dict[str, int]] | None:
    """Each combination of ``sizes`` for ``symbols``, then each size around an integer constant of the subgraph
    ``body`` (a window width, say) for all of them; None where such a constant is too large to run the mask at."""
    near: set[int] = set()
    for node in body:
        for index, name in enumerate(node.input):
            tensor = graph.constant(name)
            if tensor is None or tensor.dtype.is_floating_point or tensor.dtype == torch.bool:
                continue
            for value in {abs(int(v)) for v in tensor.reshape(-1).tolist()}:
                if node.op_type == "Slice" and index in (1, 2) and value >= _TO_THE_END:
                    continue
                if value > _LARGEST:
                    return None
                if value > max(_SIZES):
                    near |= {value - 1, value, value + 1}
    return [dict(zip(symbols, combination)) for combination in itertools.product(sizes, repeat=len(symbols))] \
        + [{s: size for s in symbols} for size in sorted(near)]


def zeros(graph: Graph, names: list[str], sizes: dict[str, int]) -> dict[str, np.ndarray]:
    """Zeros of the shape (at ``sizes``: symbol -> size) and dtype of each of ``names``: the feeds of values read
    for their sizes alone."""
    return {name: np.zeros([sizes[d] if isinstance(d, str) else d for d in graph.symbolic_shape(name)],
                           onnx.helper.tensor_dtype_to_np_dtype(graph.elem_type(name))) for name in names}


def subgraph_model(graph: Graph, body: list[onnx.NodeProto], inputs: list[str], mask: str) -> onnx.ModelProto:
    """``body`` as a model of its own: ``inputs`` in, ``mask`` out, the constants it reads as initializers."""
    consts = sorted({n for node in body for n in node.input if graph.constant(n) is not None})
    proto = onnx.helper.make_graph(
        body, "sized_mask",
        [onnx.helper.make_tensor_value_info(n, graph.elem_type(n), [d if isinstance(d, int) else None
                                                                     for d in graph.symbolic_shape(n)])
         for n in inputs],
        [onnx.helper.make_tensor_value_info(mask, onnx.TensorProto.UNDEFINED, None)],
        initializer=[torch_to_tensor_proto(graph.constant(n), n) for n in consts])   # bfloat16 too
    opsets = [onnx.helper.make_opsetid(d, v) for d, v in graph.opset_imports.items()]
    return onnx.helper.make_model(proto, opset_imports=opsets)


def float_values(value: np.ndarray | torch.Tensor) -> tuple[np.ndarray, float] | None:
    """(``value`` as a numpy float array, its dtype's lowest) where it is a float array or tensor, bfloat16 included
    (onnx's reference evaluator gives ml_dtypes' bfloat16, which numpy does not take for a float, and torch's has no
    numpy form: read as float32, its lowest kept); None otherwise."""
    if isinstance(value, torch.Tensor):
        kind = value.dtype
        return (value.float().numpy(), float(torch.finfo(kind).min)) if kind.is_floating_point else None
    if np.issubdtype(value.dtype, np.floating):
        return value, float(np.finfo(value.dtype).min)
    if value.dtype.name == "bfloat16":
        return value.astype(np.float32), float(torch.finfo(torch.bfloat16).min)
    return None


def offset_causal_fill(value: np.ndarray | torch.Tensor) -> float | bool:
    """The fill of a causal (.., S, T) additive mask with T - S past keys; True where it masks nothing and
    should not (S == 1); False where it is not causal."""
    found = float_values(value)
    if found is None or found[0].ndim < 2:
        return False
    mask, lowest = found
    rows, cols = mask.shape[-2:]
    squares = mask.reshape(-1, rows, cols)
    if cols < rows or not (squares == squares[:1]).all():
        return False
    fill = blocked_fill(squares[0], causal(rows, cols), lowest)
    return False if fill is None else fill


def causal(rows: int, cols: int) -> np.ndarray:
    """Which of ``cols`` keys each of ``rows`` queries attends causally, the first ``cols - rows`` keys past ones."""
    return np.arange(cols)[None, :] <= np.arange(rows)[:, None] + (cols - rows)


def blocked_fill(mask: np.ndarray, keep: np.ndarray, lowest: float) -> float | bool | None:
    """The one value the additive ``mask`` holds wherever ``keep`` is False, where it is 0 wherever ``keep`` is True and
    that value is -inf or at most ``lowest``; True where ``keep`` blocks nothing; None otherwise."""
    if not (mask[keep] == 0).all():
        return None
    blocked = mask[~keep]
    if blocked.size == 0:
        return True
    fill = float(blocked[0])
    return fill if (blocked == fill).all() and (fill == -math.inf or fill <= lowest) else None
