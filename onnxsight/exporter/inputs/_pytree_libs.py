"""Containers of other libraries (transformers' KV caches) flattened for the duration of an export.

torch.export only sees through inputs and outputs whose types pytree knows. transformers'
``DynamicCache`` is not registered by default, so a decode step that takes one fails capture
("Unsupported input type DynamicCache") in torch.export and in torch.onnx alike. transformers'
own exporter registers its cache classes as pytree nodes first
(``transformers.integrations.executorch.register_dynamic_cache_export_support``); we do the same,
but only for the duration of one export or one call of the program, so importing onnxsight
changes nothing globally, and a registration the user made themselves is left as it is.

Flatten order is per layer: ``key, value`` of layer 0, then of layer 1, ... (as the ONNX
inputs of decoders are laid out by optimum and ONNX Runtime GenAI); an ``EncoderDecoderCache``
is its self-attention part, then its cross-attention part. The graph's inputs/outputs are named
by ``_cache_names`` (``past_key_values.{layer}.key``, ``present.{layer}.decoder.value``; ``_io_names``
applies them), whichever way forward() spells the argument: transformers 4.x and early 5.x
``past_key_values``, 5.24 ``cache`` (tests/exporter/test_dynamic_cache.py runs with the installed one).

Versions: the cache is read through ``Cache.layers`` of ``DynamicLayer`` / ``DynamicSlidingWindowLayer``
(transformers 4.56 and later; tested on 5.24.0, the lock, by tests/exporter/test_library_versions.py);
the removable registration uses torch's private ``_private_register_pytree_node`` (torch 2.13.0 and
2.14.1 tested, same test file).
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from torch.utils import _pytree as pytree

from onnxsight.exporter.inputs._cache_names import CROSS_ATTENTION, PAST, SELF_ATTENTION, cache_leaf_names


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
    return cache_leaf_names(len(layout))


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
    return cache_leaf_names(len(layouts[0]), SELF_ATTENTION) + cache_leaf_names(len(layouts[1]), CROSS_ATTENTION)


_KV_NAMES = (("cache", PAST),)
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


def active_containers() -> dict[type, Container]:
    """The containers pytree flattens with our functions right now (inside :func:`library_pytrees`)."""
    found: dict[type, Container] = {}
    for container in CONTAINERS:
        cls = container.resolve()
        if cls is not None and _ours(cls, container):
            found[cls] = container
    return found
