"""Attention masks computed from the sizes of the graph's inputs, checked by running them at many sizes.

With ``dynamic_shapes``, transformers builds a decoder's causal mask at run time
(``arange``, index arithmetic, comparisons, ``Expand``) from the batch and sequence
sizes, so no pass can fold it to a constant and read it. Where every graph input
that the mask's subgraph reads is read by ``Shape`` only, the mask is a function
of the input sizes alone: this module runs that subgraph with ONNX's reference
implementation at a set of sizes and says whether it is the causal mask at each.

That is a check at sample sizes, not a proof. A mask that changes its form at some
size (a sliding window, causal only below its width) holds that size as an integer
constant, so each small integer constant of the subgraph adds the sizes around it to
the samples, and a subgraph holding a larger one (other than a ``Slice`` end meaning
"to the end") is not accepted.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._graph import Graph

_SIZES = (1, 2, 3, 8)          # each symbol takes each of these (every combination)
_LARGEST = 256                 # sizes sampled around constants up to this; a larger constant is refused
_TO_THE_END = 2 ** 31 - 1      # Slice ends from here up mean "to the end", not a size
_MAX_NODES = 400
_ANY = "any"                   # a one-query mask masks nothing: any fill
_RANDOM = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


def causal_fill_at_sizes(graph: Graph, mask: str, length: str) -> float | None:
    """The masked-out value of the additive float mask ``mask`` where, at every size sampled, it is exactly the
    causal mask over ``length`` queries and as many keys (0 on and below the diagonal, one value of at most the
    dtype's lowest above it), the same for every batch row and head; None otherwise, and where ``mask`` is not
    computed from the sizes of graph inputs alone or the symbol ``length`` is not an input's dim."""
    found = _subgraph(graph, mask)
    if found is None:
        return None
    body, inputs = found
    symbols = sorted({d for name in inputs for d in graph.symbolic_shape(name) if isinstance(d, str)})
    if length not in symbols:
        return None
    extra = _sizes_near_constants(graph, body)
    if extra is None:
        return None
    samples = [dict(zip(symbols, sizes)) for sizes in itertools.product(_SIZES, repeat=len(symbols))]
    samples += [{s: size for s in symbols} for size in extra]
    try:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(_model(graph, body, inputs, mask))
        fills = set()
        for sizes in samples:
            feeds = {name: np.zeros([sizes[d] if isinstance(d, str) else d for d in graph.symbolic_shape(name)],
                                    dtype=onnx.helper.tensor_dtype_to_np_dtype(graph.elem_type(name)))
                     for name in inputs}
            fill = _causal_fill(np.asarray(evaluator.run(None, feeds)[0]), sizes[length])
            if fill is None:
                return None
            if fill != _ANY:
                fills.add(fill)
    except Exception:  # noqa: BLE001 - a mask the reference cannot run is left as it is
        return None
    return fills.pop() if len(fills) == 1 else None


def _subgraph(graph: Graph, mask: str) -> tuple[list[onnx.NodeProto], list[str]] | None:
    """The nodes computing ``mask`` (in graph order) and the graph inputs they read, where they read those inputs
    through ``Shape`` alone and every constant is an exporter constant with data; else None."""
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
            if name in graph.weights or not has_data(tensor):
                return None   # a weight a checkpoint may replace at save(), or no data to run
            continue
        if name in graph.graph_inputs:
            inputs.add(name)
            continue
        node = graph.producer.get(name)
        if node is None or node.domain or node.op_type in _RANDOM or len(nodes) >= _MAX_NODES \
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            return None
        nodes[id(node)] = node
        stack.extend(node.input)
    for node in nodes.values():
        if node.op_type != "Shape" and set(node.input) & inputs:
            return None   # the mask reads an input's values (a padding mask): not a function of sizes
    if not inputs or any(graph.symbolic_shape(n) is None or graph.elem_type(n) is None for n in inputs):
        return None
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    return sorted(nodes.values(), key=lambda n: order[id(n)]), sorted(inputs)


def _sizes_near_constants(graph: Graph, body: list[onnx.NodeProto]) -> list[int] | None:
    """Sizes around each integer constant of the subgraph (a window width, say); None where one is too large to
    run the mask at."""
    sizes: set[int] = set()
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
                    sizes |= {value - 1, value, value + 1}
    return sorted(sizes)


def _model(graph: Graph, body: list[onnx.NodeProto], inputs: list[str], mask: str) -> onnx.ModelProto:
    consts = sorted({n for node in body for n in node.input if graph.constant(n) is not None})
    proto = onnx.helper.make_graph(
        body, "sized_mask",
        [onnx.helper.make_tensor_value_info(n, graph.elem_type(n), [d if isinstance(d, int) else None
                                                                     for d in graph.symbolic_shape(n)])
         for n in inputs],
        [onnx.helper.make_tensor_value_info(mask, onnx.TensorProto.UNDEFINED, None)],
        initializer=[numpy_helper.from_array(graph.constant(n).numpy(), n) for n in consts])
    opsets = [onnx.helper.make_opsetid(d, v) for d, v in graph.opset_imports.items()]
    return onnx.helper.make_model(proto, opset_imports=opsets)


def _causal_fill(mask: np.ndarray, length: int) -> float | str | None:
    """The blocked value of ``mask`` where it is the causal mask of ``length`` rows and keys, broadcast over
    batch and heads; None otherwise."""
    if mask.dtype.kind != "f" or not 2 <= mask.ndim <= 4 or mask.shape[-2:] != (length, length):
        return None
    squares = mask.reshape(-1, length, length)
    keep = np.tril(np.ones((length, length), dtype=bool))
    if not (squares[:, keep] == 0).all():
        return None
    if length == 1:
        return _ANY   # nothing is masked
    blocked = squares[:, ~keep]
    fill = float(blocked.reshape(-1)[0])
    lowest = float(np.finfo(mask.dtype).min)
    if not (blocked == fill).all() or not (fill == -math.inf or fill <= lowest):
        return None
    return fill

