"""Passes that remove nodes computing nothing new: Identity, a Cast to the dtype a value already has,
a Reshape to the shape it already has; Transpose/Transpose, Unsqueeze/Unsqueeze, Squeeze/Unsqueeze and
Reshape/Reshape pairs; the Reshapes around a linear layer's Gemm on an N-D input.

Where a removed node's output is an FX value, the value it equalled holds it now
(``graph.aliases``: the verifier compares the FX value against that one); where
two nodes become one and the intermediate value is gone, ``graph.removed`` says
which pass removed it, and verification lists it with that reason.
"""

from __future__ import annotations

import onnx
import torch

from onnxsight.exporter.optimize._emit import Emitter
from onnxsight.exporter.optimize._graph import Graph, attribute, set_attribute


def _bypass(graph: Graph, node: onnx.NodeProto, source: str) -> bool:
    """Make ``node``'s readers read ``source`` and drop ``node``; False where its output must keep its name."""
    out = node.output[0]
    if out in graph.pinned:
        return False
    graph.replace_uses(out, source)
    graph.remove([node])
    return True


def identities(graph: Graph) -> int:
    """Identity nodes, Casts to the dtype their input already has, Reshapes to the shape it already has."""
    done = 0
    for node in list(graph.nodes):
        if node.domain:
            continue
        same = node.op_type == "Identity" or (
            node.op_type == "Cast" and graph.elem_type(node.input[0]) is not None
            and graph.elem_type(node.input[0]) == attribute(node, "to")) or (
            node.op_type == "Reshape" and graph.symbolic_shape(node.input[0]) is not None
            and graph.symbolic_shape(node.input[0]) == graph.symbolic_shape(node.output[0]))
        # an Identity of a graph input or weight stays: the FX value it names is computed, and compared as such
        if not same or node.input[0] in graph.initializers or node.input[0] in graph.graph_inputs:
            continue
        if _bypass(graph, node, node.input[0]):
            done += 1
    return done


def _merge_into(graph: Graph, parent: onnx.NodeProto, node: onnx.NodeProto, pass_name: str) -> None:
    """``node`` reads ``parent``'s input directly; ``parent`` (read by ``node`` alone) goes."""
    graph.set_input(node, 0, parent.input[0])
    graph.removed[parent.output[0]] = pass_name
    graph.remove([parent])


def transpose_pairs(graph: Graph) -> int:
    """Transpose(Transpose(x, p), q) -> Transpose(x, p then q); nothing at all where that is the identity."""
    done = 0
    for node in list(graph.nodes):
        if node.op_type != "Transpose" or node.domain:
            continue
        parent = graph.private(node.input[0], "Transpose")
        p, q = attribute(parent, "perm") if parent is not None else None, attribute(node, "perm")
        if parent is None or not p or not q:
            continue
        combined = [p[i] for i in q]
        _merge_into(graph, parent, node, "transpose pairs")
        done += 1
        if combined == sorted(combined) and _bypass(graph, node, node.input[0]):
            done += 1
            continue
        set_attribute(node, "perm", combined)
    return done


def unsqueeze_pairs(graph: Graph) -> int:
    """Unsqueeze(Unsqueeze(x, a), b) -> Unsqueeze(x, a and b); Squeeze(Unsqueeze(x, a), a) -> x (axes constant)."""
    done = 0
    for node in list(graph.nodes):
        if node.op_type not in ("Unsqueeze", "Squeeze") or node.domain or len(node.input) != 2:
            continue
        parent = graph.private(node.input[0], "Unsqueeze")
        if parent is None or len(parent.input) != 2:
            continue
        first, second = graph.ints(parent.input[1]), graph.ints(node.input[1])
        rank = graph.static_rank(parent.input[0])
        if first is None or second is None or rank is None:
            continue
        if node.op_type == "Squeeze":
            if sorted(a % (rank + len(first)) for a in second) == sorted(a % (rank + len(first)) for a in first) \
                    and _bypass(graph, node, parent.input[0]):
                graph.removed[parent.output[0]] = "unsqueeze pairs"
                graph.remove([parent])
                done += 2
            continue
        final = _unsqueezed(_unsqueezed(["x"] * rank, first), second)
        axes = graph.fresh(f"{node.output[0]}_axes")
        graph.initializers[axes] = torch.tensor([i for i, d in enumerate(final) if d == "1"], dtype=torch.int64)
        graph.set_input(node, 1, axes)
        _merge_into(graph, parent, node, "unsqueeze pairs")
        done += 1
    return done


