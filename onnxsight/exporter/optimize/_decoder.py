"""Causal self-attention in the form ONNX Runtime's GPT-2 attention fuser recognises.

``optimize_model(..., model_type="gpt2")`` fuses GPT-2's attention without a KV cache
(``fusion_gpt_attention_no_past.py``) into one ``Attention`` node with ``unidirectional=1``.
It recognises the block by its layout (``Reshape -> Gemm -> Reshape -> Split`` into Q, K
and V; ``Transpose -> Reshape -> Reshape -> Gemm`` after it) and the causal mask by how
the mask is built: ``Where(Slice(Slice(bias, Shape(scores) ...)), scores, fill)``. The
translated graph has the layout but adds the causal mask as a constant, and the reshape
passes merge the heads' ``Reshape`` into the projection's. This pass, run once after the
others, writes both back in that form where the mask *is* causal: the fused op applies
the causal mask itself and never reads ours, so a mask that is not exactly causal, a
scale other than ``1/sqrt(head size)``, or Q/K/V split in another order is left alone.

The values the verifier compares keep their names: the new nodes compute only temporaries,
and the ``Where`` that replaces ``scores + mask`` writes the value the ``Add`` wrote.
"""

from __future__ import annotations

import math

import onnx
import torch

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, attribute, parent
from onnxsight.exporter.optimize._simplify import plain_gemm
from onnxsight.exporter.optimize._sized_mask import causal_fill_at_sizes, offset_causal_fill

_END = 2 ** 62  # a Slice end past any axis: "to the end"


def gpt2_causal_attention(graph: Graph) -> int:
    """``Softmax(scores + causal mask)`` -> ``Softmax(Where(causal rows of Shape(scores), scores, fill))``,
    and the heads' merge ``Reshape`` before the output projection's ``Gemm`` split back out of it."""
    done = 0
    emit = Emitter(graph)
    tables: dict[str, str] = {}   # the run-time causal table, made once for all layers
    for add in list(graph.nodes):
        block = _match(graph, add)
        if block is None:
            continue
        scores, fill, merge = block
        _mask_from_shape(emit, add, scores, fill, tables)
        done += 1
        if merge is not None:
            _split_merge(emit, merge)
            done += 1
    return done


def _match(graph: Graph, add: onnx.NodeProto) -> tuple[onnx.NodeProto, float, onnx.NodeProto | None] | None:
    """(the scores' Div, the mask's fill value, the merged heads Reshape to split or None) for a GPT-2 attention
    block whose ``add`` adds the causal mask; None for anything else.

    The mask is a constant (static shapes), or computed at run time from the input sizes (``dynamic_shapes``:
    checked at many sizes by running it, ``_sized_mask``, which has dropped torch's fully-masked-row guard)."""
    if add.op_type != "Add" or add.domain or len(add.input) != 2 or add.output[0] in graph.pinned:
        return None
    scores, softmax = graph.made_by(add.input[0], "Div"), graph.sole_reader(add.output[0], "Softmax")
    if scores is None or softmax is None or attribute(softmax, "axis", -1) not in (-1, 3):
        return None
    probs = softmax.output[0]
    if not _qkv_from_one_split(graph, scores, probs):
        return None
    found, merge = _output_projection(graph, probs)
    if not found:
        return None
    mask = graph.constant(add.input[1])
    if mask is not None:
        shape = graph.static_shape(scores.output[0])
        if not has_data(mask) or shape is None or len(shape) != 4:
            return None
        fill = causal_fill(mask, shape[-2], shape[-1])
    else:   # the layout matched first: running the mask costs more
        query, value = graph.producer[scores.input[0]].input[0], graph.readers[probs][0].input[1]
        fill = _causal_fill_from_sizes(graph, query, value, add.input[1])
    return None if fill is None else (scores, fill, merge)


def _causal_fill_from_sizes(graph: Graph, query: str, value: str, mask: str) -> float | None:
    """The fill of a mask computed from the input sizes where it is causal over as many keys as queries: Q's and
    V's lengths the same symbol or size (no KV cache), the mask causal at every size sampled."""
    shapes = graph.symbolic_shape(query), graph.symbolic_shape(value)
    if any(s is None or len(s) != 4 for s in shapes) or shapes[0][2] != shapes[1][2]:
        return None
    return causal_fill_at_sizes(graph, mask, shapes[0][2])


def causal_fill(mask: torch.Tensor, rows: int, cols: int) -> float | None:
    """The masked-out value of ``mask`` where it is exactly torch's causal mask for ``rows == cols`` (0 on and
    below the diagonal, one value of at most the dtype's lowest above it), the same for every batch row and
    head; None otherwise."""
    if rows != cols or rows < 2 or mask.dim() > 4 or tuple(mask.shape[-2:]) != (rows, cols):
        return None
    fill = offset_causal_fill(mask)
    return None if isinstance(fill, bool) else fill


