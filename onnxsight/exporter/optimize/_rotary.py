"""LLaMA-style attention (rotary embeddings, a causal mask) in the form ONNX Runtime's rotary fusers match.

ONNX Runtime fuses a LLaMA decoder's attention in two steps (``fusion_rotary_attention.py``, run for
``model_type="gpt2"`` and its relatives): ``FusionRotaryEmbeddings`` turns ``x * cos + rotate_half(x) *
sin`` into ``RotaryEmbedding``, then ``FusionRotaryAttention`` turns each layer into one
``MultiHeadAttention`` (with the past K/V of a cache where K and V are ``Concat(past, new)``). Both
recognise the graph by how transformers' own traced exports computed their sizes at run time:
``rotate_half``'s halves sliced at ``Shape(x)[3] / 2``, cos/sin gathered from a ``Constant`` cache sliced
to ``Shape(...)[1]`` rows (or computed "on the fly" from ``inv_freq``), every Q/K/V/output ``Reshape``
shaped by ``Concat(Shape(hidden)[0], Shape(hidden)[1], ...)``, and the mask as transformers built it from
a 2-D padding mask (``Where(.., .., 1 - Cast(Expand(Unsqueeze(Unsqueeze(mask)))))``). The translated graph
has those sizes folded to constants (static shapes: ``_rotary_tables.py``; a static step over a KV cache takes
the on-the-fly cos/sin of ``_rotary_dynamic.py`` from its position ids folded at export) or computed its own way
(dynamic shapes: ``_rotary_dynamic.py``). This pass, run once after the others, writes them in that form, computing the same
numbers: the mask is the causal one (its padding part all ones: no input carries a mask; or a padding mask
input's, checked and written with a finite fill by ``_rotary_padding.py``), cos/sin the model's for its positions.

It only rewrites a layer whose fused ops would compute what the graph does: one K/V head per Q head
(no grouped-query ``Expand``), the scale ``1/sqrt(head size)`` (half precision's Q and K scaled each by its
root are written as the division: ``_rotary_scores.py``), a mask that is exactly causal (after the
past positions of a cache), and cos/sin whose two halves are equal (``cat(freqs, freqs)``, which
``RotaryEmbedding``'s half-width cache assumes). The FX values a rewrite replaces (cos and sin per layer)
are compared through the values that hold them now where those have the same shape (a batch of one,
static sizes), and listed as optimised away otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._attention import _guarded_softmax
from onnxsight.exporter.optimize._decoder import causal_fill
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, attribute, parent
from onnxsight.exporter.optimize._rope23 import rotate_half
from onnxsight.exporter.optimize._rotary_dynamic import (
    Sizes,
    causal_mask_form,
    on_the_fly_tables,
    root_sizes,
    rotary_source,
)
from onnxsight.exporter.optimize._rotary_padding import padded_causal_fill, padded_causal_mask_form
from onnxsight.exporter.optimize._rotary_scores import divided, scores
from onnxsight.exporter.optimize._rotary_tables import constant_tables, evaluate, gathered_tables, padding_mask_form
from onnxsight.exporter.optimize._sized_mask import causal_fill_at_sizes, offset_causal_fill


@dataclass
class _Rope:
    """One ``x * cos + rotate_half(x) * sin``: its x (a Transpose to heads-first), the two Muls, the halves."""

    x: onnx.NodeProto
    with_cos: onnx.NodeProto
    with_sin: onnx.NodeProto
    first_half: onnx.NodeProto
    second_half: onnx.NodeProto


@dataclass
class _Layer:
    root: str                                  # the hidden state Q, K and V are projected from
    shape: tuple[int | str, ...]               # Q/K/V per head: (batch, length, heads, head size); symbols for
                                               # sizes known at run time only
    reshapes: list[onnx.NodeProto]             # Q, K, V to heads
    merge: onnx.NodeProto                      # heads back to (batch, length, hidden)
    projection: onnx.NodeProto                 # the output projection's MatMul
    ropes: list[_Rope]                         # Q's, K's
    add_mask: onnx.NodeProto
    fill: float
    residual: onnx.NodeProto
    softmax: onnx.NodeProto
    guard: onnx.NodeProto | None               # torch's fully-masked-row guard (a mask computed at run time)
    past: str | None                           # the past keys K is appended to (a KV cache), or None
    padding: str | None = None                 # the graph input of a (batch, keys) padding mask combined with the
                                               # causal one (``_rotary_padding``), or None
    prescaled: onnx.NodeProto | None = None    # the MatMul of Q and K^T each scaled by E**-0.25 (half precision),
                                               # rewritten as (Q K^T) / sqrt(E), the form ORT matches; or None


def llama_rotary_attention(graph: Graph, padding_inputs: dict[tuple[str, str], int] | None = None) -> int:
    """Rewrite each matching attention layer's sizes, rotary halves, cos/sin and mask into ORT's form;
    ``padding_inputs`` counts the layers whose mask now combines a padding mask from a graph input with a finite
    fill (a fully masked row averages the values: the note ONX008)."""
    padded: dict[str, tuple[float, str] | None] = {}   # each layer reads one mask: check it once
    layers = [layer for softmax in list(graph.nodes) if (layer := _match(graph, softmax, padded)) is not None]
    layers = [layer for layer in layers if _kind(layer) == _kind(layers[0])]
    emit = Emitter(graph)
    forms = (_constant_forms(emit, layers) or _run_time_forms(emit, layers)) if layers else None
    if forms is None:
        return 0
    cos, sin, masks, sizes = forms
    emit.place(min((n for layer in layers for n in layer.reshapes), key=graph.nodes.index))
    batch, length = layers[0].shape[:2]
    for layer in layers:
        _shape_paths(emit, layer, sizes if layer.root == sizes.root else None)
        for rope in layer.ropes:
            _halves_from_shape(emit, rope)
            _unshaped(graph, rope)
            for mul, value in ((rope.with_cos, cos), (rope.with_sin, sin)):
                _read(graph, mul, value, (batch, 1, length, layer.shape[3]))
        graph.set_input(layer.add_mask, 1, masks[(_past_length(graph, layer.past), layer.padding)])
        # NOTE: counted where this pass drops torch's guard; a guard already gone went with BERT's additive form
        # (``_padding``: a step of one token at static sizes, whose mask is the padding alone), counted there
        if layer.padding is not None and layer.guard is not None and padding_inputs is not None:
            key = (layer.padding, str(to_torch(graph.elem_type(layer.add_mask.output[0]))).removeprefix("torch."))
            padding_inputs[key] = padding_inputs.get(key, 0) + 1
        if layer.prescaled is not None:
            divided(emit, layer.prescaled, layer.add_mask, int(layer.shape[3]))
        if layer.guard is not None:  # a causal mask masks no whole row; a padded one's finite fill averages it
            graph.replace_uses(layer.guard.output[0], layer.softmax.output[0])
        if layer.residual.input[0] == layer.projection.output[0]:  # ORT reads the projection as the second input
            layer.residual.input[0], layer.residual.input[1] = layer.residual.input[1], layer.residual.input[0]
    return len(layers)


def _unshaped(graph: Graph, rope: _Rope) -> None:
    """Drop the declared shape of the rotary's sum (``q_embed``, ``k_embed``): ORT's rotary fusion gives its name to
    ``RotaryEmbedding``'s (batch, length, hidden) output and keeps this (batch, heads, length, head size) shape, which
    every session of the fused model then warns about ("Error merging shape info for output")."""
    for reader in graph.readers.get(rope.with_cos.output[0], ()):
        info = graph.infos.get(reader.output[0]) if reader.op_type == "Add" else None
        if info is not None and reader.output[0] not in graph.pinned:
            info.type.tensor_type.ClearField("shape")


def _kind(layer: _Layer) -> tuple:
    """What the layers rewritten together share: their sizes, the mask's fill, a cache or none."""
    return layer.shape[:2], layer.fill, layer.past is None, layer.padding