def reshape_pairs(graph: Graph) -> int:
    """Reshape(Reshape(x, s), t) -> Reshape(x, t) where ``t`` is a constant without 0 (nothing copied
    from the intermediate shape)."""
    done = 0
    for node in list(graph.nodes):
        if node.op_type != "Reshape" or node.domain:
            continue
        parent = graph.private(node.input[0], "Reshape")
        target = graph.constant(node.input[1]) if parent is not None else None
        if target is None or (0 in target.tolist() and not attribute(node, "allowzero", 0)):
            continue
        _merge_into(graph, parent, node, "reshape pairs")
        done += 1
    return done


def linear_reshapes(graph: Graph) -> int:
    """Reshape(Gemm(Reshape(x, [-1, K]), W, b), [*lead, N]) -> MatMul(x', W) + b with ``x'`` = ``x`` as
    ``[*lead, K]`` (``x`` itself where it has that shape; GPT-2's ``Conv1D``: ``view``, ``addmm``, ``view``).
    onnxscript's attention rule takes the heads' merge ``Reshape`` before the output projection for a 3-D one and
    feeds its 3-D output to the 2-D ``Gemm`` (a model ONNX Runtime does not load); ``MatMul`` takes N-D inputs, and
    ONNX Runtime makes the Gemm again when it loads a static model."""
    done = 0
    for gemm in list(graph.nodes):
        if not plain_gemm(gemm):
            continue
        flat, back = graph.private(gemm.input[0], "Reshape"), graph.sole_reader(gemm.output[0], "Reshape")
        if flat is None or back is None:
            continue
        x, weight, bias = flat.input[0], graph.symbolic_shape(gemm.input[1]), graph.symbolic_shape(gemm.input[2])
        shape, out = graph.symbolic_shape(x), graph.symbolic_shape(back.output[0])
        if shape is None or out is None or len(out) < 3 \
                or weight is None or len(weight) != 2 or bias != (weight[1],) or out[-1] != weight[1] \
                or tuple(shape[:len(out) - 1]) != out[:-1]:
            continue
        emit = Emitter(graph)
        if tuple(shape) != (*out[:-1], weight[0]):   # the heads' merge: [0, 0, K] copies the leading sizes
            x = emit.op("Reshape", x, emit.const("_const_shape", [d if isinstance(d, int) else 0 for d in out[:-1]]
                                                  + [weight[0]]), hint=f"reshape_{flat.output[0]}")
        emit.op("Add", emit.op("MatMul", x, gemm.input[1], hint=f"matmul_{gemm.output[0]}"), gemm.input[2],
                out=back.output[0])
        emit.place(flat)
        for name in (flat.output[0], gemm.output[0]):
            graph.removed[name] = "linear layers on N-D inputs"
        graph.remove([flat, gemm, back])   # back's output is the Add's now: remove() leaves its producer
        done += 1
    return done


def plain_gemm(node: onnx.NodeProto | None) -> bool:
    """``x @ W + b``: a standard Gemm of three inputs, no transposes, alpha and beta 1."""
    return node is not None and node.op_type == "Gemm" and not node.domain and len(node.input) == 3 \
        and attribute(node, "transA", 0) == 0 and attribute(node, "transB", 0) == 0 \
        and attribute(node, "alpha", 1.0) == 1.0 and attribute(node, "beta", 1.0) == 1.0


def _unsqueezed(dims: list[str], axes: list[int]) -> list[str]:
    """``dims`` with a 1 inserted at each of ``axes``, as ONNX Unsqueeze does (axes of the output, sorted)."""
    out = list(dims)
    for axis in sorted(a % (len(dims) + len(axes)) for a in axes):
        out.insert(axis, "1")
    return out
