"""Rotary embeddings written out (transformers' ``q * cos + rotate_half(q) * sin``) as one ONNX ``RotaryEmbedding``
(opset 23).

transformers' ``apply_rotary_pos_emb`` translates to seven nodes per Q and per K of each layer:

    Add(Mul(x, Unsqueeze(cos, 1)), Mul(Concat(Neg(Slice(x, D/2:)), Slice(x, :D/2)), Unsqueeze(sin, 1)))

with ``cos = Cos(Concat(freqs, freqs)) [* attention_scaling]`` (and ``sin`` alike) of shape (batch, seq, D).
``RotaryEmbedding(x, cos_cache, sin_cache)`` (non-interleaved, 4-D x of (batch, heads, seq, D), no position ids)
computes ``x * cat(c, c) + rotate_half(x) * cat(s, s)`` with caches ``c``, ``s`` of shape (batch, seq, D/2): the same
values exactly where cos and sin have equal halves. The pass checks that from the graph (a ``Concat`` of one value
with itself, through elementwise ops and scalar factors, which it then computes over the half alone; or an exporter
constant whose halves are equal) and does not rewrite anything else: the Slices split the last axis at D/2, the Neg
is on the right half, cos/sin broadcast over the heads axis only, same dtype (float32 or float16: ONNX Runtime's
CPU kernel has no bfloat16). A partial rotary (GPT-NeoX's, Phi's: ``x[..., :rot]`` rotated, concatenated with
``x[..., rot:]``) is one RotaryEmbedding of x with ``rotary_embedding_dim=rot``. ONNX Runtime wants the caches' batch to be x's: transformers' cos/sin have batch 1 (its
position ids), so they are expanded to x's batch where that differs (once per model).

The Add's value (``q_embed``, ``k_embed``) keeps its name on the RotaryEmbedding; the values inside are listed as
optimised away. Ours: onnxscript 0.7.2's ``onnx_fusions`` writes a RotaryEmbedding ONNX Runtime rejects at batch > 1.
"""

from __future__ import annotations

import onnx
import torch

from onnxsight.exporter.optimize._graph import Graph, attribute

PASS_NAME = "rotary embeddings"
_DTYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
# ops that act on each element alone, so op(cat(a, a)) == cat(op(a), op(a)); with a scalar constant too, and an
# Unsqueeze of another axis than the last (below)
_UNARY = ("Cos", "Sin", "Cast", "Identity", "Neg")
_SCALAR = ("Mul", "Div", "Add", "Sub")
_DEPTH = 8


def rotary_embeddings(graph: Graph) -> int:
    """Each written-out rotary embedding -> one RotaryEmbedding. Returns the nodes removed."""
    done = 0
    halves: dict[str, str | None] = {}   # cos/sin value -> the value of its first half (shared by every layer)
    batched: dict[tuple[str, int | str], str] = {}
    tables: dict[str, str] = {}   # a constant (batch, 1, seq, D) cos/sin -> the same as (batch, seq, D)
    for add in list(graph.nodes):
        match = _match(graph, add, tables)
        if match is None:
            continue
        x, (cos, sin), nodes = match
        made: list[onnx.NodeProto] = []
        caches = [_half(graph, c, halves, made) for c in (cos, sin)]
        if None in caches:   # cos's half made, sin's not: nothing of it stays
            graph.remove(made)
            for name in [n for n, half in halves.items() if half in {m.output[0] for m in made}]:
                del halves[name]
            continue
        at = next(i for i, node in enumerate(graph.nodes) if node is add)
        batch = graph.symbolic_shape(x)[0]
        caches = [c if graph.symbolic_shape(table)[0] == batch else _to_batch(graph, c, x, batched, at)
                  for c, table in zip(caches, (cos, sin))]
        out = add.output[0]
        rotary = onnx.helper.make_node("RotaryEmbedding", [x, *caches], [out], name=graph.fresh(f"{out}_rotary"))
        graph.replace([*nodes, add], rotary, PASS_NAME)   # the pattern's nodes all come before the Add
        done += len(nodes) + _partial(graph, rotary)
    return done