_Forms = tuple[str, str, dict[tuple, str], Sizes]   # cos, sin, the mask per (past length (None: no cache),
                                                    # padding input), the first layer's sizes (its Reshape shapes read them too)


def _constant_forms(emit: Emitter, layers: list[_Layer]) -> _Forms | None:
    """A sequence length known at export, no cache: cos/sin gathered from a constant cache, the causal mask from
    an all-ones padding mask (constants where the batch is known too) or from the padding mask input
    (``_rotary_padding``); None where the length is not known or cos/sin are not constants."""
    batch, length = layers[0].shape[:2]
    if not isinstance(length, int) or layers[0].past is not None:
        return None
    tables = constant_tables(emit.graph, [(r.with_cos, r.with_sin) for layer in layers for r in layer.ropes],
                             length, int(layers[0].shape[3]))
    if tables is None:
        return None
    sizes = root_sizes(emit, layers[0].root)
    cos, sin = gathered_tables(emit, sizes, tables, batch, length)
    dtype = emit.graph.elem_type(layers[0].add_mask.output[0])
    padding = layers[0].padding
    mask = padding_mask_form(emit, length, layers[0].fill, dtype) if padding is None \
        else padded_causal_mask_form(emit, layers[0].root, None, padding, dtype)
    return cos, sin, {(None, padding): mask}, sizes


