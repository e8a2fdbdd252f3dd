"""GraphBuilder: what translation functions use to emit ONNX nodes.

Translations receive the builder as their first argument (never a global
tracer). Every value is a :class:`Value` carrying its name, torch dtype and
shape (ints for static dims, strings for symbolic ones) so translations can
decide casts and ranks without running shape inference.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import onnx
import torch
from onnx import helper

from onnxsight.exporter import _dtypes

@dataclass(eq=False)
class Value:
    """An ONNX value during translation. ``shape`` is None when the rank is unknown.

    NOTE: ONNX Runtime runs no complex dtype, so a Value whose ``dtype`` is
    complex is carried as a real tensor of the matching real dtype with a
    trailing dimension of 2 (real, imaginary), as ``torch.view_as_real`` lays it
    out. ``dtype`` and ``shape`` stay PyTorch's (logical) ones; :func:`value_info`
    writes the real-pair type. Ops with complex inputs use the translations
    registered with ``complex=True``; any other op on a complex value is a DTY001 error.
    """

    name: str
    dtype: torch.dtype | None = None
    shape: tuple[int | str | None, ...] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.dtype}, {self.shape})"


@dataclass(frozen=True)
class NodeInfo:
    """What the translator knows of the FX node being translated (from its ``val`` meta).

    Translations read it as ``b.node`` (``b.node.out_dtype``, ``b.node.output_used(1)``);
    it is set only for the duration of one translation call (:meth:`GraphBuilder.translating`).
    """

    name: str
    target: str
    out_dtypes: tuple[torch.dtype | None, ...] = ()
    out_shapes: tuple[tuple[int | str | None, ...] | None, ...] = ()
    meta_vals: tuple[Any, ...] = ()
    # Indices of the outputs some FX user reads (through getitem); None when unknown or all.
    used_outputs: frozenset[int] | None = None
    # metadata_props written on every ONNX node the translation emits (module scope, source line).
    metadata: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # The module calls the node ran under, outermost first (``_functions.ModuleCall``s): module_functions=.
    module_stack: tuple[Any, ...] = ()

    @property
    def out_dtype(self) -> torch.dtype | None:
        """dtype of the node's (first) output, from its meta; use it instead of guessing."""
        return self.out_dtypes[0] if self.out_dtypes else None

    @property
    def out_shape(self) -> tuple[int | str | None, ...] | None:
        """Shape of the node's (first) output, symbolic dims as strings."""
        return self.out_shapes[0] if self.out_shapes else None

    def output_used(self, index: int) -> bool:
        """Whether output ``index`` is read; translations may return None for unread ones."""
        return self.used_outputs is None or index in self.used_outputs


@dataclass
class _Graph:
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    value_info: dict[str, Value] = field(default_factory=dict)


def torch_to_tensor_proto(tensor: torch.Tensor, name: str) -> onnx.TensorProto:
    """TensorProto holding ``tensor``'s bytes (one copy; bfloat16/float8 handled via raw bytes)."""
    tensor = tensor.detach().cpu().contiguous()
    proto = onnx.TensorProto(name=name, data_type=_dtypes.to_onnx(tensor.dtype),
                             dims=_dtypes.onnx_shape(tensor.dtype, tensor.shape))
    if tensor.numel():
        proto.raw_data = tensor_bytes_view(tensor).tobytes()
    return proto


