"""LLaMA attention exported with run-time sizes (dynamic batch and sequence) in ORT's rotary-attention form.

With ``dynamic_shapes`` the translated graph keeps what transformers computes at run time: the causal
mask (from ``arange``s, ``cumsum`` and comparisons, behind torch's fully-masked-row guard) and cos/sin
(``cos(cat(freqs, freqs)) * scaling`` with ``freqs = position_ids[..., None] * inv_freq``). Neither can be
folded into the constant tables and mask the static form uses (``_rotary.py``), so this module

- checks the mask causal by running its subgraph at sampled sizes (``_sized_mask``), where it reads the graph's inputs
  through ``Shape`` only (it then depends on the sizes alone), and drops the guard (a causal mask masks
  no whole row);
- recognises cos/sin by their arithmetic, and writes them in the "on-the-fly" form ORT's
  ``FusionRotaryEmbeddings`` matches (``Mul(Cos(Concat(Transpose(MatMul(inv_freq, positions)))),
  scaling)``, from which the fuser builds its own cos/sin caches from ``inv_freq`` and ``scaling``);
- writes the causal mask as transformers combined it with an all-ones padding mask, from ``Shape``.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
import torch

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, attribute, parent

@dataclass(frozen=True)
class RotarySource:
    """cos/sin as the model computes them: ``cos(cat(freqs, freqs)) * scale``, ``freqs = positions[..., None] *
    inv_freq``."""

    positions: str     # (length,) or (1 or batch, length) int64 position ids; or, where ``known``, their float
                       # (1, length, 1) constant
    inv_freq: str      # (head size / 2,) float32 initializer
    scale: float
    known: tuple[int, ...] | None = None   # the position ids where they are known at export (static sizes: a
                                           # step over a KV cache of a fixed length starts at its past length)
    cast: int | None = None                # the dtype cos/sin are cast to from float32 (a half-precision model)


def rotary_source(graph: Graph, muls: list[tuple[onnx.NodeProto, onnx.NodeProto]], head_size: int) \
        -> RotarySource | None:
    """The one source every ``(x * cos, rotate_half(x) * sin)`` pair of ``muls`` reads its cos and sin from
    (as their second input, unsqueezed on axis 1), where it is LLaMA's rotary arithmetic; None otherwise."""
    found = set()
    for with_cos, with_sin in muls:
        cos, sin = _trig(graph, with_cos, "Cos"), _trig(graph, with_sin, "Sin")
        if cos is None or sin is None or cos != sin:
            return None
        source = _frequencies(graph, cos[0], head_size)
        if source is None:
            return None
        found.add(RotarySource(source[0], source[1], cos[1], source[2], cos[2]))
    return found.pop() if len(found) == 1 else None


def _trig(graph: Graph, mul: onnx.NodeProto, op_type: str) -> tuple[str, float, int | None] | None:
    """(the angles, the scale, the dtype cast to or None) of ``mul``'s second input ``Unsqueeze(op_type(angles) *
    scale, 1)``, or ``Unsqueeze(Cast(op_type(angles) * scale), 1)`` from float32 (transformers computes cos/sin of
    a half-precision model in float32)."""
    unsqueeze = parent(graph, mul, 1, "Unsqueeze")
    if unsqueeze is None or len(unsqueeze.input) < 2 or graph.ints(unsqueeze.input[1]) != [1]:
        return None
    node, scale, cast = graph.producer.get(unsqueeze.input[0]), 1.0, None
    if node is not None and node.op_type == "Cast" and not node.domain \
            and graph.elem_type(node.input[0]) == onnx.TensorProto.FLOAT:
        node, cast = graph.producer.get(node.input[0]), attribute(node, "to")
    if node is not None and node.op_type == "Mul" and not node.domain:
        for index in (1, 0):
            value, trig = graph.scalar(node.input[index]), graph.producer.get(node.input[1 - index])
            if value is not None and trig is not None and trig.op_type == op_type:
                node, scale = trig, value
                break
    if node is None or node.op_type != op_type or node.domain:
        return None
    return node.input[0], scale, cast


def _through(graph: Graph, name: str, *op_types: str) -> str:
    """``name`` read back through nodes of ``op_types`` that pass their first input on."""
    node = graph.producer.get(name)
    while node is not None and node.op_type in op_types and not node.domain:
        if node.op_type == "Cast" and attribute(node, "to") != onnx.TensorProto.FLOAT:
            break
        name = node.input[0]
        node = graph.producer.get(name)
    return name