def _qkv_from_one_split(graph: Graph, scores: onnx.NodeProto, probs: str) -> bool:
    """Q K^T / sqrt(head size) and V, each ``Transpose(Reshape(...))`` of the outputs 0, 1, 2 of one Split
    into equal parts: the layout ORT's fused Attention computes from the Split's Gemm weights."""
    matmul_qk = parent(graph, scores, 0, "MatMul")
    readers = graph.readers.get(probs, [])
    if matmul_qk is None or len(readers) != 1 or readers[0].op_type != "MatMul" or readers[0].input[0] != probs:
        return False
    sources = [(matmul_qk, 0), (matmul_qk, 1), (readers[0], 1)]
    split = None
    for position, (node, index) in enumerate(sources):
        reshape = parent(graph, parent(graph, node, index, "Transpose"), 0, "Reshape")
        source = parent(graph, reshape, 0, "Split")
        if source is None or list(source.output).index(reshape.input[0]) != position \
                or (split is not None and source is not split):
            return False
        split = source
    sizes = graph.constant(split.input[1]) if len(split.input) > 1 else None
    rank = graph.static_rank(split.input[0])
    if sizes is None or sizes.numel() != 3 or len(set(sizes.tolist())) != 1 or rank is None \
            or attribute(split, "axis", 0) not in (-1, rank - 1):  # Q, K, V side by side in the Gemm's columns
        return False
    # the GPT-2 fuser takes the Gemm's weight and bias as they are, whatever its transB/alpha/beta say
    if not plain_gemm(parent(graph, parent(graph, split, 0, "Reshape"), 0, "Gemm")):
        return False
    return scaled_by_root_of_head_size(graph, scores, matmul_qk)


def scaled_by_root_of_head_size(graph: Graph, scores: onnx.NodeProto, matmul_qk: onnx.NodeProto) -> bool:
    """Whether ``scores`` is ``Q K^T / sqrt(E)``: the scale ORT's fused attention ops apply when not told one."""
    head = graph.symbolic_shape(matmul_qk.input[0])
    divisor = graph.scalar(scores.input[1])
    if head is None or not isinstance(head[-1], int) or divisor is None or scores.input[0] != matmul_qk.output[0]:
        return False
    return math.isclose(divisor, math.sqrt(head[-1]), rel_tol=1e-6)


def _output_projection(graph: Graph, probs: str) -> tuple[bool, onnx.NodeProto | None]:
    """Whether ``MatMul(probs, V)`` goes on as ``Transpose(0, 2, 1, 3) -> Reshape [-> Reshape] -> Gemm``; and
    the Reshape to split where it goes straight to 2-D (the heads' merge folded into the projection's view)."""
    attn = graph.readers[probs][0]
    after = graph.readers.get(attn.output[0], [])
    if len(after) != 1 or after[0].op_type != "Transpose" or attribute(after[0], "perm") != [0, 2, 1, 3]:
        return False, None
    chain = graph.readers.get(after[0].output[0], [])
    reshapes = []
    while len(chain) == 1 and chain[0].op_type == "Reshape" and len(reshapes) < 2:
        reshapes.append(chain[0])
        chain = graph.readers.get(chain[0].output[0], [])
    if not reshapes or not chain or any(not plain_gemm(n) or n.input[0] != reshapes[-1].output[0] for n in chain):
        return False, None
    if len(reshapes) == 2:
        return True, None
    shape = graph.symbolic_shape(reshapes[0].input[0])
    return shape is not None and len(shape) == 4 and all(isinstance(d, int) for d in shape[2:]), reshapes[0]


def _mask_from_shape(emit: Emitter, add: onnx.NodeProto, scores: onnx.NodeProto, fill: float,
                     tables: dict[str, str]) -> None:
    """``add``'s output, computed as ``Where(causal[S - L:, :S], scores, fill)`` with S read from the scores: the
    causal table a constant for static shapes; for dynamic ones ``Range(S) <= Range(S)[:, None]``, made from the
    first layer's S for all (every layer has as many keys), and ``S - L`` as ``S - S`` (as many keys as queries,
    checked by ``_causal_fill_from_sizes``)."""
    graph = emit.graph
    size = graph.static_shape(scores.output[0])
    dtype = to_torch(graph.elem_type(add.output[0]))
    softmax = graph.readers[add.output[0]][0]
    graph.remove([add])
    shape = emit.op("Shape", scores.output[0])
    last = emit.op("Slice", shape, emit.const("_last", [-1]), emit.const("_end", [_END]), hint="key_length")
    keys = emit.op("Squeeze", last, emit.const("_axis0", [0]))
    if size is not None:
        query = emit.const("_query_length", size[-1])
        table = emit.const("_causal", torch.ones(size[-1], size[-1], dtype=torch.bool).tril())
    else:
        query = keys
        if "dynamic" not in tables:
            positions = emit.op("Range", emit.const("_zero", 0), keys, emit.const("_one", 1), hint="positions")
            tables["dynamic"] = emit.op("LessOrEqual", emit.op("Unsqueeze", positions, emit.const("_axis0", [0])),
                                        emit.op("Unsqueeze", positions, emit.const("_axis1", [1])),
                                        hint="causal_table")
        table = tables["dynamic"]
    start = emit.op("Sub", keys, query)
    rows = emit.op("Slice", table, emit.op("Unsqueeze", start, emit.const("_axis0", [0])), emit.const("_end", [_END]),
                   emit.const("_axis0", [0]))
    keep = emit.op("Slice", rows, emit.const("_axis0", [0]), last, emit.const("_axis1", [1]), hint="causal")
    emit.op("Where", keep, scores.output[0], emit.const("_masked", torch.tensor(fill, dtype=dtype)),
            out=add.output[0])
    emit.place(softmax)


def _split_merge(emit: Emitter, reshape: onnx.NodeProto) -> None:
    """Transpose -> Reshape(2-D) -> Gemm  becomes  Transpose -> Reshape(B, L, H*E) -> Reshape(2-D) -> Gemm (B and L
    copied from the input, ``0``, where they are not known at export)."""
    batch, length, heads, width = emit.graph.symbolic_shape(reshape.input[0])
    shape = [d if isinstance(d, int) else 0 for d in (batch, length)] + [heads * width]
    merged = emit.op("Reshape", reshape.input[0], emit.const("_heads_shape", shape), hint=f"{reshape.input[0]}_heads")
    emit.place(reshape)
    emit.graph.set_input(reshape, 0, merged)
