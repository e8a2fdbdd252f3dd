"""A KV cache's ``dynamic_shapes`` entry in every layout people write, as the one entry per tensor torch.export needs.

While onnxsight exports, a transformers cache flattens to one tensor per layer and kind
(``_pytree_libs``: ``0.key, 0.value, 1.key, ...``; an ``EncoderDecoderCache`` its self-attention part,
then its cross-attention part), so torch.export wants the cache's entry as a list of one spec per
tensor, in that order. Peer tools write it otherwise, and each spelling is accepted here:

- one entry per tensor, in that order (torch.export's own, with our flattening);
- ``[keys, values]``: a list of the keys' entries and one of the values' (the layout of transformers'
  ``register_dynamic_cache_export_support``, onnx-diagnostic's); a dict ``{"key_cache": ..., "value_cache": ...}``;
- one ``(key, value)`` pair per layer (the legacy tuple cache);
- an ``EncoderDecoderCache``: ``[self-attention, cross-attention]``, each part in any layout above
  (or a dict ``{"self_attention_cache": ..., "cross_attention_cache": ...}``), or one
  ``(self key, self value, cross key, cross value)`` per layer (its legacy tuples).

A per-tensor entry is ``None``, a dict ``{axis: dim}`` or a tuple with one dim per axis. Where two
layouts fit (2 layers: ``[keys, values]`` and two ``(key, value)`` pairs have the same nesting),
the one listed first wins. Where none fits, ARG027 names the argument, the structure given and
the layouts accepted.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any, Mapping

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.inputs._cache_names import KINDS, PAST
from onnxsight.exporter.inputs._pytree_libs import Container, active_containers

Layout = tuple[str, Any]   # (how it reads in a message, nested lists of leaf indices)
_DICT_FORMS = (("key_cache", "value_cache"), ("self_attention_cache", "cross_attention_cache"))


def cache_shapes(ctx: DiagnosticContext, model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes: Any) -> Any:
    """``dynamic_shapes`` with each cache argument's entry as one spec per tensor (ARG027 where none fits).

    Call inside ``library_pytrees()``; anything that is not a cache's entry is returned as it was, except
    that a list given for a tuple argument (or a tuple for a list) of the same length takes the argument's
    type, and a dict leaving out an argument given (``use_cache=True``, a mask with no dynamic axis) gets it
    as ``None``, static, as ``dynamic_axes`` reads an input it does not list: torch.export refuses both,
    which says nothing about the dims.
    """
    if dynamic_shapes is None:
        return dynamic_shapes
    active = active_containers()
    try:
        signature = inspect.signature(model.forward)
        bound = signature.bind(*args, **kwargs).arguments
    except TypeError:
        return dynamic_shapes
    if isinstance(dynamic_shapes, Mapping):
        variadic = {name for name, p in signature.parameters.items() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        left_out = {name: None for name in bound if name not in dynamic_shapes and name not in variadic}
        return {**{name: _normalised(ctx, active, bound[name], spec, repr(name)) if name in bound else spec
                   for name, spec in dynamic_shapes.items()}, **left_out}
    if isinstance(dynamic_shapes, (tuple, list)) and len(dynamic_shapes) == len(bound):
        return type(dynamic_shapes)(_normalised(ctx, active, value, spec, str(index))
                                    for index, (value, spec) in enumerate(zip(bound.values(), dynamic_shapes)))
    return dynamic_shapes


def _normalised(ctx: DiagnosticContext, active: dict[type, Container], value: Any, spec: Any, where: str) -> Any:
    container = active.get(type(value))
    if container is not None:
        return _cache_entry(ctx, container, value, spec, where)
    if isinstance(value, Mapping) and isinstance(spec, Mapping):
        # ``where`` is what goes between dynamic_shapes[ and ]: "'b'][0" reads dynamic_shapes['b'][0]
        return {key: _normalised(ctx, active, value[key], item, f"{where}][{key!r}") if key in value else item
                for key, item in spec.items()}
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)) and len(value) == len(spec):
        plain = type(value) in (list, tuple) and type(spec) in (list, tuple)   # not a namedtuple's spec
        kind = type(value) if plain else type(spec)
        return kind(_normalised(ctx, active, item, item_spec, f"{where}][{index}")
                    for index, (item, item_spec) in enumerate(zip(value, spec)))
    return spec


def _cache_entry(ctx: DiagnosticContext, container: Container, cache: Any, spec: Any, where: str) -> Any:
    if spec is None:
        return None
    leaves, context = container.flatten(cache)
    names = container.leaf_names(context)
    ranks = [leaf.dim() if isinstance(leaf, torch.Tensor) else 0 for leaf in leaves]
    given = _undicted(spec)
    for _, structure in layouts(names):
        flat: list[Any] = [None] * len(leaves)
        if _fits(given, structure, ranks, flat):
            return flat
    ctx.emit(rules.CACHE_SHAPES_LAYOUT, argument=where, container=container.name, layout=_summary(names),
             given=describe(spec), accepted="; ".join(dict.fromkeys(text for text, _ in layouts(names))))
    return spec


def layouts(names: list[str]) -> list[Layout]:
    """The layouts accepted for a cache whose tensors are ``names`` (``0.key``, ``0.decoder.key``, ...), in order."""
    parts: dict[str, dict[int, dict[str, int]]] = {}
    for index, name in enumerate(names):
        layer, *middle, kind = name.split(".")
        parts.setdefault(".".join(middle), {}).setdefault(int(layer), {})[kind] = index
    flat: Layout = (f"a list of {len(names)} (one per tensor: {_span(names)})", list(range(len(names))))
    per_part = [_part_layouts(layers) for layers in parts.values()]
    if len(per_part) == 1:
        return [flat, *per_part[0][1:]]
    labels = [_part_name(part) for part in parts]
    texts = [text for text, _ in per_part[0]]
    text = f"[{', '.join(labels)}], each part {', '.join(texts[:-1])} or {texts[-1]}"
    found = [flat, *((text, [structure for _, structure in choice]) for choice in itertools.product(*per_part))]
    layer_sets = [sorted(layers) for layers in parts.values()]
    if all(layers == layer_sets[0] for layers in layer_sets):
        found.append((f"one ({', '.join(f'{label} {kind}' for label in labels for kind in KINDS)}) per layer "
                      f"({len(layer_sets[0])})",
                      [[layers[layer][kind] for layers in parts.values() for kind in KINDS] for layer in layer_sets[0]]))
    return found


def _part_layouts(layers: dict[int, dict[str, int]]) -> list[Layout]:
    order = sorted(layers)
    count = len(order) * len(KINDS)
    return [(f"a list of {count} (one per tensor)", [layers[layer][kind] for layer in order for kind in KINDS]),
            (f"[keys, values] of {len(order)} each", [[layers[layer][kind] for layer in order] for kind in KINDS]),
            (f"one (key, value) per layer ({len(order)})", [[layers[layer][kind] for kind in KINDS] for layer in order])]


def _fits(spec: Any, structure: Any, ranks: list[int], flat: list[Any]) -> bool:
    """Whether ``spec`` has ``structure``'s nesting with a per-tensor entry at each leaf; fills ``flat``."""
    if isinstance(structure, int):
        if not _tensor_spec(spec, ranks[structure]):
            return False
        flat[structure] = spec
        return True
    if not isinstance(spec, (list, tuple)) or len(spec) != len(structure):
        return False
    return all(_fits(item, sub, ranks, flat) for item, sub in zip(spec, structure))