def _run_time_forms(emit: Emitter, layers: list[_Layer]) -> _Forms | None:
    """Sizes known at run time (or a cache): cos/sin computed from the model's positions and inv_freq, the causal
    mask from the sizes; None where cos/sin are not LLaMA's rotary arithmetic."""
    graph = emit.graph
    source = rotary_source(graph, [(r.with_cos, r.with_sin) for layer in layers for r in layer.ropes],
                           int(layers[0].shape[3]))
    if source is None:
        return None
    sizes = root_sizes(emit, layers[0].root)
    cos, sin = on_the_fly_tables(emit, sizes, source)
    dtype = graph.elem_type(layers[0].add_mask.output[0])
    # NOTE: each layer's keys are its own past plus the new ones, and torch.export may name the past lengths of a
    # cache's layers apart (the graph then runs only where they are equal). Where every layer added the same
    # mask, one mask read from the first layer's past is that mask wherever the graph runs (each layer's scores
    # had as many keys as it); else one mask per past length. A padding input gets its own form (_rotary_padding).
    masks: dict[tuple, str] = {}
    shared = len({layer.add_mask.input[1] for layer in layers}) == 1
    for layer in layers:
        key = (_past_length(graph, layer.past), layer.padding)
        if key in masks:
            continue
        if shared and masks:
            masks[key] = masks[next(iter(masks))]
        elif layer.padding is None:
            masks[key] = causal_mask_form(emit, sizes, layer.past, layer.fill, dtype)
        else:
            masks[key] = padded_causal_mask_form(emit, layers[0].root, layer.past, layer.padding, dtype)
    return cos, sin, masks, sizes


def _past_length(graph: Graph, past: str | None) -> object:
    """The size symbol of ``past``'s length (axis 2), its name where it has none; None without a cache."""
    if past is None:
        return None
    shape = graph.symbolic_shape(past)
    return shape[2] if shape is not None else past


def _read(graph: Graph, mul: onnx.NodeProto, value: str, shape: tuple[int, ...]) -> None:
    """``mul`` reads the gathered ``value`` as its second input. The value it read before is compared through
    the new one where both have one shape; with a batch of several rows the new one has a row per batch row
    (ORT's RotaryEmbedding wants a position id per row), and the old value is then left to dead code."""
    old = mul.input[1]
    if graph.static_shape(old) == shape:
        graph.replace_uses(old, value)
    else:
        graph.set_input(mul, 1, value)


def _transpose(graph: Graph, name: str | None, perm: list[int]) -> onnx.NodeProto | None:
    """The Transpose of ``perm`` making ``name``."""
    found = graph.made_by(name, "Transpose") if name else None
    return found if found is not None and attribute(found, "perm") == perm else None


def _projected(graph: Graph, heads: onnx.NodeProto | None) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
    """(Reshape, MatMul) of ``MatMul(hidden, W) -> Reshape(B, L, H, E) -> heads``."""
    reshape = parent(graph, heads, 0, "Reshape")
    matmul = parent(graph, reshape, 0, "MatMul")
    return None if matmul is None else (reshape, matmul)


