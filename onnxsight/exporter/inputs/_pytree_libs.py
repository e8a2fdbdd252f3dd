"""Containers of other libraries (transformers' KV caches) flattened for the duration of an export.

torch.export only sees through inputs and outputs whose types pytree knows. transformers'
``DynamicCache`` is not registered by default, so a decode step that takes one fails capture
("Unsupported input type DynamicCache") in torch.export and in torch.onnx alike. transformers'
own exporter registers its cache classes as pytree nodes first
(``transformers.integrations.executorch.register_dynamic_cache_export_support``); we do the same,
but only for the duration of one export or one call of the program, so importing onnxsight
changes nothing globally, and a registration the user made themselves is left as it is.

Flatten order is per layer: ``key, value`` of layer 0, then of layer 1, ... (as the ONNX
inputs of decoders are laid out by optimum and ONNX Runtime GenAI), and the graph's
inputs/outputs are named ``past_key_values.{layer}.key`` / ``present.{layer}.value``, whichever
way forward() spells the argument: transformers 4.x and early 5.x ``past_key_values``, 5.24 ``cache``
(tests/exporter/test_dynamic_cache.py runs with the installed one).

Versions: the cache is read through ``Cache.layers`` of ``DynamicLayer`` / ``DynamicSlidingWindowLayer``
(transformers 4.56 and later; tested on 5.24.0, the lock, by tests/exporter/test_library_versions.py);
the removable registration uses torch's private ``_private_register_pytree_node`` (torch 2.13.0 and
2.14.1 tested, same test file).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from torch.utils import _pytree as pytree

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext

KINDS = ("key", "value")


@dataclass(frozen=True)
class Container:
    """One library type flattened as a pytree node while an export runs."""

    module: str                          # the module that defines it (must already be imported)
    name: str                            # its class name there
    flatten: Callable[[Any], tuple[list[Any], Any]]
    unflatten: Callable[[Sequence[Any], Any], Any]
    leaf_names: Callable[[Any], list[str]]    # context -> the leaves' names under the argument's name
    # forward()'s argument name -> the ONNX inputs' prefix, when they differ: transformers 5.24 renamed
    # ``past_key_values`` to ``cache``, and the graph keeps the names runtimes feed (optimum, ORT GenAI).
    renames: tuple[tuple[str, str], ...] = ()

    def resolve(self) -> type | None:
        """The type, when its library was imported (by the user: we never import a library for this)."""
        if self.module.partition(".")[0] not in sys.modules:
            return None
        try:
            module = importlib.import_module(self.module)
        except Exception:  # noqa: BLE001 - a library that does not import has nothing to flatten
            return None
        return getattr(module, self.name, None)


# -- transformers.DynamicCache ---------------------------------------------------------------------
def _dynamic_flatten(cache: Any) -> tuple[list[Any], Any]:
    leaves: list[Any] = []
    layout: list[int | None] = []
    for layer in cache.layers:
        leaves += [layer.keys, layer.values]
        layout.append(getattr(layer, "sliding_window", None))
    return leaves, tuple(layout)


def _dynamic_unflatten(leaves: Sequence[Any], layout: Any) -> Any:
    """The cache rebuilt around the leaves themselves.

    NOTE: not through ``DynamicCache(ddp_cache_data)`` as transformers' exporter does: its
    ``update`` concatenates onto a fresh ``torch.tensor([])`` per layer, a constant created while
    tracing (run_decompositions then fails: "lifted_tensor_4 is not in the constants dictionary"),
    and the concatenation raises a contiguity guard torch cannot prove for a dynamic past length.
    """
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    layers = []
    for index, window in enumerate(layout):
        keys, values = leaves[2 * index], leaves[2 * index + 1]
        if window is not None:  # its own state (a window tensor, a length) is built by update()
            layer = DynamicSlidingWindowLayer(sliding_window=window)
            if keys is not None:
                layer.update(keys, values)
        else:
            layer = DynamicLayer()
            if keys is not None:
                layer.dtype, layer.device = keys.dtype, keys.device
                layer.keys, layer.values, layer.is_initialized = keys, values, True
        layers.append(layer)
    cache = DynamicCache.__new__(DynamicCache)
    Cache.__init__(cache, layers=layers)
    return cache


def _dynamic_names(layout: Any) -> list[str]:
    return [f"{layer}.{kind}" for layer in range(len(layout)) for kind in KINDS]


# -- transformers.EncoderDecoderCache: the decoder's self-attention cache and the cross-attention one
def _encdec_flatten(cache: Any) -> tuple[list[Any], Any]:
    own, own_layout = _dynamic_flatten(cache.self_attention_cache)
    cross, cross_layout = _dynamic_flatten(cache.cross_attention_cache)
    return own + cross, (own_layout, cross_layout)


def _encdec_unflatten(leaves: Sequence[Any], layouts: Any) -> Any:
    from transformers import EncoderDecoderCache

    split = 2 * len(layouts[0])
    return EncoderDecoderCache(_dynamic_unflatten(leaves[:split], layouts[0]),
                               _dynamic_unflatten(leaves[split:], layouts[1]))


def _encdec_names(layouts: Any) -> list[str]:
    return ([f"{layer}.decoder.{kind}" for layer in range(len(layouts[0])) for kind in KINDS]
            + [f"{layer}.encoder.{kind}" for layer in range(len(layouts[1])) for kind in KINDS])


_KV_NAMES = (("cache", "past_key_values"),)
CONTAINERS: tuple[Container, ...] = (
    Container("transformers.cache_utils", "DynamicCache", _dynamic_flatten, _dynamic_unflatten, _dynamic_names,
              _KV_NAMES),
    Container("transformers.cache_utils", "EncoderDecoderCache", _encdec_flatten, _encdec_unflatten,
              _encdec_names, _KV_NAMES),
)


def _register(cls: type, container: Container) -> None:
    flatten = container.flatten

    def with_keys(value: Any) -> tuple[list[tuple[Any, Any]], Any]:
        leaves, context = flatten(value)
        names = container.leaf_names(context)
        return [(pytree.MappingKey(name), leaf) for name, leaf in zip(names, leaves)], context

    # NOTE: the Python pytree only (no C++ optree twin): it can be removed again, which
    # register_pytree_node's C++ registration cannot.
    pytree._private_register_pytree_node(cls, flatten, container.unflatten,
                                         serialized_type_name=f"{cls.__module__}.{cls.__name__}",
                                         flatten_with_keys_fn=with_keys)


@contextlib.contextmanager
def library_pytrees() -> Iterator[dict[type, Container]]:
    """Flatten the library containers that are imported with our functions; put things back on exit.

    Yields ``{type: Container}`` of every container pytree flattens with our functions now.
    A registration of the user's own (transformers' ``register_dynamic_cache_export_support``)
    is set aside for the duration and restored: its ``DynamicCache`` rebuild creates tensors while
    tracing, which run_decompositions then refuses (DEC001). Re-entrant: an inner use sees the
    outer registrations and leaves them to the outer one.
    """
    added: list[tuple[type, tuple[Any, ...] | None]] = []
    try:
        for container in CONTAINERS:
            cls = container.resolve()
            if cls is None or _ours(cls, container):
                continue
            added.append((cls, _set_aside(cls) if cls in pytree.SUPPORTED_NODES else None))
            _register(cls, container)
        yield active_containers()
    finally:
        for cls, theirs in reversed(added):
            if cls in pytree.SUPPORTED_NODES:
                pytree._deregister_pytree_node(cls)
            if theirs is not None:
                _restore(cls, theirs)


def _ours(cls: type, container: Container) -> bool:
    node = pytree.SUPPORTED_NODES.get(cls)
    return node is not None and node.flatten_fn is container.flatten


def _set_aside(cls: type) -> tuple[Any, ...]:
    """Remove another registration of ``cls`` (pytree and torch.fx's), returning what restores it."""
    from torch.fx import _pytree as fx_pytree

    saved = (pytree.SUPPORTED_NODES[cls], pytree.SUPPORTED_SERIALIZED_TYPES.get(cls),
             fx_pytree.SUPPORTED_NODES.pop(cls, None), fx_pytree.SUPPORTED_NODES_EXACT_MATCH.pop(cls, None))
    pytree._deregister_pytree_node(cls)
    return saved


def _restore(cls: type, saved: tuple[Any, ...]) -> None:
    from torch.fx import _pytree as fx_pytree

    node, serialized, fx_spec, fx_exact = saved
    pytree.SUPPORTED_NODES[cls] = node
    if serialized is not None:
        pytree.SUPPORTED_SERIALIZED_TYPES[cls] = serialized
        pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[serialized.serialized_type_name] = cls
    if fx_spec is not None:
        fx_pytree.SUPPORTED_NODES[cls] = fx_spec
        fx_pytree.SUPPORTED_NODES_EXACT_MATCH[cls] = fx_exact


# -- names ---------------------------------------------------------------------------------------------
def _walk(spec: Any, prefix: str, active: dict[type, Container], names: list[str | None],
          groups: list[tuple[str, str, list[str]]]) -> None:
    """Append one name per leaf of ``spec``: ``prefix.{leaf}`` under a container, None elsewhere.

    ``groups`` receives (argument, container type name, leaf names) per container met.
    """
    if spec.is_leaf():
        names.append(None)
        return
    container = active.get(spec.type)
    if container is not None:
        prefix = dict(container.renames).get(prefix, prefix)
        leaves = [f"{prefix}.{leaf}" for leaf in container.leaf_names(spec.context)]
        names.extend(leaves)
        groups.append((prefix, container.name, leaves))
        return
    for child in spec.children():
        _walk(child, prefix, active, names, groups)


def _report(ctx: DiagnosticContext, kind: str, groups: list[tuple[str, str, list[str]]]) -> None:
    for argument, container, leaves in groups:
        if leaves:
            layers = len({leaf[len(argument) + 1:].split(".")[0] for leaf in leaves})
            ctx.emit(rules.LIBRARY_CONTAINER_FLATTENED, kind=kind, argument=argument, container=container,
                     layers=layers, count=len(leaves), first=leaves[0], last=leaves[-1])


def _argument_names(model: Any, in_spec: Any) -> list[str]:
    """forward()'s names of the positional arguments in ``in_spec``, then the keywords'."""
    args_spec, kwargs_spec = in_spec.children()
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    positional = [params[i].name if i < len(params) else f"arg{i}" for i in range(args_spec.num_children)]
    return positional + [str(key) for key in (kwargs_spec.context or [])]


def active_containers() -> dict[type, Container]:
    """The containers pytree flattens with our functions right now (inside :func:`library_pytrees`)."""
    found: dict[type, Container] = {}
    for container in CONTAINERS:
        cls = container.resolve()
        if cls is not None and _ours(cls, container):
            found[cls] = container
    return found


def io_names(program: Any, model: Any, ctx: DiagnosticContext
             ) -> tuple[list[str | None] | None, list[str | None] | None]:
    """Names for the graph's tensor inputs and outputs that come from a library container, else None.

    Leaves of a container argument are named ``{argument}.{layer}.key`` (``past_key_values.0.key``),
    of a returned one ``present.{layer}.key``; other values get None (they keep their names). Call it
    inside :func:`library_pytrees`. (None, None) when no input or output is such a container.
    Each container flattened is noted (CAP012).
    """
    active = active_containers()
    call_spec = getattr(program, "call_spec", None)
    if not active or call_spec is None or call_spec.in_spec is None:
        return None, None
    return _input_names(program, model, active, ctx), _output_names(program, active, ctx)


def _input_names(program: Any, model: Any, active: dict[type, Container],
                 ctx: DiagnosticContext) -> list[str | None] | None:
    import torch
    from torch.export import graph_signature as gs

    in_spec = program.call_spec.in_spec
    leaf_names: list[str | None] = []
    groups: list[tuple[str, str, list[str]]] = []
    arguments = [*in_spec.children()[0].children(), *in_spec.children()[1].children()]
    for spec, argument in zip(arguments, _argument_names(model, in_spec)):
        _walk(spec, argument, active, leaf_names, groups)
    _report(ctx, "input", groups)
    user = {s.arg.name for s in program.graph_signature.input_specs
            if s.kind == gs.InputKind.USER_INPUT and hasattr(s.arg, "name")}
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in user]
    if not any(leaf_names) or len(leaf_names) != len(placeholders):
        return None
    return [name for name, node in zip(leaf_names, placeholders) if isinstance(node.meta.get("val"), torch.Tensor)]


def _output_names(program: Any, active: dict[type, Container], ctx: DiagnosticContext) -> list[str | None] | None:
    from torch.export import graph_signature as gs

    out_spec = program.call_spec.out_spec
    if out_spec is None:
        return None
    leaf_names: list[str | None] = []
    groups: list[tuple[str, str, list[str]]] = []
    _walk(out_spec, "present", active, leaf_names, groups)
    _report(ctx, "output", groups)
    specs = [s for s in program.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT]
    if not any(leaf_names) or len(leaf_names) != len(specs):
        return None
    return [name for name, spec in zip(leaf_names, specs) if isinstance(spec.arg, gs.TensorArgument)]