def _frequencies(graph: Graph, angles: str, head_size: int) -> tuple[str, str, tuple[int, ...] | None] | None:
    """(positions, inv_freq, the positions' values where known) of ``angles = Concat(f, f, axis=-1)``, ``f =
    float(positions[..., None]) * inv_freq``, with inv_freq a float32 (head size / 2,) initializer and positions
    (rows, length) or (length,) int64 (then ``positions[None, :, None]``), or, with sizes fixed at export, the
    float (1, length, 1) constant they were folded to."""
    concat = graph.made_by(angles, "Concat")
    mul = parent(graph, concat, 0, "Mul")
    if mul is None or len(concat.input) != 2 or concat.input[0] != concat.input[1] \
            or attribute(concat, "axis") not in (-1, 2):
        return None
    for index in (1, 0):
        inv = _through(graph, mul.input[index], "Identity", "Cast")
        weights = graph.constant(inv)
        # NOTE: a half-precision inv_freq (a model moved with .half()) is read through a Cast to float32
        if weights is None or not weights.dtype.is_floating_point or tuple(weights.shape) != (head_size // 2,) \
                or graph.elem_type(mul.input[index]) != onnx.TensorProto.FLOAT:
            continue
        known = _known_positions(graph, mul.input[1 - index])
        if known is not None:
            return mul.input[1 - index], inv, known
        cast = parent(graph, mul, 1 - index, "Cast")
        unsqueeze = parent(graph, cast, 0, "Unsqueeze")
        if cast is None or attribute(cast, "to") != onnx.TensorProto.FLOAT or unsqueeze is None:
            return None
        axes = graph.ints(unsqueeze.input[1]) if len(unsqueeze.input) > 1 else None
        positions = unsqueeze.input[0]
        shape = graph.symbolic_shape(positions)
        wanted = {1: ([0, 2], [0, -1]), 2: ([2], [-1])}.get(len(shape) if shape is not None else 0, ())
        if axes not in wanted or graph.elem_type(positions) != onnx.TensorProto.INT64:
            return None
        return positions, inv, None
    return None


def _known_positions(graph: Graph, name: str) -> tuple[int, ...] | None:
    """The position ids a float32 (1, length, 1) constant holds (``float(positions[:, :, None])`` folded at
    export), where they are whole numbers from 0; None otherwise."""
    value = graph.constant(name)
    if value is None or not has_data(value) or value.dtype != torch.float32 or value.dim() != 3 \
            or value.shape[0] != 1 or value.shape[2] != 1:
        return None
    ids = value.reshape(-1)
    if not bool((ids >= 0).all()) or not torch.equal(ids, ids.round()):
        return None
    return tuple(int(v) for v in ids.tolist())


@dataclass
class Sizes:
    """``Shape(root)``'s batch and length, written once for the forms and the first layer's Reshape shapes (ORT's
    ``FusionRotaryAttention`` matches each layer's shapes by name from its own ``Shape(root)``, and removes none of
    these nodes: the dead ones go in its prune): the scalars (``Gather``) and the 1-D shape pieces (``Unsqueeze``)."""

    root: str
    batch: str
    length: str
    batch_1d: str
    length_1d: str
    batch_length: str | None = None   # Concat(batch_1d, length_1d), written where a form needs it

    def pair(self, emit: Emitter) -> str:
        """``Concat(batch, length)``: the (batch, length) shape, one node for the forms that read it."""
        if self.batch_length is None:
            self.batch_length = emit.op("Concat", self.batch_1d, self.length_1d, axis=0)
        return self.batch_length


def root_sizes(emit: Emitter, root: str) -> Sizes:
    """``Unsqueeze(Gather(Shape(root), i))`` for the batch (i = 0) and the length (i = 1)."""
    shape = emit.op("Shape", root)
    batch, length = (emit.op("Gather", shape, emit.const(f"_index{i}", i), axis=0) for i in (0, 1))
    return Sizes(root, batch, length, *(emit.op("Unsqueeze", v, emit.const("_axis0", [0])) for v in (batch, length)))


def on_the_fly_tables(emit: Emitter, sizes: Sizes, source: RotarySource) -> tuple[str, str]:
    """cos and sin of (batch, 1, length, head size), one position id row per batch row, computed as
    ``Unsqueeze(Mul(Cos(Concat(Transpose(MatMul(inv_freq, positions)))), scale), 1)``."""
    # NOTE: RotaryEmbedding wants one row of position ids per batch row
    ids = source.positions if source.known is None else emit.const("_position_ids", [list(source.known)])
    positions = emit.op("Expand", ids, sizes.pair(emit), hint="position_ids")
    columns = emit.op("Cast", emit.op("Unsqueeze", positions, emit.const("_axis1", [1])), to=onnx.TensorProto.FLOAT)
    # NOTE: inv_freq as a (1, head size / 2, 1) constant of its own: the fuser reads MatMul's first input back
    # through Unsqueeze/Cast/Expand to an initializer, and takes the initializer itself where there is no node
    rows = emit.const("_inv_freq_column", emit.graph.constant(source.inv_freq).float().reshape(1, -1, 1).clone())
    freqs = emit.op("Transpose", emit.op("MatMul", rows, columns), perm=[0, 2, 1], hint="freqs")
    angles = emit.op("Concat", freqs, freqs, axis=-1, hint="emb")
    scale = emit.const("_rotary_scale", torch.tensor(source.scale, dtype=torch.float32))
    out = []
    for op in ("Cos", "Sin"):
        value = emit.op("Mul", emit.op(op, angles), scale)
        if source.cast is not None:   # ORT's fuser takes the Cast of a half-precision model's cos/sin
            value = emit.op("Cast", value, to=source.cast)
        out.append(emit.op("Unsqueeze", value, emit.const("_axis1", [1]), hint=op.lower()))
    return out[0], out[1]


def all_attend(emit: Emitter, blocked: str, fill: float, dtype: int) -> str:
    """``Where(blocked, fill, 1 - Cast(Expand(Unsqueeze(Unsqueeze(ones)))))``: a causal mask as transformers combined it
    with a padding mask of ones, its padding part of shape (1, 1, 1, 1) (it broadcasts over the batch, queries and
    keys). ``FusionRotaryAttention`` matches ``Where -> Sub -> Cast -> Expand -> Unsqueeze -> Unsqueeze`` and reads
    only the ``Where``'s output: the padding mask itself, and the shape it is expanded to, are constants here."""
    kind = to_torch(dtype)
    masked = emit.const("_masked", torch.tensor(fill, dtype=kind))
    ones = emit.const("_one_row", [[1]])
    expanded = emit.op("Expand", emit.op("Unsqueeze", emit.op("Unsqueeze", ones, emit.const("_axis1", [1])),
                                         emit.const("_axis2", [2])), emit.const("_ones_shape", [1, 1, 1, 1]))
    inverted = emit.op("Sub", emit.const("_one_f", torch.tensor(1.0, dtype=kind)), emit.op("Cast", expanded, to=dtype))
    return emit.op("Where", blocked, masked, inverted, hint="causal_mask")


def _past_length_of(emit: Emitter, past: str) -> str:
    """``past``'s length (axis 2) as an int64 scalar: the graph's own ``Squeeze(Shape(past, start=2, end=3))`` or
    ``Gather(Shape(past), 2)`` where it has one, else a new ``Gather(Shape(past), 2)``."""
    graph = emit.graph
    for shape in graph.readers.get(past, []):
        if shape.op_type != "Shape" or shape.domain or shape not in graph.nodes:
            continue
        start, end = attribute(shape, "start", 0), attribute(shape, "end", None)
        for node in graph.readers.get(shape.output[0], []):
            if node.domain or node not in graph.nodes:
                continue
            if node.op_type == "Squeeze" and start in (2, -2) and end in (3, -1) \
                    and (len(node.input) < 2 or graph.ints(node.input[1]) == [0]):
                return node.output[0]
            if node.op_type == "Gather" and start == 0 and end is None and attribute(node, "axis", 0) == 0 \
                    and graph.scalar(node.input[1]) == 2 and graph.static_rank(node.input[1]) == 0:
                return node.output[0]
    return emit.op("Gather", emit.op("Shape", past), emit.const("_index2", 2), axis=0, hint="past_length")


def causal_mask_form(emit: Emitter, sizes: Sizes, past: str | None, fill: float, dtype: int) -> str:
    """The causal mask of ``sizes.root``'s length S after ``past``'s P positions (none without a cache) as
    transformers combined it with an all-ones padding mask: ``Where(key > P + query, fill, 1 - Cast(Expand(
    Unsqueeze(Unsqueeze(ones)))))``, of shape (1, 1, S, P + S)."""
    one = emit.const("_one", 1)
    count = sizes.length
    if past is not None:
        before = _past_length_of(emit, past)
        total = emit.op("Add", before, count, hint="total_length")
        keys, queries = emit.op("Range", emit.const("_zero", 0), total, one), emit.op("Range", before, total, one)
    else:
        keys = queries = emit.op("Range", emit.const("_zero", 0), count, one)
    blocked = emit.op("Greater", emit.op("Unsqueeze", keys, emit.const("_axis0", [0])),
                      emit.op("Unsqueeze", queries, emit.const("_axis1", [1])), hint="causal_blocked")
    return all_attend(emit, blocked, fill, dtype)