def tensor_bytes_view(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's bytes as a uint8 numpy array sharing its storage (contiguous CPU tensors)."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if flat.stride() != (1,):   # one element or none, whose odd stride contiguous() keeps (a folded slice of one)
        flat = flat.clone(memory_format=torch.contiguous_format)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return flat.view(torch.uint8).numpy()


def symbolic_shape(val: Any) -> tuple[int | str | None, ...] | None:
    """Shape of a FakeTensor meta value with symbolic dims as their sympy names."""
    shape = getattr(val, "shape", None)
    if shape is None:
        return None
    dims: list[int | str | None] = []
    for dim in shape:
        if isinstance(dim, int):
            dims.append(dim)
        else:
            node = getattr(dim, "node", None)
            expr = getattr(node, "_expr", None) or getattr(node, "expr", None)
            if expr is not None and getattr(expr, "is_number", False):
                dims.append(int(expr))
            else:
                dims.append(str(expr) if expr is not None else str(dim))
    return tuple(dims)


class GraphBuilder:
    """Emits ONNX nodes for one graph (the main graph or a subgraph of If/Loop/Scan).

    Translations call :meth:`op` (``b.op("Add", x, y)``), :meth:`const`,
    :meth:`cast` and friends, and read the FX node they translate as
    :attr:`node`; the translator names their results after the FX node.
    """

    def __init__(self, opset: int, *, parent: GraphBuilder | None = None,
                 domains: dict[str, int] | None = None) -> None:
        self.opset = opset
        self.parent = parent
        self.domains: dict[str, int] = domains if domains is not None else {"": opset}
        self._counter = parent._counter if parent else itertools.count()
        self._graph = _Graph()
        self.initializers: dict[str, torch.Tensor] = {}
        self._constants: dict[tuple, Value] = {}
        self._shared: set[str] = set()  # names of the cached constants
        # Values whose rank is decided when the model runs (a squeeze of a dim that may be 1): rank_at_run_time.
        self.run_time_rank: set[str] = set()
        # ONNX node name -> the FX node it was emitted for (module calls, values; module_functions=: _functions.py).
        self.origins: dict[str, NodeInfo] = {}
        self._node: NodeInfo | None = parent._node if parent else None
        # Set by the translator: translate_subgraph(child_builder, graph_module, inputs, prefix) -> outputs.
        self.translate_subgraph: Any = None

    # -- the node being translated ---------------------------------------------------------------
    @property
    def node(self) -> NodeInfo:
        """The FX node whose translation is running (its output dtypes/shapes, which outputs are read)."""
        if self._node is None:
            raise RuntimeError("b.node is only available while a translation runs")
        return self._node

    @contextlib.contextmanager
    def translating(self, node: NodeInfo) -> Iterator[NodeInfo]:
        """Make ``node`` this builder's :attr:`node` for one translation call; the previous one comes back after.

        NOTE: a context manager rather than an argument keeps translations' signatures
        the ATen schema (custom translations are ``fn(b, *args)``); nesting (a translation
        inlining a subgraph into this builder) restores the outer node on exit.
        """
        saved, self._node = self._node, node
        try:
            yield node
        finally:
            self._node = saved

    def is_shared(self, value: Value) -> bool:
        """Whether ``value`` is handed out to several callers (a deduplicated constant): never rename it."""
        return value.name in self._shared

    def rank_at_run_time(self, value: Value) -> Value:
        """Mark ``value`` as shaped only when the model runs (its rank included); returns it.

        The translator then declares none of its dims (so that the optimizer passes trust none), with the
        rank it has in the captured graph, which the translations after it see: the runtime's wherever
        the dims take the graph's assumption (a graph output must declare a rank).
        """
        self.run_time_rank.add(value.name)
        return value

    def rollback(self, mark: int) -> None:
        """Drop the nodes emitted since ``len(self.nodes) == mark`` (a failed translation) and what cached them."""
        dropped = {name for node in self.nodes[mark:] for name in node.output}
        del self._graph.nodes[mark:]
        self._constants = {k: v for k, v in self._constants.items() if v.name not in dropped}
        self._shared -= dropped

    def copy_as(self, value: Value, name: str) -> None:
        """An Identity from ``value`` to a new value called ``name`` (for values that keep their own name)."""
        self._append(helper.make_node("Identity", [value.name], [name], name=self.fresh("Identity")))

    def _append(self, node: onnx.NodeProto) -> None:
        metadata = self._node.metadata if self._node is not None else {}
        if self._node is not None:
            self.origins[node.name] = self._node
        for key, text in metadata.items():
            entry = node.metadata_props.add()
            entry.key, entry.value = key, text
        self._graph.nodes.append(node)

    # -- naming -----------------------------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        return f"_{hint}_{next(self._counter)}"

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return self._graph.nodes

    @property
    def value_info(self) -> dict[str, Value]:
        return self._graph.value_info

    # -- emitting -----------------------------------------------------------------------------
    def op(self, op_type: str, *inputs: Value | None, outputs: int = 1, domain: str = "",
           domain_version: int | None = None, dtype: torch.dtype | None = None, shape: tuple | None = None,
           **attributes: Any) -> Any:
        """Emit one node; returns its Value, or a tuple of Values when ``outputs > 1``.

        ``None`` inputs become ONNX's empty optional input. ``dtype``/``shape``
        annotate the (first) output; by default the dtype of the first input is
        assumed for ops that keep dtypes, and translations set it otherwise.
        A custom ``domain`` is imported at ``domain_version`` (default 1).
        """
        if domain:
            known = self.domains.get(domain)
            if domain_version is not None and known is not None and known != domain_version:
                raise ValueError(f"domain {domain} is already imported at version {known}, not {domain_version}")
            self.domains[domain] = domain_version or known or 1
        inputs = self._legal_inputs(op_type, domain, inputs)
        names = []
        for value in inputs:
            if value is None:
                names.append("")
            elif isinstance(value, Value):
                names.append(value.name)
            else:
                raise TypeError(f"{op_type} input must be a Value or None, got {type(value).__name__}: {value!r}"
                                " (use b.const(...) for constants)")
        while names and names[-1] == "":
            names.pop()  # trailing optional inputs are left out (ORT 1.31 crashes on LayerNormalization(x, s, ""))
        out_values = tuple(Value(self.fresh(op_type.lower())) for _ in range(outputs))
        attrs = {k: v for k, v in attributes.items() if v is not None}
        node = helper.make_node(op_type, names, [v.name for v in out_values], name=self.fresh(op_type),
                                domain=domain or None, **attrs)
        self._append(node)
        first = next((v for v in inputs if isinstance(v, Value)), None)
        out_values[0].dtype = dtype if dtype is not None else (first.dtype if first is not None else None)
        out_values[0].shape = shape
        return out_values[0] if outputs == 1 else out_values

    def _legal_inputs(self, op_type: str, domain: str, inputs: tuple[Value | None, ...]) -> tuple[Value | None, ...]:
        """IsInf takes float16/bfloat16 only from opset 20: before, such an input is widened to float32
        first (exact: a half-precision value is infinite exactly when its float32 value is)."""
        first = inputs[0] if inputs else None
        if (op_type == "IsInf" and not domain and self.opset < 20 and isinstance(first, Value)
                and first.dtype in (torch.float16, torch.bfloat16)):
            return (self.cast(first, torch.float32), *inputs[1:])
        return inputs

    def subgraph(self) -> GraphBuilder:
        """A builder for an If/Loop/Scan body that shares names and opsets with this one."""
        child = GraphBuilder(self.opset, parent=self, domains=self.domains)
        child.translate_subgraph = self.translate_subgraph
        return child

    def make_graph(self, name: str, inputs: Sequence[Value], outputs: Sequence[Value]) -> onnx.GraphProto:
        """Build a GraphProto of this builder's nodes (used for subgraphs; no initializers)."""
        return helper.make_graph(self.nodes, name, [value_info(v) for v in inputs],
                                 [value_info(v) for v in outputs])

    # -- constants --------------------------------------------------------------------------
    def const(self, value: Any, dtype: torch.dtype | None = None) -> Value:
        """A Constant node holding ``value`` (Python number/list, numpy array or tensor); deduplicated."""
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu()
            if dtype is not None:
                tensor = tensor.to(dtype)
        else:
            if dtype is None:
                dtype = _infer_dtype(value)
            tensor = torch.tensor(np.asarray(value).tolist() if isinstance(value, np.ndarray) else value, dtype=dtype)
        key = (tensor.dtype, tuple(tensor.shape), tensor_bytes_view(tensor).tobytes() if tensor.numel() else b"")
        if key in self._constants:
            return self._constants[key]
        name = self.fresh("const")
        node = helper.make_node("Constant", [], [name], name=self.fresh("Constant"),
                                value=torch_to_tensor_proto(tensor, name))
        self._graph.nodes.append(node)  # shared by every later user: no one node's metadata
        result = Value(name, tensor.dtype, tuple(tensor.shape))
        self._constants[key] = result
        self._shared.add(name)
        return result

    def scalar(self, value: Any, like: Value | torch.dtype | None) -> Value:
        """A 0-d constant with the dtype of ``like`` (a Value or a dtype); a Value passes through.

        A floating Value (a SymFloat, float64) is cast to a floating ``like``'s dtype, as
        torch treats a Python float beside a float32 tensor.
        """
        if isinstance(value, Value):
            dtype = like.dtype if isinstance(like, Value) else like
            if dtype is not None and dtype.is_floating_point and value.dtype is not None and \
                    value.dtype.is_floating_point and value.dtype != dtype and value.rank == 0:
                return self.cast(value, dtype)
            return value
        dtype = like.dtype if isinstance(like, Value) else like
        return self.const(value, dtype or _infer_dtype(value))

    def int_list(self, items: Sequence[int | Value] | Value) -> Value:
        """A 1-D int64 tensor from a list mixing Python ints and 0-d/1-d int Values (symbolic sizes)."""
        if isinstance(items, Value):
            return self.cast(items, torch.int64)
        if all(isinstance(i, int) for i in items):
            return self.const(list(items), torch.int64)
        parts = []
        for item in items:
            if isinstance(item, Value):
                item = self.cast(item, torch.int64)
                parts.append(self.op("Reshape", item, self.const([-1], torch.int64), shape=(1,)))
            else:
                parts.append(self.const([int(item)], torch.int64))
        return self.op("Concat", *parts, axis=0, dtype=torch.int64, shape=(len(items),))

    # -- helpers translations share ------------------------------------------------------------
    def cast(self, value: Value, dtype: torch.dtype) -> Value:
        """Cast unless already of ``dtype``; complex values are (real, imaginary) pairs (see Value)."""
        if value.dtype == dtype:
            return value
        source_complex = value.dtype is not None and value.dtype.is_complex
        if dtype.is_complex and not source_complex:  # x -> (x, 0) in the pair's real dtype
            part = self.cast(value, dtype.to_real())
            pair = self.op("Unsqueeze", part, self.const([-1], torch.int64))
            rank = value.rank
            pads = self.const([0] * (rank + 1) + [0] * rank + [1], torch.int64) if rank is not None else None
            if pads is None:
                raise ValueError(f"casting {value.name} to {dtype} needs its rank")
            return self.op("Pad", pair, pads, dtype=dtype, shape=value.shape)
        if source_complex and not dtype.is_complex:  # torch keeps the real part
            real = self.op("Gather", value, self.const(0, torch.int64), axis=-1, dtype=value.dtype.to_real(),
                           shape=value.shape)
            return self.cast(real, dtype)
        if source_complex and dtype.is_complex:  # complex64 <-> complex128: cast both parts
            return self.op("Cast", value, to=_dtypes.to_onnx(dtype.to_real()), dtype=dtype, shape=value.shape)
        return self.op("Cast", value, to=_dtypes.to_onnx(dtype), dtype=dtype, shape=value.shape)

    def promote(self, *args: Any) -> tuple[torch.dtype, list[Value]]:
        """Apply PyTorch's type promotion to tensors and Python scalars; return (dtype, Values)."""
        dtype = result_dtype(*args)
        return dtype, [self.scalar(a, dtype) if not isinstance(a, Value) else self.cast(a, dtype) for a in args]

    def shape_of(self, value: Value, start: int | None = None, end: int | None = None) -> Value:
        """Runtime shape (int64 1-D) of ``value``, optionally sliced."""
        return self.op("Shape", value, start=start, end=end, dtype=torch.int64)

    def rank_of(self, value: Value) -> int:
        if value.rank is None:
            raise ValueError(f"rank of {value.name} is unknown")
        return value.rank


def value_info(value: Value) -> onnx.ValueInfoProto:
    """ValueInfoProto with dtype and (symbolic) shape; unknown parts left out."""
    dtype, shape = value.dtype, value.shape
    if dtype is not None and dtype.is_complex:  # carried as (real, imaginary) pairs, see Value
        dtype, shape = dtype.to_real(), None if shape is None else (*shape, 2)
    elem = _dtypes.to_onnx(dtype) if dtype is not None else onnx.TensorProto.UNDEFINED
    shape = None if shape is None else [d if isinstance(d, (int, str)) else None for d in _dtypes.onnx_shape(dtype, shape)]
    return helper.make_tensor_value_info(value.name, elem, shape)


def _infer_dtype(value: Any) -> torch.dtype:
    flat = value
    while isinstance(flat, (list, tuple)) and flat:
        flat = flat[0]
    if isinstance(flat, np.ndarray):
        return torch.from_numpy(np.asarray(flat)).dtype
    if isinstance(flat, bool):
        return torch.bool
    if isinstance(flat, int):
        return torch.int64
    return torch.float32


def result_dtype(*args: Any) -> torch.dtype:
    """PyTorch's result dtype for tensors (Values) and Python scalars, by torch's own rules."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    fakes: list[Any] = []
    for arg in args:
        if isinstance(arg, Value):
            shape = () if arg.rank == 0 else (1,)
            fakes.append(torch.empty(shape, dtype=arg.dtype or torch.float32, device="meta"))
        elif isinstance(arg, (bool, int, float, complex)):
            fakes.append(arg)
    if not fakes:
        return torch.float32
    _, dtype = elementwise_dtypes(*fakes, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    return dtype