def _partial(graph: Graph, rotary: onnx.NodeProto) -> int:
    """A partial rotary, ``cat(rotary(q[..., :rot]), q[..., rot:])`` (GPT-NeoX's, Phi's), as one RotaryEmbedding of q
    with ``rotary_embedding_dim=rot`` (which rotates the first ``rot`` and passes the rest through). Returns the
    nodes removed."""
    rotated = graph.private(rotary.input[0], "Slice")
    concat = graph.sole_reader(rotary.output[0], "Concat")
    if rotated is None or concat is None or len(concat.input) != 2 or concat.input[0] != rotary.output[0]:
        return 0
    passed = graph.private(concat.input[1], "Slice")
    q = rotated.input[0]
    shape = graph.symbolic_shape(q)
    if passed is None or passed.input[0] != q or shape is None or len(shape) != 4 or not isinstance(shape[3], int) \
            or attribute(concat, "axis") % 4 != 3:
        return 0
    width = graph.symbolic_shape(rotary.input[0])[3]
    if _slice(graph, rotated, 4, shape[3]) != (0, width) or _slice(graph, passed, 4, shape[3]) != (width, shape[3]):
        return 0
    out = concat.output[0]
    whole = onnx.helper.make_node("RotaryEmbedding", [q, *rotary.input[1:]], [out], name=graph.fresh(f"{out}_rotary"),
                                  rotary_embedding_dim=width)
    graph.replace([rotated, rotary, passed, concat], whole, PASS_NAME)   # the three come before the Concat
    return 3


def _match(graph: Graph, add: onnx.NodeProto,
           tables: dict[str, str]) -> tuple[str, tuple[str, str], list[onnx.NodeProto]] | None:
    """(x, its cos and sin of shape (batch, seq, D), the pattern's nodes but the Add) where ``add`` ends one."""
    if add.op_type != "Add" or add.domain or len(add.input) != 2:
        return None
    muls = [graph.private(name, "Mul") for name in add.input]
    if None in muls or muls[0] is muls[1]:
        return None
    for plain, rotated in (muls, muls[::-1]):
        found = _rotate_half(graph, rotated)
        if found is None or found[0] not in plain.input:
            continue
        x, sin4, inner = found
        cos4 = _other(plain, x)
        shape = graph.symbolic_shape(x)   # known, its last dim even (rotate_half)
        if cos4 is None or graph.elem_type(x) not in _DTYPES or len(shape) != 4 \
                or any(graph.elem_type(v) != graph.elem_type(x) for v in (cos4, sin4)):
            return None
        found = [_over_heads(graph, v, shape, tables) for v in (cos4, sin4)]
        if None in found:
            return None
        return x, (found[0], found[1]), [plain, *inner]
    return None


def _rotate_half(graph: Graph, mul: onnx.NodeProto) -> tuple[str, str, list[onnx.NodeProto]] | None:
    """(x, sin, nodes) where ``mul`` is ``Concat(Neg(x[..., D/2:]), x[..., :D/2]) * sin``."""
    for i in (0, 1):
        found = rotate_half(graph, mul.input[i])
        if found is not None:
            return found[0], mul.input[1 - i], [*found[1], mul]
    return None