def _match(graph: Graph, softmax: onnx.NodeProto, padded: dict[str, tuple[float, str] | None]) -> _Layer | None:
    """The attention layer around ``softmax``, where it has LLaMA's form with a causal mask (a constant, or
    computed at run time from the sizes alone, or combined with a padding mask from an input: ``padded`` holds the
    verdicts of ``padded_causal_fill`` per mask)."""
    if softmax.op_type != "Softmax" or softmax.domain or attribute(softmax, "axis", -1) not in (-1, 3):
        return None
    add_mask = parent(graph, softmax, 0, "Add")
    found = scores(graph, add_mask)
    shape = graph.symbolic_shape(add_mask.input[0]) if found is not None else None
    if found is None or shape is None or len(shape) != 4:
        return None
    (q_reader, k_reader), prescaled = found
    attend, guard = _attend(graph, softmax)
    if attend is None or not _reads_only(graph, add_mask, softmax, guard):
        return None
    keys = _transpose(graph, k_reader.input[0 if prescaled else 1], [0, 1, 3, 2])
    (new_k, past_k), (new_v, past_v) = _appended(graph, keys, 0), _appended(graph, attend, 1)
    if (past_k is None) != (past_v is None) or (past_k is None and shape[-2] != shape[-1]):
        return None
    fill, padding = _causal_fill(graph, add_mask.input[1], shape, cached=past_k is not None), None
    if fill is None and add_mask.input[1] not in padded:
        padded[add_mask.input[1]] = padded_causal_fill(graph, add_mask.input[1], shape)
    if fill is None and (found := padded.get(add_mask.input[1])) is not None:
        fill, padding = found
    if fill is None:
        return None
    rope_q = _rope(graph, parent(graph, q_reader, 0, "Add"))
    rope_k = _rope(graph, graph.producer.get(new_k) if new_k else None)
    v = _projected(graph, _transpose(graph, new_v, [0, 2, 1, 3]))
    if rope_q is None or rope_k is None or v is None:
        return None
    q, k = _projected(graph, rope_q.x), _projected(graph, rope_k.x)
    if q is None or k is None or len({q[1].input[0], k[1].input[0], v[1].input[0]}) != 1:
        return None
    heads = graph.symbolic_shape(q[0].output[0])
    if heads is None or len(heads) != 4 or not all(isinstance(d, int) for d in heads[2:]) \
            or any(graph.symbolic_shape(p[0].output[0]) != heads for p in (k, v)):
        return None
    after = _output(graph, attend)
    if after is None:
        return None
    merge, projection, residual = after
    return _Layer(q[1].input[0], heads, [q[0], k[0], v[0]], merge, projection, [rope_q, rope_k], add_mask, fill,
                  residual, softmax, guard, past_k, padding, prescaled)


def _appended(graph: Graph, node: onnx.NodeProto | None, index: int) -> tuple[str | None, str | None]:
    """(the new keys or values ``node``'s input ``index`` is, the graph input of past ones they are appended to
    by ``Concat(past, new, axis=2)``, or None without a cache); (None, None) without a ``node``."""
    if node is None or len(node.input) <= index:
        return None, None
    name = node.input[index]
    concat = graph.producer.get(name)
    if concat is not None and concat.op_type == "Concat" and not concat.domain and len(concat.input) == 2 \
            and attribute(concat, "axis") in (2, -2) and concat.input[0] in graph.graph_inputs:
        return concat.input[1], concat.input[0]
    return name, None


def _reads_only(graph: Graph, add: onnx.NodeProto, softmax: onnx.NodeProto, guard: onnx.NodeProto | None) -> bool:
    """Whether ``add``'s output is read by ``softmax`` and, where there is one, the guard's row maximum only."""
    readers = graph.readers.get(add.output[0], [])
    row_max = graph.producer.get(graph.producer[guard.input[0]].input[0]) if guard is not None else None
    return add.output[0] not in graph.pinned and all(n is softmax or n is row_max for n in readers) \
        and any(n is softmax for n in readers)


def _attend(graph: Graph, softmax: onnx.NodeProto) -> tuple[onnx.NodeProto | None, onnx.NodeProto | None]:
    """(the MatMul of the attention weights with V, torch's guard between them or None)."""
    guard = graph.sole_reader(softmax.output[0], "Where")
    guard = guard if guard is not None and _guarded_softmax(graph, guard) is softmax else None
    weights = guard.output[0] if guard is not None else softmax.output[0]
    attend = graph.sole_reader(weights, "MatMul")
    if attend is None or attend.input[0] != weights or softmax.output[0] in graph.pinned:
        return None, None
    return attend, guard