def _tensor_spec(spec: Any, rank: int) -> bool:
    """One tensor's entry: None, ``{axis: dim}``, or one dim per axis (a Dim, an int, a hint, a name, None)."""
    if spec is None or isinstance(spec, Mapping):
        return True
    return isinstance(spec, (list, tuple)) and len(spec) == rank and \
        not any(isinstance(item, (list, tuple, Mapping)) for item in spec)


def _undicted(spec: Any) -> Any:
    """``{"key_cache": k, "value_cache": v}`` -> ``[k, v]`` (and the encoder-decoder's parts), anywhere inside."""
    if isinstance(spec, Mapping):
        for keys in _DICT_FORMS:
            if set(spec) == set(keys):
                return [_undicted(spec[key]) for key in keys]
        return spec
    if isinstance(spec, (list, tuple)):
        return [_undicted(item) for item in spec]
    return spec


def describe(spec: Any, depth: int = 0) -> str:
    """The nesting of ``spec`` in a few words: ``[[dict, dict], [dict]]``, ``[8 x dict]``."""
    if isinstance(spec, Mapping):
        return "dict"
    if isinstance(spec, (list, tuple)):
        items = [describe(item, depth + 1) for item in spec]
        if len(items) > 4 and len(set(items)) == 1:
            inner = f"{len(items)} x {items[0]}"
        else:
            inner = ", ".join(items)
        return f"[{inner}]" if isinstance(spec, list) else f"({inner}{',' if len(items) == 1 else ''})"
    return "None" if spec is None else type(spec).__name__


def _summary(names: list[str]) -> str:
    parts: dict[str, set[str]] = {}
    for name in names:
        layer, *middle, _ = name.split(".")
        parts.setdefault(".".join(middle), set()).add(layer)
    layers = " and ".join(f"{len(found)} {_part_name(part)} layers" if part else f"{len(found)} layers"
                          for part, found in parts.items())
    return f"{layers}, {len(names)} tensors"


def _part_name(part: str) -> str:
    return {"decoder": "self-attention", "encoder": "cross-attention"}.get(part, part or "cache")


def _span(names: list[str]) -> str:
    named = [f"{PAST}.{name}" for name in names]
    return f"{named[0]}, ..., {named[-1]}" if len(named) > 2 else ", ".join(named)
