"""Passes for the run-time size arithmetic of exports with dynamic sizes: Reshape shapes that are constants,
sizes read once, nodes computed twice computed once.

With a dynamic batch or sequence, every ``view``/``reshape`` of the translated graph
builds its shape at run time (``Concat(Reshape(Squeeze(Shape(x)[i]), [-1]), .., [64])``),
and transformers' mask builds the same index arithmetic once per ``index`` call. The
values are the same every time; these passes compute them once, or not at all:

- a Reshape whose target dims are, by their declared (symbolic) shapes, the input's own
  dims at the same place, known ints and at most one other dim gets a constant target
  (``0`` copies the input's dim, ``-1`` the one left; ``allowzero=0``);
- ``Shape(x)[a:b]`` whose dims are named symbols reads the graph input that declares them
  (the same symbol is the same size: torch.export checks it), so equal sizes are one value;
- nodes of the same op on the same inputs with the same attributes, and exporter constants
  of the same value, are one node, one constant;
- what computes nothing: a reshape of a squeezed size back to its own shape, ``Concat`` of
  adjacent ``Shape`` slices of one value, ``x + 0`` and ``x - 0`` (integers), ``x * 1``,
  ``x / 1``, and ``Mod(i, n)`` of an index made by ``Range(0.., n, 1..)``.

A value merged into another is compared by the verifier through the one that holds it now
(``graph.aliases``), as an Identity's is.
"""

from __future__ import annotations

import math

import onnx
import torch

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._attention import _lower_bound
from onnxsight.exporter.optimize._graph import Graph, attribute

# Ops whose every run gives a new value: never merged (nor are ops of other domains, or with subgraphs).
_NOT_PURE = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                       "Bernoulli", "Dropout"})
# Exporter constants up to this many elements are merged by value.
_MAX_MERGED = 1024


def constant_reshapes(graph: Graph) -> int:
    """Reshape(x, shape computed at run time) -> Reshape(x, constant with 0 and at most one -1), by the declared
    shapes of ``x`` and of the Reshape's output; the size arithmetic it read goes with the dead code."""
    done = 0
    for node in list(graph.nodes):
        if node.op_type != "Reshape" or node.domain or len(node.input) != 2 or graph.constant(node.input[1]) is not None:
            continue
        target = _constant_target(graph.symbolic_shape(node.input[0]), graph.symbolic_shape(node.output[0]))
        if target is None:
            continue
        graph.set_input(node, 1, _int64s(graph, target))
        for attr in list(node.attribute):
            if attr.name == "allowzero":
                node.attribute.remove(attr)
        done += 1
    return done


def _constant_target(source: tuple | None, result: tuple | None) -> list[int] | None:
    """The Reshape target that gives ``result`` from ``source`` (declared shapes) without run-time sizes, or None."""
    if source is None or result is None:
        return None
    target: list[int] = []
    for i, dim in enumerate(result):
        if isinstance(dim, int):
            if dim == 0:   # a literal 0 would read as "copy" once allowzero is gone
                return None
            target.append(dim)
        elif i < len(source) and source[i] == dim:
            target.append(0)
        else:
            target.append(-1)
    return target if target.count(-1) <= 1 else None


def _int64s(graph: Graph, values: list[int]) -> str:
    """An exporter constant holding ``values`` (int64), shared with any equal one already in the graph."""
    tensor = torch.tensor(values, dtype=torch.int64)
    for name, existing in graph.initializers.items():
        if name not in graph.weights and existing.dtype == tensor.dtype and existing.shape == tensor.shape \
                and has_data(existing) and torch.equal(existing, tensor):
            return name
    name = graph.fresh("_shape_const")
    graph.initializers[name] = tensor
    return name


