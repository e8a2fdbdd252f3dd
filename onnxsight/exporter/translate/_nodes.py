"""The node-level translator: calls each FX node's translation and names its outputs.

Naming contract: every FX node's output becomes the ONNX value of the same
name (``name__0``, ``name__1`` when a node has several outputs). getitem
nodes are not materialised; ``value_names`` maps every FX node name to the
ONNX value that holds it (parameters map to their state-dict names).
"""

from __future__ import annotations

import operator
from types import MappingProxyType
from typing import Any, Sequence

import onnx
import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, node_location
from onnxsight.exporter._builder import GraphBuilder, NodeInfo, Value, symbolic_shape
from onnxsight.exporter.inputs._dim_names import readable_dim, rename_symbols
from onnxsight.exporter.translate._functions import module_calls
from onnxsight.exporter._registry import Registry, UnsupportedVariant, target_key

_CORE_NAMESPACES = ("aten", "prims", "higher_order", "_operator", "builtins", "math", "torch")


def _sum_in_order(dim: str) -> str:
    """``seq + past`` as ``past + seq``: a sum of named dims in one order, whichever of two symbols torch printed first
    (a layer's key length and its value's are then one name; onnxscript's attention rule compares them)."""
    terms = dim.split(" + ")
    return " + ".join(sorted(terms)) if len(terms) > 1 and all(t.isidentifier() for t in terms) else dim


class _Failed:
    """Marks a node whose translation failed, so dependants are skipped rather than crashing."""


FAILED = _Failed()


def op_display(target: Any) -> str:
    """``aten.add.Tensor`` style name for messages."""
    key = target_key(target)
    return key.replace("::", ".", 1) if "::" in key else key


def _is_custom(target: Any) -> bool:
    return target_key(target).split("::", 1)[0].split(".", 1)[0] not in _CORE_NAMESPACES


def _meta_vals(node: torch.fx.Node) -> tuple[Any, ...]:
    val = node.meta.get("val")
    return tuple(val) if isinstance(val, (list, tuple)) else (val,)


def _val_dtype(val: Any) -> torch.dtype | None:
    if isinstance(val, torch.Tensor):
        return val.dtype
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return torch.int64
    if isinstance(val, (torch.SymFloat, float)):
        return torch.float64   # Python floats are doubles: sizes computed from them floor as eager's do
    if isinstance(val, (torch.SymBool, bool)):
        return torch.bool
    return None


def _val_shape(val: Any) -> tuple | None:
    if isinstance(val, torch.Tensor):
        return symbolic_shape(val)
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return ()
    return None


def _used_outputs(node: torch.fx.Node) -> frozenset[int] | None:
    """Indices read through getitem by a multi-output node's users; None when any user takes the whole."""
    if not isinstance(node.meta.get("val"), (list, tuple)):
        return None
    used = set()
    for user in node.users:
        if user.target is operator.getitem and not user.users:  # a getitem nothing reads (dead code)
            continue
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            return None
        used.add(user.args[1])
    return frozenset(used)


def node_metadata(node: torch.fx.Node) -> dict[str, str]:
    """metadata_props as torch.onnx writes them, so tools that read those (Model Explorer) work."""
    stack = node.meta.get("nn_module_stack")
    if stack:
        names = [name for name, _ in stack.values()]
        classes = [cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}" for _, cls in stack.values()]
        namespace = "/".join(f"{n}: {c}" for n, c in zip(names, classes)) + f"/{node.name}: {node.target}"
    else:
        names, classes, namespace = [], [], f"{node.name}: {node.target}"
    return {
        "namespace": namespace,
        "pkg.torch.onnx.class_hierarchy": repr(classes + [str(node.target)]),
        "pkg.torch.onnx.name_scopes": repr(names + [node.name]),
        "pkg.torch.onnx.fx_node": str(node.format_node()),
        "pkg.torch.onnx.stack_trace": node.meta.get("stack_trace", "") or "",
    }


