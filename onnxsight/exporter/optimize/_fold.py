"""Passes that turn what is known at export into weights: Constant nodes, constant subgraphs, static shapes,
and weights stored in the layout their op reads them in (a linear layer's weight transposed once, at export).

Folded values keep their names (an FX value folded is an initializer of the same name: the
verifier counts it as a folded constant). Only the exporter's own constants are folded, never
the model's weights: ``save(weights=...)`` may replace those with a checkpoint's. A weight's
layout is the one exception: its transpose is recorded as derived from it, and
``save(weights=...)`` writes the checkpoint's tensor transposed the same way (fake weights too).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._graph import Graph, attribute

# Ops never evaluated at export: they draw random numbers, or their value is not a function of their inputs.
_NEVER = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                    "Bernoulli", "Dropout"})
# A folded value may be this large, or as large as its largest input (a buffer sliced, a mask built).
_MAX_FOLDED = 1 << 16


def tensor_of(proto: onnx.TensorProto) -> torch.Tensor | None:
    """The torch tensor of a TensorProto; None for dtypes numpy cannot carry into torch (float8, 4-bit)."""
    try:
        return _from_numpy(numpy_helper.to_array(proto))
    except (TypeError, ValueError, RuntimeError):
        return None


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    """A copy of ``array`` as a torch tensor, ml_dtypes' bfloat16 included (onnx's arrays of that dtype)."""
    if array.dtype.name == "bfloat16":   # every bfloat16 is a float32: exact both ways
        return torch.from_numpy(np.asarray(array, dtype=np.float32).copy()).to(torch.bfloat16)
    return torch.from_numpy(np.array(array, copy=True))


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` as numpy for onnx's reference evaluator: a bfloat16 as ml_dtypes' bfloat16, bit for bit."""
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def constants_to_initializers(graph: Graph) -> int:
    """Constant nodes -> initializers of the same name (ORT's fusers and other runtimes read both;
    initializers need no node and are what every tool looks for first)."""
    done = []
    for node in graph.nodes:
        if node.op_type != "Constant" or node.domain or len(node.attribute) != 1 \
                or node.attribute[0].name != "value" or node.output[0] in graph.pinned:
            continue
        tensor = tensor_of(node.attribute[0].t)
        if tensor is None:
            continue
        graph.initializers[node.output[0]] = tensor
        done.append(node)
    graph.remove(done)
    return len(done)


def fold_constants(graph: Graph, opset: int) -> int:
    """Nodes whose every input is a constant with data -> initializers holding their results."""
    folded = 0
    evaluators: dict[tuple, Any] = {}
    for node in list(graph.nodes):
        if node.domain or node.op_type in _NEVER or any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute) \
                or any(name in graph.pinned for name in node.output):  # graph outputs stay made by a node
            continue
        if node.op_type in ("Shape", "Size"):
            folded += _fold_shape(graph, node)
            continue
        inputs = [graph.constant(name) for name in node.input]
        if not inputs or any(t is None and name for t, name in zip(inputs, node.input)) or len(node.output) != 1 \
                or any(t is not None and not has_data(t) for t in inputs) or set(node.input) & graph.weights:
            continue
        largest = max((t.numel() for t in inputs if t is not None), default=0)
        try:
            evaluator, names = _evaluator(node, opset, evaluators)
            feeds = {names[n]: _to_numpy(t) for n, t in zip(node.input, inputs) if n}
            result = np.asarray(evaluator.run(None, feeds)[0])
        except Exception:  # noqa: BLE001 - a node the reference cannot run stays as it is
            continue
        if result.size > max(_MAX_FOLDED, largest) or result.dtype == object:
            continue
        try:
            graph.initializers[node.output[0]] = _from_numpy(result)
        except TypeError:  # a dtype torch has no numpy form for (float8): the node stays
            continue
        graph.remove([node])
        folded += 1
    return folded


def _evaluator(node: onnx.NodeProto, opset: int, cache: dict[tuple, Any]) -> tuple[Any, dict[str, str]]:
    """onnx's reference evaluator of ``node`` alone, its inputs renamed ``i0``, ``i1``, ... (and the names map).

    NOTE: shared by the nodes of one op with the same attributes (each layer's copy of a mask or a rotary
    table): building an evaluator costs more than running it.
    """
    from onnx.reference import ReferenceEvaluator

    names = {name: f"i{k}" for k, name in enumerate(dict.fromkeys(n for n in node.input if n))}
    inputs = [names.get(n, "") for n in node.input]
    key = (node.op_type, tuple(inputs), tuple(a.SerializeToString(deterministic=True) for a in node.attribute))
    if key not in cache:
        alone = onnx.helper.make_node(node.op_type, inputs, ["o"])
        alone.attribute.extend(node.attribute)
        cache[key] = ReferenceEvaluator(onnx.helper.make_model(onnx.helper.make_graph(
            [alone], "fold", [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                              for n in names.values()],
            [onnx.helper.make_tensor_value_info("o", onnx.TensorProto.UNDEFINED, None)]),
            opset_imports=[onnx.helper.make_opsetid("", opset)]))
    return cache[key], names


def _fold_shape(graph: Graph, node: onnx.NodeProto) -> int:
    shape = graph.static_shape(node.input[0])
    if shape is None:
        return 0
    if node.op_type == "Size":
        value = torch.tensor(int(np.prod(shape)), dtype=torch.int64)
    else:
        value = torch.tensor(shape[attribute(node, "start", 0):attribute(node, "end", len(shape))], dtype=torch.int64)
    graph.initializers[node.output[0]] = value
    graph.remove([node])
    return 1


def transposed_weights(graph: Graph) -> int:
    """Transpose of a weight -> the weight stored transposed (what MatMul reads), when every reader of the
    weight transposes it the same way: no copy is kept in the file, and no Transpose runs per inference.

    The new initializer is a view (no bytes copied until it is written), named ``<weight>.T``
    for a matrix; ``graph.derived`` records where it came from for ``save(weights=...)``.
    """
    done = 0
    for node in list(graph.nodes):
        if node.op_type != "Transpose" or node.domain or node.input[0] not in graph.initializers \
                or node.input[0] in graph.derived:
            continue
        source = node.input[0]
        perm = tuple(attribute(node, "perm", ()) or range(graph.initializers[source].dim() - 1, -1, -1))
        readers = graph.readers.get(source, [])
        if source in graph.pinned or any(r.op_type != "Transpose" or tuple(attribute(r, "perm", ())) != perm
                                         or r.output[0] in graph.pinned for r in readers):
            continue
        name = f"{source}.T" if perm == (1, 0) else graph.fresh(f"{source}.permuted")
        if name not in graph.initializers:
            graph.initializers[name] = graph.initializers[source].permute(perm)
            graph.derived[name] = (source, perm)
            graph.weights.add(name)
        for reader in readers:
            graph.replace_uses(reader.output[0], name)
        graph.remove(readers)
        done += len(readers)
    return done