def _causal_fill(graph: Graph, mask: str, shape: tuple[int | str, ...], *, cached: bool) -> float | None:
    """The masked-out value of the additive ``mask`` of scores of ``shape`` where it is exactly causal (after the
    past positions of a cache where ``cached``)."""
    value = graph.constant(mask)
    if value is None and isinstance(shape[-1], int):
        value = evaluate(graph, mask)   # a mask of constants left unfolded (bfloat16), else None
    if value is None:
        return causal_fill_at_sizes(graph, mask)
    if not isinstance(shape[-2], int) or not isinstance(shape[-1], int) or not has_data(value):
        return None
    if not cached:
        return causal_fill(value, shape[-2], shape[-1])
    fill = offset_causal_fill(value) if tuple(value.shape[-2:]) == tuple(shape[-2:]) else False
    return fill if not isinstance(fill, bool) else None   # a step of one token masks nothing: no fill to write


def _output(graph: Graph, attend: onnx.NodeProto) -> tuple[onnx.NodeProto, onnx.NodeProto, onnx.NodeProto] | None:
    """``attend -> Transpose(0, 2, 1, 3) -> Reshape(B, L, hidden) -> MatMul(W_o) -> Add(residual)``."""
    transpose = graph.sole_reader(attend.output[0], "Transpose")
    if transpose is None or attribute(transpose, "perm") != [0, 2, 1, 3]:
        return None
    merge = graph.sole_reader(transpose.output[0], "Reshape")
    projection = graph.sole_reader(merge.output[0], "MatMul") if merge is not None else None
    if projection is None or projection.input[0] != merge.output[0]:
        return None
    shape = graph.symbolic_shape(merge.output[0])
    residual = [n for n in graph.readers.get(projection.output[0], []) if n.op_type == "Add" and not n.domain]
    if shape is None or len(shape) != 3 or len(residual) != 1:
        return None
    return merge, projection, residual[0]


def _rope(graph: Graph, add: onnx.NodeProto | None) -> _Rope | None:
    """``Add(Mul(x, cos), Mul(Concat(Neg(x[..., E/2:]), x[..., :E/2]), sin))`` with x a heads-first Transpose."""
    with_cos, with_sin = parent(graph, add, 0, "Mul"), parent(graph, add, 1, "Mul")
    halves = rotate_half(graph, with_sin.input[0]) if with_sin is not None else None
    x = _transpose(graph, with_cos.input[0] if with_cos is not None else None, [0, 2, 1, 3])
    if x is None or halves is None or halves[0] != x.output[0] or graph.static_rank(x.output[0]) != 4:
        return None
    return _Rope(x, with_cos, with_sin, halves[1][0], halves[1][1])


def _shape_paths(emit: Emitter, layer: _Layer, sizes: Sizes | None) -> None:
    """Q/K/V's and the output's Reshape shaped by ``Concat(Unsqueeze(Gather(Shape(root), 0)), ... 1), ...)``: the
    first layer's from the ``sizes`` the forms read too, every other layer's from a ``Shape`` of its own root
    (``FusionRotaryAttention.check_runtime_shape_paths_for_nodes`` wants ``shape.input[0] == root_input``, the
    layer's Q/K/V MatMul input)."""
    graph = emit.graph
    if sizes is None:
        sizes = root_sizes(emit, layer.root)
    heads, width = layer.shape[2:]
    per_head = emit.op("Concat", sizes.batch_1d, sizes.length_1d, emit.const("_heads", [heads]),
                       emit.const("_head_size", [width]), axis=0)
    merged = emit.op("Concat", sizes.batch_1d, sizes.length_1d, emit.const("_hidden", [heads * width]), axis=0)
    emit.place(min(layer.reshapes, key=graph.nodes.index))
    for reshape in layer.reshapes:
        graph.set_input(reshape, 1, per_head)
    graph.set_input(layer.merge, 1, merged)


def _halves_from_shape(emit: Emitter, rope: _Rope) -> None:
    """rotate_half's Slices split at ``Unsqueeze(Shape(x)[3] / 2)``."""
    graph = emit.graph
    size = emit.op("Gather", emit.op("Shape", rope.x.output[0]), emit.const("_index3", 3), axis=0)
    half = emit.op("Unsqueeze", emit.op("Div", size, emit.const("_two", 2)), emit.const("_axis0", [0]))
    emit.place(min((rope.first_half, rope.second_half), key=graph.nodes.index))
    graph.set_input(rope.first_half, 2, half)
    graph.set_input(rope.second_half, 1, half)