def find_unsupported(graph_module: torch.fx.GraphModule, registry: Registry, opset: int,
                     ctx: DiagnosticContext) -> int:
    """Emit a diagnostic per unsupported call (every one, in every subgraph); return the count.

    A custom operator without a translation is reported once, at its first call, with the number
    of calls and the other calls' lines as related locations (a quantized model calls each
    ``quantized_decomposed`` op dozens of times: one message each said the same thing).
    """
    custom: dict[str, list[torch.fx.Node]] = {}
    count = _find_unsupported(graph_module, registry, opset, ctx, custom)
    for key, nodes in custom.items():
        calls = f"{len(nodes)} call{'s' if len(nodes) > 1 else ''}"
        related = tuple(loc for loc in (node_location(n)[0] for n in nodes[1:]) if loc is not None)
        ctx.emit(rules.UNSUPPORTED_CUSTOM_OP, node=nodes[0], related=related, op=op_display(nodes[0].target),
                 op_name=key.rsplit(".", 1)[0], calls=calls, count=len(nodes))
    return count


def _find_unsupported(graph_module: torch.fx.GraphModule, registry: Registry, opset: int,
                      ctx: DiagnosticContext, custom: dict[str, list[torch.fx.Node]]) -> int:
    count = 0
    for node in graph_module.graph.nodes:
        if node.op == "get_attr":
            sub = getattr(graph_module, node.target, None)
            if isinstance(sub, torch.fx.GraphModule):
                count += _find_unsupported(sub, registry, opset, ctx, custom)
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if registry.lookup(node.target, opset, complex=None) is not None:
            continue
        count += 1
        op = op_display(node.target)
        required = registry.min_opset(node.target)
        if required is not None and required > opset:
            ctx.emit(rules.OP_NEEDS_NEWER_OPSET, node=node, op=op, required=required, opset=opset)
        elif target_key(node.target).startswith("torchvision::"):
            _vision_op_unsupported(node, registry, op, ctx)
        elif _is_custom(node.target):
            custom.setdefault(target_key(node.target), []).append(node)
        elif (quantized := _quantized_output(node)) is not None:
            ctx.emit(rules.EAGER_QUANTIZED_MODULE, node=node, submodule=op, kind=f"makes {quantized} tensors",
                     detail="ONNX has no quantized tensor (integers with their scale and zero point in one value); "
                            "torch.ops.quantized_decomposed's op of that name returns the integers, which export")
        else:
            ctx.emit(rules.UNSUPPORTED_OP, node=node, op=op)
    return count


def _quantized_output(node: torch.fx.Node) -> torch.dtype | None:
    """The dtype of an eager-mode quantized tensor (torch.qint8...) the op is asked for, or None.

    ``torch.quantize_per_tensor(x, 0.2, 0, torch.qint8)`` captures (its meta kernel makes a qint8 tensor)
    but is eager-mode quantization as much as a quantized module is (QNT001), not a missing translation.
    """
    # NOTE: the op's fake kernel returns a float32 tensor: the quantized dtype is the op's argument
    return next((a for a in (*node.args, *node.kwargs.values()) if a in _QUANTIZED_DTYPES), None)


_QUANTIZED_DTYPES = (torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4)


def _vision_op_unsupported(node: torch.fx.Node, registry: Registry, op: str, ctx: DiagnosticContext) -> None:
    """OPS008: a torchvision op without translation, with what to do for it and the ones translated."""
    from onnxsight.exporter.ops.vision import untranslated_advice

    name = target_key(node.target).split("::", 1)[1].split(".", 1)[0]
    translated = sorted({key.split("::", 1)[1].split(".", 1)[0] for key in registry.keys()
                         if key.startswith("torchvision::")})
    ctx.emit(rules.VISION_OP_WITHOUT_TRANSLATION, node=node, op=op, advice=untranslated_advice(name),
             translated=", ".join(translated) or "none")