def shape_sources(graph: Graph) -> int:
    """Shape(x, a, b) whose dims are all named symbols -> Shape of the first graph input declaring those dims
    at consecutive places (the same size, read from one value: equal sizes become equal nodes)."""
    inputs = [(name, graph.symbolic_shape(name)) for name in (v.name for v in graph.proto.input)]
    done = 0
    for node in graph.nodes:
        if node.op_type != "Shape" or node.domain:
            continue
        shape = graph.symbolic_shape(node.input[0])
        if shape is None:
            continue
        start, end = _slice(attribute(node, "start", 0), attribute(node, "end", len(shape)), len(shape))
        dims = shape[start:end]
        if not dims or not all(isinstance(d, str) for d in dims):
            continue
        found = next(((name, at) for name, declared in inputs if declared is not None
                      for at in range(len(declared) - len(dims) + 1)
                      if tuple(declared[at:at + len(dims)]) == tuple(dims)), None)
        if found is None or (found[0] == node.input[0] and found[1] == start
                             and (start, end) == (attribute(node, "start", 0), attribute(node, "end", None))):
            continue
        name, at = found
        graph.set_input(node, 0, name)
        for attr in list(node.attribute):
            if attr.name in ("start", "end"):
                node.attribute.remove(attr)
        node.attribute.extend([onnx.helper.make_attribute("start", at),
                               onnx.helper.make_attribute("end", at + len(dims))])
        done += 1
    return done


def _slice(start: int, end: int, rank: int) -> tuple[int, int]:
    """Shape's start/end clamped to [0, rank] as the op reads them (negative: from the end)."""
    start, end = start + rank if start < 0 else start, end + rank if end < 0 else end
    return max(0, min(start, rank)), max(0, min(end, rank))


def common_subexpressions(graph: Graph) -> int:
    """Exporter constants of equal value -> one; nodes of the same op, inputs and attributes -> the first."""
    done = _merge_constants(graph)
    seen: dict[tuple, onnx.NodeProto] = {}
    doomed = []
    for node in graph.nodes:
        if node.domain or node.op_type in _NOT_PURE \
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue
        key = (node.op_type, tuple(node.input), len(node.output),
               tuple(sorted(a.SerializeToString(deterministic=True) for a in node.attribute)))
        first = seen.setdefault(key, node)
        if first is node or any(o in graph.pinned for o in node.output) \
                or any(o and not kept for o, kept in zip(node.output, first.output)):
            continue
        for old, new in zip(node.output, first.output):
            if old:
                graph.replace_uses(old, new)
        doomed.append(node)
    graph.remove(doomed)
    return done + len(doomed)


def _merge_constants(graph: Graph) -> int:
    seen: dict[tuple, str] = {}
    done = 0
    for name, tensor in list(graph.initializers.items()):
        if name in graph.weights or name in graph.pinned or tensor.numel() > _MAX_MERGED or not has_data(tensor):
            continue
        flat = tensor.reshape(-1)
        data = flat.new_empty(flat.shape).copy_(flat).view(torch.uint8).numpy().tobytes()   # bfloat16 too
        key = (str(tensor.dtype), tuple(tensor.shape), data)
        first = seen.setdefault(key, name)
        if first != name and graph.readers.get(name):
            graph.replace_uses(name, first)
            done += 1
    return done


def no_ops(graph: Graph) -> int:
    """Size and index arithmetic that computes nothing (see the module docstring) -> its input."""
    done = 0
    for node in list(graph.nodes):
        if node.domain or node.output[0] in graph.pinned:
            continue
        source = _same_value(graph, node)
        if source is None:
            continue
        if isinstance(source, onnx.NodeProto):   # a node that does it in one
            graph.nodes[graph.nodes.index(node)] = source
            graph.remove([node])
            graph.index(source)
        else:
            graph.replace_uses(node.output[0], source)
            graph.remove([node])
        done += 1
    return done


