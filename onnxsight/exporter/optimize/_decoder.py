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

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, attribute

_END = 2 ** 62  # a Slice end past any axis: "to the end"


def gpt2_causal_attention(graph: Graph) -> int:
    """``Softmax(scores + causal mask)`` -> ``Softmax(Where(causal rows of Shape(scores), scores, fill))``,
    and the heads' merge ``Reshape`` before the output projection's ``Gemm`` split back out of it."""
    done = 0
    emit = Emitter(graph)
    for add in list(graph.nodes):
        block = _match(graph, add)
        if block is None:
            continue
        scores, fill, merge = block
        _mask_from_shape(emit, add, scores, fill)
        done += 1
        if merge is not None:
            _split_merge(emit, merge)
            done += 1
    return done


def _match(graph: Graph, add: onnx.NodeProto) -> tuple[onnx.NodeProto, float, onnx.NodeProto | None] | None:
    """(the scores' Div, the mask's fill value, the merged heads Reshape to split or None) for a GPT-2
    attention block whose ``add`` adds the causal mask; None for anything else."""
    if add.op_type != "Add" or add.domain or len(add.input) != 2 or add.output[0] in graph.pinned:
        return None
    scores = graph.producer.get(add.input[0])
    mask = graph.constant(add.input[1])
    if scores is None or scores.op_type != "Div" or mask is None or not has_data(mask):
        return None
    readers = graph.readers.get(add.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "Softmax" or attribute(readers[0], "axis", -1) not in (-1, 3):
        return None
    shape = graph.static_shape(scores.output[0])
    if shape is None or len(shape) != 4:
        return None
    fill = causal_fill(mask, shape[-2], shape[-1])
    if fill is None or not _qkv_from_one_split(graph, scores, readers[0]):
        return None
    found, merge = _output_projection(graph, readers[0])
    return (scores, fill, merge) if found else None


def causal_fill(mask: torch.Tensor, rows: int, cols: int) -> float | None:
    """The masked-out value of ``mask`` where it is exactly torch's causal mask for ``rows == cols`` (0 on and
    below the diagonal, one value of at most the dtype's lowest above it), the same for every batch row and
    head; None otherwise."""
    if rows != cols or rows < 2 or not mask.dtype.is_floating_point or mask.dim() > 4 or mask.dim() < 2:
        return None
    if tuple(mask.shape[-2:]) != (rows, cols):
        return None
    squares = mask.reshape(-1, rows, cols)
    if not bool((squares == squares[:1]).all()):
        return None
    square = squares[0]
    keep = torch.ones(rows, cols, dtype=torch.bool).tril()
    blocked = square[~keep]
    fill = float(blocked[0])
    if not bool((square[keep] == 0).all()) or not bool((blocked == fill).all()):
        return None
    return fill if fill == -math.inf or fill <= torch.finfo(mask.dtype).min else None


def parent(graph: Graph, node: onnx.NodeProto | None, index: int, op_type: str) -> onnx.NodeProto | None:
    """The node making ``node``'s input ``index`` where it is a standard ``op_type``; else None."""
    if node is None or len(node.input) <= index:
        return None
    found = graph.producer.get(node.input[index])
    return found if found is not None and found.op_type == op_type and not found.domain else None


def _plain_gemm(node: onnx.NodeProto | None) -> bool:
    """``x @ W + b`` as ORT's fused Attention reads it: the GPT-2 fuser takes the Gemm's weight and bias as they
    are, whatever its transB/alpha/beta say."""
    return node is not None and node.op_type == "Gemm" and not node.domain and len(node.input) == 3 \
        and attribute(node, "transA", 0) == 0 and attribute(node, "transB", 0) == 0 \
        and attribute(node, "alpha", 1.0) == 1.0 and attribute(node, "beta", 1.0) == 1.0


def _qkv_from_one_split(graph: Graph, scores: onnx.NodeProto, softmax: onnx.NodeProto) -> bool:
    """Q K^T / sqrt(head size) and V, each ``Transpose(Reshape(...))`` of the outputs 0, 1, 2 of one Split
    into equal parts: the layout ORT's fused Attention computes from the Split's Gemm weights."""
    matmul_qk = parent(graph, scores, 0, "MatMul")
    readers = graph.readers.get(softmax.output[0], [])
    if matmul_qk is None or len(readers) != 1 or readers[0].op_type != "MatMul" or readers[0].input[0] != \
            softmax.output[0]:
        return False
    sources = [(matmul_qk, 0), (matmul_qk, 1), (readers[0], 1)]
    split = None
    for position, (node, index) in enumerate(sources):
        reshape = parent(graph, parent(graph, node, index, "Transpose"), 0, "Reshape")
        source = parent(graph, reshape, 0, "Split")
        if source is None or list(source.output).index(reshape.input[0]) != position:
            return False
        if split is not None and source is not split:
            return False
        split = source
    sizes = graph.constant(split.input[1]) if len(split.input) > 1 else None
    rank = graph.static_rank(split.input[0])
    if sizes is None or sizes.numel() != 3 or len(set(sizes.tolist())) != 1 or rank is None \
            or attribute(split, "axis", 0) not in (-1, rank - 1):  # Q, K, V side by side in the Gemm's columns
        return False
    if not _plain_gemm(parent(graph, parent(graph, split, 0, "Reshape"), 0, "Gemm")):
        return False
    return scaled_by_root_of_head_size(graph, scores, matmul_qk)


def scaled_by_root_of_head_size(graph: Graph, scores: onnx.NodeProto, matmul_qk: onnx.NodeProto) -> bool:
    """Whether ``scores`` is ``Q K^T / sqrt(E)``: the scale ORT's fused attention ops apply when not told one."""
    head = graph.static_shape(matmul_qk.input[0])
    divisor = graph.constant(scores.input[1])
    if head is None or divisor is None or divisor.numel() != 1 or scores.input[0] != matmul_qk.output[0]:
        return False
    return math.isclose(float(divisor.reshape(-1)[0]), math.sqrt(head[-1]), rel_tol=1e-6)


def _output_projection(graph: Graph, softmax: onnx.NodeProto) -> tuple[bool, onnx.NodeProto | None]:
    """Whether ``MatMul(softmax, V)`` goes on as ``Transpose(0, 2, 1, 3) -> Reshape [-> Reshape] -> Gemm``; and
    the Reshape to split where it goes straight to 2-D (the heads' merge folded into the projection's view)."""
    attn = graph.readers[softmax.output[0]][0]
    after = graph.readers.get(attn.output[0], [])
    if len(after) != 1 or after[0].op_type != "Transpose" or attribute(after[0], "perm") != [0, 2, 1, 3]:
        return False, None
    chain = graph.readers.get(after[0].output[0], [])
    reshapes = []
    while len(chain) == 1 and chain[0].op_type == "Reshape" and len(reshapes) < 2:
        reshapes.append(chain[0])
        chain = graph.readers.get(chain[0].output[0], [])
    if not reshapes or not chain or any(not _plain_gemm(n) or n.input[0] != reshapes[-1].output[0] for n in chain):
        return False, None
    if len(reshapes) == 2:
        return True, None
    return graph.static_shape(reshapes[0].input[0]) is not None, reshapes[0]


def _mask_from_shape(emit: Emitter, add: onnx.NodeProto, scores: onnx.NodeProto, fill: float) -> None:
    """``add``'s output, computed as ``Where(causal[S - L:, :S], scores, fill)`` with S read from the scores."""
    graph = emit.graph
    size = graph.static_shape(scores.output[0])[-1]
    dtype = graph.constant(add.input[1]).dtype
    softmax = graph.readers[add.output[0]][0]
    graph.remove([add])
    last = emit.op("Slice", emit.op("Shape", scores.output[0]), emit.const("_last", [-1]),
                   emit.const("_end", [_END]), hint="key_length")
    start = emit.op("Sub", emit.op("Squeeze", last, emit.const("_axis0", [0])),
                    emit.const("_query_length", size))
    rows = emit.op("Slice", emit.const("_causal", torch.ones(size, size, dtype=torch.bool).tril()),
                   emit.op("Unsqueeze", start, emit.const("_axis0", [0])), emit.const("_end", [_END]),
                   emit.const("_axis0", [0]))
    keep = emit.op("Slice", rows, emit.const("_axis0", [0]), last, emit.const("_axis1", [1]), hint="causal")
    emit.op("Where", keep, scores.output[0], emit.const("_masked", torch.tensor(fill, dtype=dtype)),
            out=add.output[0])
    emit.place(softmax)


def _split_merge(emit: Emitter, reshape: onnx.NodeProto) -> None:
    """Transpose -> Reshape(2-D) -> Gemm  becomes  Transpose -> Reshape(B, L, H*E) -> Reshape(2-D) -> Gemm."""
    batch, length, heads, width = emit.graph.static_shape(reshape.input[0])
    merged = emit.op("Reshape", reshape.input[0], emit.const("_heads_shape", [batch, length, heads * width]),
                     hint=f"{reshape.input[0]}_heads")
    emit.place(reshape)
    emit.graph.set_input(reshape, 0, merged)