def rotate_half(graph: Graph, name: str) -> tuple[str, list[onnx.NodeProto]] | None:
    """(x, [x[..., :D/2]'s Slice, x[..., D/2:]'s, the Neg, the Concat]) where ``name`` is transformers'
    ``rotate_half(x)``, ``Concat(Neg(x[..., D/2:]), x[..., :D/2])`` on the last axis (D known and even), each value
    read by the next node alone (``_rotary.py``'s LLaMA form matches it too)."""
    concat = graph.private(name, "Concat")
    neg = graph.private(concat.input[0], "Neg") if concat is not None and len(concat.input) == 2 else None
    high = graph.private(neg.input[0], "Slice") if neg is not None else None
    low = graph.private(concat.input[1], "Slice") if high is not None else None
    shape = graph.symbolic_shape(low.input[0]) if low is not None and high.input[0] == low.input[0] else None
    width = shape[-1] if shape else None
    if not isinstance(width, int) or width % 2 or attribute(concat, "axis") % len(shape) != len(shape) - 1 \
            or _slice(graph, low, len(shape), width) != (0, width // 2) \
            or _slice(graph, high, len(shape), width) != (width // 2, width):
        return None
    return low.input[0], [low, high, neg, concat]


def _slice(graph: Graph, node: onnx.NodeProto, rank: int, width: int) -> tuple[int, int] | None:
    """(start, end) of a Slice of the last axis by step 1, clamped to [0, width]; None for any other Slice."""
    values = [graph.ints(name) if name else None for name in node.input[1:]]
    if len(values) < 3 or any(v is None or len(v) != 1 for v in values) or values[2][0] % rank != rank - 1 \
            or (len(values) > 3 and values[3][0] != 1):
        return None

    def clamp(index: int) -> int:
        return min(max(index + width if index < 0 else index, 0), width)

    return clamp(values[0][0]), clamp(values[1][0])


def _over_heads(graph: Graph, name: str, x: tuple, tables: dict[str, str]) -> str | None:
    """The (batch or 1, seq, D) value ``name`` broadcasts over x's heads axis (``Unsqueeze(c, 1)``, or an exporter
    constant of shape (batch or 1, 1, seq, D), then stored without that axis, once), where its seq and D are x's;
    None otherwise."""
    constant = graph.constant(name) if name not in graph.weights else None
    if constant is not None and constant.dim() == 4 and constant.shape[1] == 1:
        if name not in tables:
            tables[name] = graph.fresh(f"{name}_table")
            graph.initializers[tables[name]] = constant[:, 0]
        table = tables[name]
    elif (unsqueeze := graph.made_by(name, "Unsqueeze")) is not None and len(unsqueeze.input) == 2:
        axes = graph.ints(unsqueeze.input[1])
        if axes is None or len(axes) != 1 or axes[0] % 4 != 1:
            return None
        table = unsqueeze.input[0]
    else:
        return None
    shape = graph.symbolic_shape(table)
    if shape is None or len(shape) != 3 or shape[1:] != (x[2], x[3]) or shape[0] not in (1, x[0]):
        return None
    return table


def _half(graph: Graph, name: str, halves: dict[str, str | None], made: list[onnx.NodeProto],
          depth: int = 0) -> str | None:
    """A value holding ``name[..., :D/2]`` where ``name``'s two halves along its last axis are equal by construction
    (made once, beside ``name``'s producer; the nodes made are appended to ``made``); None where that cannot be
    shown."""
    if name in halves:
        return halves[name]
    halves[name] = None
    table = graph.constant(name)
    producer = graph.producer.get(name)
    if table is not None:
        if name in graph.weights or table.dim() == 0 or table.shape[-1] % 2:
            return None
        first, second = table.split(table.shape[-1] // 2, dim=-1)
        if not torch.equal(first, second):
            return None
        halves[name] = graph.fresh(f"{name}_half")
        graph.initializers[halves[name]] = first.contiguous()
        return halves[name]
    if producer is None or producer.domain or depth > _DEPTH:
        return None
    if producer.op_type == "Concat" and len(producer.input) == 2 and producer.input[0] == producer.input[1]:
        rank = graph.static_rank(name)
        if rank is not None and attribute(producer, "axis") % rank == rank - 1:
            halves[name] = producer.input[0]
        return halves[name]
    if producer.op_type in _UNARY:
        inputs = [0]
    elif producer.op_type == "Unsqueeze" and len(producer.input) == 2:   # a new axis that is not the last one
        axes, rank = graph.constant(producer.input[1]), graph.static_rank(name)
        inputs = [0] if axes is not None and rank is not None and rank - 1 not in (axes % rank).tolist() else []
    elif producer.op_type in _SCALAR and len(producer.input) == 2:
        scalar = [graph.constant(n) is not None and graph.constant(n).numel() == 1 for n in producer.input]
        inputs = [scalar.index(False)] if scalar.count(True) == 1 else []
    else:
        inputs = []
    if len(inputs) != 1:
        return None
    half = _half(graph, producer.input[inputs[0]], halves, made, depth + 1)
    if half is None:
        return None
    node = onnx.NodeProto()
    node.CopyFrom(producer)
    node.input[inputs[0]] = half
    node.output[0] = halves[name] = graph.fresh(f"{name}_half")
    node.name = graph.fresh(f"{producer.name or name}_half")
    graph.nodes.insert(next(i for i, n in enumerate(graph.nodes) if n is producer) + 1, node)
    graph.index(node)
    made.append(node)
    return halves[name]


def _to_batch(graph: Graph, cache: str, x: str, done: dict[tuple[str, int | str], str], at: int) -> str:
    """``cache`` (1, seq, D/2) expanded to x's batch (ONNX Runtime's kernel does not broadcast it; static batch: a
    constant shape; dynamic: x's batch read at run time), once per cache and batch; inserted at ``at``."""
    batch = graph.symbolic_shape(x)[0]
    if (cache, batch) in done:
        return done[(cache, batch)]
    nodes = []
    if isinstance(batch, int):
        shape = graph.fresh("rotary_batch_shape")
        graph.initializers[shape] = torch.tensor([batch, 1, 1], dtype=torch.int64)
    else:
        size, ones, shape = graph.fresh("rotary_batch"), graph.fresh("rotary_ones"), graph.fresh("rotary_batch_shape")
        graph.initializers[ones] = torch.tensor([1, 1], dtype=torch.int64)
        nodes += [onnx.helper.make_node("Shape", [x], [size], name=size, start=0, end=1),
                  onnx.helper.make_node("Concat", [size, ones], [shape], name=shape, axis=0)]
    done[(cache, batch)] = graph.fresh(f"{cache}_batch")
    nodes.append(onnx.helper.make_node("Expand", [cache, shape], [done[(cache, batch)]], name=done[(cache, batch)]))
    for node in nodes:
        graph.index(node)
    graph.nodes[at:at] = nodes
    return done[(cache, batch)]


def _other(node: onnx.NodeProto, name: str) -> str | None:
    """The input of the two-input ``node`` that is not ``name``."""
    others = [n for n in node.input if n != name]
    return others[0] if len(node.input) == 2 and len(others) == 1 else None