def _same_value(graph: Graph, node: onnx.NodeProto) -> str | onnx.NodeProto | None:
    """The value ``node``'s output equals (or one node computing it from fewer steps), or None."""
    op = node.op_type
    if op in ("Add", "Sub", "Mul", "Div") and len(node.input) == 2:
        neutral = 1 if op in ("Mul", "Div") else 0
        indices = (1, 0) if op in ("Add", "Mul") else (1,)
        for index in indices:
            other = node.input[1 - index]
            if graph.scalar(node.input[index]) == neutral and _keeps(graph, other, node.output[0]) \
                    and (neutral == 1 or not _is_float(graph, other)):   # -0.0 + 0 is +0.0
                return other
        return None
    if op == "Mod" and len(node.input) == 2 and not attribute(node, "fmod", 0):
        return node.input[0] if _below(graph, node.input[0], node.input[1]) else None
    if op in ("Reshape", "Unsqueeze") and len(node.input) == 2:
        parent = graph.producer.get(node.input[0])
        if parent is None or parent.domain or parent.op_type not in ("Squeeze", "Unsqueeze", "Reshape"):
            return None
        source, shape = parent.input[0], graph.static_shape(parent.input[0])
        result = _reshaped(shape, graph.constant(node.input[1])) if op == "Reshape" else graph.static_shape(node.output[0])
        return source if shape is not None and result == shape else None
    if op == "Concat" and len(node.input) > 1:
        return _shape_run(graph, node)
    return None


def _reshaped(shape: tuple[int, ...] | None, target: torch.Tensor | None) -> tuple[int, ...] | None:
    """The shape Reshape(x of ``shape``, constant ``target``) gives where no dim is copied (no 0); else None."""
    if shape is None or target is None or not has_data(target) or target.dim() != 1:
        return None
    dims = [int(d) for d in target.tolist()]
    if 0 in dims or dims.count(-1) > 1:
        return None
    total, known = math.prod(shape), math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or total % known:
            return None
        dims[dims.index(-1)] = total // known
    return tuple(dims)


def _is_float(graph: Graph, name: str) -> bool:
    return graph.elem_type(name) not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
                                         onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def _keeps(graph: Graph, value: str, result: str) -> bool:
    """Whether ``result`` has ``value``'s declared shape and dtype (the constant operand broadcast nothing)."""
    shape = graph.symbolic_shape(value)
    return shape is not None and shape == graph.symbolic_shape(result) \
        and graph.elem_type(value) is not None and graph.elem_type(value) == graph.elem_type(result)


def _below(graph: Graph, index: str, limit: str) -> bool:
    """Whether every element of ``index`` is in [0, ``limit``): reshapes of ``Range(start >= 0, limit, step > 0)``."""
    node = graph.producer.get(index)
    for _ in range(4):
        if node is None or node.domain or node.op_type not in ("Unsqueeze", "Reshape", "Squeeze"):
            break
        node = graph.producer.get(node.input[0])
    if node is None or node.domain or node.op_type != "Range" or node.input[1] != limit:
        return False
    low = _lower_bound(graph, node.output[0])
    return low is not None and low >= 0


def _shape_run(graph: Graph, node: onnx.NodeProto) -> onnx.NodeProto | None:
    """Concat(Shape(x, a, b), Shape(x, b, c), ..) -> Shape(x, a, c) (one node, the Concat's output)."""
    parts = [graph.producer.get(name) for name in node.input]
    if any(p is None or p.op_type != "Shape" or p.domain or p.input[0] != parts[0].input[0] for p in parts):
        return None
    rank = graph.static_rank(parts[0].input[0])
    if rank is None:
        return None
    spans = [_slice(attribute(p, "start", 0), attribute(p, "end", rank), rank) for p in parts]
    if any(a[1] != b[0] for a, b in zip(spans, spans[1:])) or any(s >= e for s, e in spans):
        return None
    return onnx.helper.make_node("Shape", [parts[0].input[0]], [node.output[0]], name=node.name,
                                 start=spans[0][0], end=spans[-1][1])
