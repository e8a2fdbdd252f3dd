"""RMS norms written out (LLaMA's ``x * rsqrt(mean(x^2) + eps) * w``) as one ONNX ``RMSNormalization`` (opset 23).

transformers' ``LlamaRMSNorm`` (and Qwen's, Mistral's, Gemma's with a 1 + w weight...) does not call
``F.rms_norm``: torch.export records ``pow``, ``mean``, ``add``, ``rsqrt``, ``mul``, ``mul``, which
translate to seven nodes. From opset 23 the standard has the op, and the whole chain is one node:

    Pow(x, 2) -> ReduceMean(last axis, keepdims) -> Add(eps) -> Sqrt -> Reciprocal -> Mul(x, .) [-> Mul(w, .)]

``RMSNormalization(x, w, axis=-1, epsilon=eps)`` computes ``x / sqrt(mean(x^2) + eps) * w``. The
last value of the chain keeps its name (the verifier pairs it with PyTorch's); the values inside
it are listed as optimised away. Matched in float32 and float64 only, where the op's float32 stash
is the precision the chain computed in already (a half-precision model's chain runs between Casts
to float32 and back, and the weight multiplies after the Cast: not matched).
"""

from __future__ import annotations

import onnx
import torch

from onnxsight.exporter.optimize._graph import Graph, attribute

PASS_NAME = "RMS norms"
_WIDE = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)


def rms_norms(graph: Graph) -> int:
    """Each written-out RMS norm -> one RMSNormalization. Returns the nodes removed."""
    done = 0
    for pow_node in list(graph.nodes):
        chain = _match(graph, pow_node)
        if chain is None:
            continue
        x, eps, scale, nodes = chain
        last = nodes[-1]
        out = last.output[0]
        if scale is None:
            width = _width(graph, x)
            if width is None:
                continue
            scale = graph.fresh(f"{out}_scale")
            graph.initializers[scale] = torch.ones(width, dtype=_torch_dtype(graph.elem_type(x)))
        norm = onnx.helper.make_node("RMSNormalization", [x, scale], [out], name=graph.fresh(f"{out}_rms"),
                                     axis=-1, epsilon=eps, stash_type=1)
        norm.metadata_props.extend(last.metadata_props)
        for node in nodes[:-1]:
            graph.removed[node.output[0]] = PASS_NAME
        graph.remove(nodes[:-1])
        at = next(i for i, node in enumerate(graph.nodes) if node is last)   # after x and the weight are made
        graph.remove([last])
        graph.nodes.insert(at, norm)
        graph.producer[out] = norm
        for name in norm.input:
            graph.readers.setdefault(name, []).append(norm)
        done += len(nodes) - 1
    return done


def _match(graph: Graph, pow_node: onnx.NodeProto) -> tuple[str, float, str | None, list[onnx.NodeProto]] | None:
    """(x, eps, weight or None, the chain's nodes in order) where ``pow_node`` starts an RMS norm."""
    if pow_node.op_type != "Pow" or pow_node.domain or graph.elem_type(pow_node.input[0]) not in _WIDE:
        return None
    x = pow_node.input[0]
    exponent = graph.constant(pow_node.input[1])
    if exponent is None or exponent.numel() != 1 or float(exponent.reshape(-1)[0]) != 2.0:
        return None
    mean = _only_reader(graph, pow_node, "ReduceMean")
    rank = graph.static_rank(x)
    axes = graph.constant(mean.input[1]) if mean is not None and len(mean.input) > 1 else None
    if mean is None or rank is None or axes is None or [a % rank for a in axes.reshape(-1).tolist()] != [rank - 1] \
            or not attribute(mean, "keepdims", 1):
        return None
    add = _only_reader(graph, mean, "Add")
    eps = graph.constant(add.input[1] if add.input[0] == mean.output[0] else add.input[0]) if add is not None else None
    if eps is None or eps.numel() != 1:
        return None
    sqrt = _only_reader(graph, add, "Sqrt")
    inverse = _only_reader(graph, sqrt, "Reciprocal") if sqrt is not None else None
    mul = _only_reader(graph, inverse, "Mul") if inverse is not None else None
    if mul is None or set(mul.input) != {x, inverse.output[0]}:
        return None
    nodes = [pow_node, mean, add, sqrt, inverse, mul]
    weighted = _only_reader(graph, mul, "Mul")
    if weighted is not None:
        other = [name for name in weighted.input if name != mul.output[0]]
        weight = graph.constant(other[0]) if len(other) == 1 else None
        if weight is not None and weight.dim() == 1 and weight.numel() == _width(graph, x) \
                and graph.elem_type(other[0]) == graph.elem_type(x):
            return x, float(eps.reshape(-1)[0]), other[0], [*nodes, weighted]
    return x, float(eps.reshape(-1)[0]), None, nodes


def _only_reader(graph: Graph, node: onnx.NodeProto, op_type: str) -> onnx.NodeProto | None:
    """The one node reading ``node``'s output, if it is an ``op_type`` (and the output is not a graph output)."""
    out = node.output[0]
    readers = graph.readers.get(out, [])
    if len(readers) != 1 or out in graph.pinned or readers[0].op_type != op_type or readers[0].domain:
        return None
    return readers[0]


def _width(graph: Graph, name: str) -> int | None:
    """The size of ``name``'s last axis where it is a known int (other axes may be dynamic)."""
    info = graph.info(name)
    dims = info.type.tensor_type.shape.dim if info is not None and info.type.tensor_type.HasField("shape") else ()
    return dims[-1].dim_value if dims and dims[-1].HasField("dim_value") else None


def _torch_dtype(elem_type: int | None) -> torch.dtype:
    return torch.float64 if elem_type == onnx.TensorProto.DOUBLE else torch.float32
