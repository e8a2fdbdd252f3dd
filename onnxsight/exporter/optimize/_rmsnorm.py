"""RMS norms written out (LLaMA's ``x * rsqrt(mean(x^2) + eps) * w``) as one ONNX ``RMSNormalization`` (opset 23).

transformers' ``LlamaRMSNorm`` (and Mistral's, Qwen's) does not call
``F.rms_norm``: torch.export records ``pow``, ``mean``, ``add``, ``rsqrt``, ``mul``, ``mul``, which
translate to seven nodes. From opset 23 the standard has the op, and the whole chain is one node:

    Pow(x, 2) -> ReduceMean(last axis, keepdims) -> Add(eps) -> Sqrt -> Reciprocal -> Mul(x, .) [-> Mul(w, .)]

``RMSNormalization(x, w, axis=-1, epsilon=eps)`` computes ``x / sqrt(mean(x^2) + eps) * w``. The
last value of the chain keeps its name (the verifier pairs it with PyTorch's); the values inside
it are listed as optimised away. Matched in float32 and float64, and in half precision where the
chain runs between a Cast to float32 and a Cast back, the weight multiplied after it (LLaMA's
``hidden_states.to(torch.float32)`` ... ``self.weight * hidden_states.to(input_dtype)``): the op's
float32 stash (``stash_type=1``) is those Casts. Ours, as the other opset-23 passes: the values it removes are
recorded for verification (``_passes``' NOTE), which onnxscript's ``onnx_fusions`` does not do.
"""

from __future__ import annotations

import onnx
import torch

from onnxsight.exporter._dtypes import to_torch
from onnxsight.exporter.optimize._graph import Graph, attribute

PASS_NAME = "RMS norms"
_WIDE = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)
_HALF = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def rms_norms(graph: Graph) -> int:
    """Each written-out RMS norm -> one RMSNormalization. Returns the nodes removed."""
    done = 0
    for pow_node in list(graph.nodes):
        chain = _match(graph, pow_node)
        if chain is None:
            continue
        x, eps, scale, nodes = chain
        out = nodes[-1].output[0]
        if scale is None:
            width = _width(graph, x)
            if width is None:
                continue
            scale = graph.fresh(f"{out}_scale")
            graph.initializers[scale] = torch.ones(width, dtype=to_torch(graph.elem_type(x)))
        norm = onnx.helper.make_node("RMSNormalization", [x, scale], [out], name=graph.fresh(f"{out}_rms"),
                                     axis=-1, epsilon=eps, stash_type=1)
        graph.replace(nodes, norm, PASS_NAME)   # after x and the weight are made
        done += len(nodes) - 1
    return done


def _match(graph: Graph, pow_node: onnx.NodeProto) -> tuple[str, float, str | None, list[onnx.NodeProto]] | None:
    """(x, eps, weight or None, the chain's nodes in order) where ``pow_node`` starts an RMS norm."""
    if pow_node.op_type != "Pow" or pow_node.domain or graph.elem_type(pow_node.input[0]) not in _WIDE:
        return None
    x = pow_node.input[0]
    if graph.scalar(pow_node.input[1]) != 2.0:
        return None
    mean = graph.sole_reader(pow_node.output[0], "ReduceMean")
    rank = graph.static_rank(x)
    axes = graph.ints(mean.input[1]) if mean is not None and len(mean.input) > 1 else None
    if mean is None or rank is None or axes is None or [a % rank for a in axes] != [rank - 1] \
            or not attribute(mean, "keepdims", 1):
        return None
    add = graph.sole_reader(mean.output[0], "Add")
    eps = graph.scalar(add.input[1] if add.input[0] == mean.output[0] else add.input[0]) if add is not None else None
    if eps is None:
        return None
    sqrt = graph.sole_reader(add.output[0], "Sqrt")
    inverse = graph.sole_reader(sqrt.output[0], "Reciprocal") if sqrt is not None else None
    mul = graph.sole_reader(inverse.output[0], "Mul") if inverse is not None else None
    if mul is None or set(mul.input) != {x, inverse.output[0]}:
        return None
    nodes = [pow_node, mean, add, sqrt, inverse, mul]
    x, nodes = _half_precision(graph, x, nodes)
    weighted = graph.sole_reader(nodes[-1].output[0], "Mul")
    if weighted is not None:
        other = [name for name in weighted.input if name != nodes[-1].output[0]]
        weight = graph.constant(other[0]) if len(other) == 1 else None
        if weight is not None and weight.dim() == 1 and weight.numel() == _width(graph, x) \
                and graph.elem_type(other[0]) == graph.elem_type(x):
            return x, eps, other[0], [*nodes, weighted]
    return x, eps, None, nodes


def _half_precision(graph: Graph, wide: str, nodes: list[onnx.NodeProto]) -> tuple[str, list[onnx.NodeProto]]:
    """A half-precision model's chain, ``Cast(x, float32) -> ... -> Cast(back)``: the op's float32 stash
    (``stash_type=1``) is those Casts, so it reads x itself and the chain takes in the Cast back (and the Cast
    to float32, where the chain alone reads it). Else the chain as it is."""
    cast_in = graph.made_by(wide, "Cast")
    source = cast_in.input[0] if cast_in is not None else None
    if source is None or graph.elem_type(source) not in _HALF or graph.elem_type(wide) != onnx.TensorProto.FLOAT:
        return wide, nodes
    cast_out = graph.sole_reader(nodes[-1].output[0], "Cast")
    if cast_out is None or attribute(cast_out, "to") != graph.elem_type(source):
        return wide, nodes
    readers = graph.readers.get(wide, [])
    alone = wide not in graph.pinned and all(r is nodes[0] or r is nodes[-1] for r in readers)
    return source, [cast_in, *nodes, cast_out] if alone else [*nodes, cast_out]


def _width(graph: Graph, name: str) -> int | None:
    """The size of ``name``'s last axis where it is a known int (other axes may be dynamic)."""
    dims = graph.dims(name)
    return dims[-1] if dims and isinstance(dims[-1], int) else None
