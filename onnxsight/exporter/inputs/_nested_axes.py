"""``dynamic_axes`` keys resolved as torch.onnx resolves them: ``input_names`` name the flattened inputs.

torch.onnx flattens the inputs (a dict or list argument becomes one graph input per tensor in it)
and ``input_names`` names those graph inputs in order, so ``dynamic_axes={"y": {0: "batch"}}`` with
``input_names=["a", "x", "y"]`` for ``forward(a, b: dict)`` means ``b["y"]``. A key is an
``input_names`` entry, a forward() argument holding a tensor, a leaf's path as onnxsight writes
it (``b['y']``), or the name the graph input gets without ``input_names`` (``b_y``, ``encoder_outputs_0``,
a cache's ``past_key_values.0.decoder.key``: optimum's and torch.onnx's tests key ``dynamic_axes`` so).
torch.export takes the spec of a nested input in the input's own structure
(``{"b": {"x": None, "y": {0: Dim.DYNAMIC}}}``; a cache: one entry per tensor): :func:`nested_spec` builds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch.utils import _pytree as pytree

from onnxsight.exporter.inputs._pytree_libs import active_containers


@dataclass(frozen=True)
class Leaf:
    """One tensor of the inputs: ``b['y']`` is argument ``b`` at key path ``(MappingKey('y'),)``."""

    path: str
    argument: str
    keys: tuple[Any, ...]
    value: torch.Tensor
    graph_name: str = ""    # the graph input's name without input_names: ``b_y``, ``past_key_values.0.key``


def tensor_leaves(bound: Mapping[str, Any]) -> list[Leaf]:
    """Every tensor among forward()'s bound arguments, in the order they become graph inputs."""
    leaves = []
    active = active_containers()
    for name, value in bound.items():
        container = active.get(type(value))
        for keys, leaf in pytree.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, torch.Tensor):
                graph_name = f"{dict(container.renames).get(name, name)}.{keys[0].key}" \
                    if container is not None and len(keys) == 1 and isinstance(keys[0], pytree.MappingKey) \
                    else _placeholder_name(name, keys)
                leaves.append(Leaf(f"{name}{pytree.keystr(keys)}", name, tuple(keys), leaf, graph_name))
    return leaves


def _placeholder_name(argument: str, keys: Sequence[Any]) -> str:
    """torch.export's placeholder name for a nested input (``placeholder_naming_pass``): ``b_y``, ``xs_0``."""
    def part(key: Any) -> str:
        if isinstance(key, pytree.MappingKey):
            return re.sub(r"[^a-zA-Z0-9]", "_", str(key.key))
        return str(key.idx) if isinstance(key, pytree.SequenceKey) else str(getattr(key, "name", key))

    return "_".join([argument, *(part(key).lower() for key in keys)]) if keys else argument


def resolve_leaf(key: str, bound: Mapping[str, Any], input_names: Sequence[str] | None) -> Leaf | None:
    """The tensor a dynamic_axes key names, or None when it names none (an output, a typo, a dict)."""
    leaves = tensor_leaves(bound)
    by_name = dict(zip(input_names or (), leaves))
    if key in by_name:
        return by_name[key]
    return next((leaf for leaf in leaves if leaf.path == key), None) or \
        next((leaf for leaf in leaves if leaf.keys and leaf.graph_name == key), None)


def leaves_text(bound: Mapping[str, Any], argument: str) -> str:
    """``b['x'], b['y']``: the tensors inside a nested argument, to name in a message."""
    return ", ".join(leaf.path for leaf in tensor_leaves(bound) if leaf.argument == argument) or "none"


def nested_spec(value: Any, specs: Mapping[tuple[Any, ...], Any]) -> Any:
    """The dynamic_shapes entry of a nested argument: ``specs`` (key path -> axes) in the value's structure."""
    flat, treespec = pytree.tree_flatten_with_path(value)
    entries = [specs.get(tuple(keys)) for keys, _ in flat]
    if type(value) in active_containers():
        return entries   # a cache: one entry per tensor (inputs/_cache_shapes)
    return pytree.tree_unflatten(entries, treespec)