class Translator:
    """Walks one FX graph, calling the registry's translations with a GraphBuilder."""

    def __init__(self, registry: Registry, builder: GraphBuilder, ctx: DiagnosticContext,
                 dim_names: dict[str, str] | None = None, *, prefix: str = "") -> None:
        self.registry = registry
        self.prefix = prefix
        self.builder = builder
        self.ctx = ctx
        self.dim_names = dim_names or {}
        self.env: dict[str, Any] = {}
        self.value_names: dict[str, str] = {}
        builder.translate_subgraph = self.translate_subgraph

    # -- values ---------------------------------------------------------------------------------
    def _rename_dims(self, shape: tuple | None) -> tuple | None:
        """Symbolic dims as the ONNX model names them (``batch``, ``floor(2.1*height)``; see _dim_names)."""
        if shape is None:
            return shape
        return tuple(_sum_in_order(readable_dim(rename_symbols(d, self.dim_names))) if isinstance(d, str) else d
                     for d in shape)

    def meta_value(self, name: str, val: Any) -> Value:
        return Value(name, _val_dtype(val), self._rename_dims(_val_shape(val)))

    def arg(self, a: Any) -> Any:
        """FX argument -> translation argument (Nodes become Values/Python values, lists recursively)."""
        if isinstance(a, torch.fx.Node):
            return self.env[a.name]
        if isinstance(a, (list, tuple)):
            return type(a)(self.arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.arg(v) for k, v in a.items()}
        return a

    def _depends_on_failure(self, node: torch.fx.Node) -> bool:
        return any(self.env.get(n.name) is FAILED for n in node.all_input_nodes)

    # -- nodes -------------------------------------------------------------------------------------
    def call_function(self, node: torch.fx.Node) -> None:
        if self._depends_on_failure(node):
            self.env[node.name] = FAILED
            return
        if node.target is operator.getitem and isinstance(self.env.get(node.args[0].name), (tuple, list)):
            value = self.env[node.args[0].name][node.args[1]]
            self.env[node.name] = value
            if isinstance(value, Value):
                self.value_names[node.name] = value.name
            return
        complex_input = _complex_value((self.arg(node.args), self.arg(node.kwargs)))
        entry = self.registry.lookup(node.target, self.builder.opset, complex=complex_input is not None)
        if entry is None:  # only complex inputs get here: find_unsupported saw some variant
            self.env[node.name] = FAILED
            value = complex_input.name if complex_input is not None else node.name
            self.ctx.emit(rules.DTYPE_NOT_REPRESENTABLE, node=node,
                          value=f"{value} (input of {op_display(node.target)})",
                          dtype=str(complex_input.dtype if complex_input is not None else None))
            return
        self._translate(node, entry.fn)

    def _node_info(self, node: torch.fx.Node, vals: tuple) -> NodeInfo:
        return NodeInfo(node.name, op_display(node.target), tuple(_val_dtype(v) for v in vals),
                        tuple(self._rename_dims(_val_shape(v)) for v in vals), vals, _used_outputs(node),
                        MappingProxyType(node_metadata(node)), module_calls(node))

    def _translate(self, node: torch.fx.Node, fn: Any) -> None:
        """Call ``fn`` with ``b.node`` set to this node; bind its outputs, or report why it failed."""
        vals = _meta_vals(node)
        b = self.builder
        first_node = len(b.nodes)
        with b.translating(self._node_info(node, vals)):
            try:
                result = fn(b, *self.arg(node.args), **self.arg(node.kwargs))
            except UnsupportedVariant as exc:
                self._fail(node, first_node)
                self.ctx.emit(rules.UNSUPPORTED_OP_ARGUMENTS, node=node, op=op_display(node.target),
                              argument=exc.argument, got=exc.got, supported=exc.supported)
                return
            except Exception as exc:  # noqa: BLE001 - reported as a diagnostic at the node's source line
                self._fail(node, first_node)
                self.ctx.emit(rules.TRANSLATION_FAILED, node=node, op=op_display(node.target),
                              error_type=type(exc).__name__, error=str(exc)[:500])
                return
            self.env[node.name] = self._bind(node, result, first_node, vals)

    def _fail(self, node: torch.fx.Node, first_node: int) -> None:
        self.builder.rollback(first_node)
        self.env[node.name] = FAILED

    def _bind(self, node: torch.fx.Node, result: Any, first_node: int, vals: tuple) -> Any:
        """Name the translation's outputs after the FX node and annotate them from meta."""
        if result is None or not isinstance(result, (Value, tuple, list)):
            return result
        multi = isinstance(result, (tuple, list))
        outputs = list(result) if multi else [result]
        new_nodes = self.builder.nodes[first_node:]
        read = names_read(new_nodes)
        named: dict[str, str] = {}  # value name -> the FX name it was given in place
        bound: list[Any] = []
        for index, value in enumerate(outputs):
            if not isinstance(value, Value):
                bound.append(value)
                continue
            key = f"{node.name}__{index}" if multi else node.name
            name = self.prefix + key
            meta = self.meta_value(name, vals[index] if index < len(vals) else None)
            self._name_value(value, name, new_nodes, read, named)
            shape = meta.shape if meta.shape is not None else value.shape
            if value.name in self.builder.run_time_rank and shape is not None:  # see rank_at_run_time
                self.builder.run_time_rank.add(name)
                shape = (None,) * len(shape)
            bound.append(Value(name, meta.dtype or value.dtype, shape))
            self.builder.value_info[name] = bound[-1]
            self.value_names[key] = name
        return (tuple(bound) if isinstance(result, tuple) else bound) if multi else bound[0]

    def _name_value(self, value: Value, name: str, new_nodes: Sequence[onnx.NodeProto], read: set[str],
                    named: dict[str, str]) -> None:
        """Give the node that produced ``value`` the output name ``name``, or copy ``value`` with an Identity.

        NOTE: only a value this translation produced and nothing else knows of is named in
        place: not a cached constant (other nodes get the same Value from the cache), not one
        that a node of this translation reads, not one already named for another output. Any
        other value (an input, a weight, another FX node's value) keeps its name and the FX
        name is an Identity of it, so no name anything refers to ever changes.
        """
        b = self.builder
        if value.name == name and name in b.initializers:  # a weight computed at export under the FX name
            return
        producer = None
        if value.name not in named and value.name not in read and not b.is_shared(value):
            producer = next((n for n in new_nodes if value.name in n.output), None)
        if producer is not None:
            producer.output[list(producer.output).index(value.name)] = name
            named[value.name] = name
        else:
            b.copy_as(Value(named.get(value.name, value.name)), name)

    # -- subgraphs (If/Loop/Scan bodies) ------------------------------------------------------
    def translate_subgraph(self, builder: GraphBuilder, gm: torch.fx.GraphModule, inputs: Sequence[Any],
                           prefix: str) -> list[Any]:
        """Translate ``gm`` into ``builder`` (a child builder) with its placeholders bound to ``inputs``.

        Values inside are prefixed with ``prefix`` so they never collide with outer-scope names.
        Returns the subgraph's outputs (Values or Python values).
        """
        saved = builder.translate_subgraph
        try:
            return self._translate_subgraph(builder, gm, inputs, prefix)
        finally:  # the builder may be this graph's own (an inlined body): leave it as it was
            builder.translate_subgraph = saved

    def _translate_subgraph(self, builder: GraphBuilder, gm: torch.fx.GraphModule, inputs: Sequence[Any],
                            prefix: str) -> list[Any]:
        sub = Translator(self.registry, builder, self.ctx, self.dim_names, prefix=prefix)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for node, value in zip(placeholders, inputs):
            sub.env[node.name] = value
        outputs: list[Any] = []
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                sub.env[node.name] = getattr(gm, node.target)
            elif node.op == "call_function":
                sub.call_function(node)
                if sub.env[node.name] is FAILED:
                    raise RuntimeError(f"translating the subgraph failed at {node.format_node()}")
            elif node.op == "output":
                results = node.args[0]  # a tuple/list, or one Node (while_loop's cond_fn returns a bare tensor)
                outputs = [sub.arg(a) for a in (results if isinstance(results, (list, tuple)) else (results,))]
        return outputs


def _complex_value(args: Any) -> Value | None:
    """The first complex Value among (nested) translation arguments."""
    if isinstance(args, Value):
        return args if args.dtype is not None and args.dtype.is_complex else None
    if isinstance(args, (list, tuple)):
        return next((v for v in map(_complex_value, args) if v is not None), None)
    if isinstance(args, dict):
        return _complex_value(list(args.values()))
    return None


def names_read(nodes: Sequence[onnx.NodeProto]) -> set[str]:
    """Every value name read by ``nodes`` or by the nodes of their subgraphs (If/Loop/Scan bodies)."""
    names: set[str] = set()
    for node in nodes:
        names.update(node.input)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= names_read(attr.g.node) | {o.name for o in attr.g.output}
    return names
