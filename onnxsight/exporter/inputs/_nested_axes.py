"""``dynamic_axes`` keys resolved as torch.onnx resolves them: ``input_names`` name the flattened inputs.

torch.onnx flattens the inputs (a dict or list argument becomes one graph input per tensor in it)
and ``input_names`` names those graph inputs in order, so ``dynamic_axes={"y": {0: "batch"}}`` with
``input_names=["a", "x", "y"]`` for ``forward(a, b: dict)`` means ``b["y"]``. A key is an
``input_names`` entry, a forward() argument holding a tensor, or a leaf's path as onnxsight writes
it (``b['y']``). torch.export takes the spec of a nested input in the input's own structure
(``{"b": {"x": None, "y": {0: Dim.DYNAMIC}}}``): :func:`nested_spec` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
from torch.utils import _pytree as pytree


@dataclass(frozen=True)
class Leaf:
    """One tensor of the inputs: ``b['y']`` is argument ``b`` at key path ``(MappingKey('y'),)``."""

    path: str
    argument: str
    keys: tuple[Any, ...]
    value: torch.Tensor


def tensor_leaves(bound: Mapping[str, Any]) -> list[Leaf]:
    """Every tensor among forward()'s bound arguments, in the order they become graph inputs."""
    leaves = []
    for name, value in bound.items():
        for keys, leaf in pytree.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, torch.Tensor):
                leaves.append(Leaf(f"{name}{pytree.keystr(keys)}", name, tuple(keys), leaf))
    return leaves


def resolve_leaf(key: str, bound: Mapping[str, Any], input_names: Sequence[str] | None) -> Leaf | None:
    """The tensor a dynamic_axes key names, or None when it names none (an output, a typo, a dict)."""
    leaves = tensor_leaves(bound)
    by_name = dict(zip(input_names or (), leaves))
    if key in by_name:
        return by_name[key]
    return next((leaf for leaf in leaves if leaf.path == key), None)


def leaves_text(bound: Mapping[str, Any], argument: str) -> str:
    """``b['x'], b['y']``: the tensors inside a nested argument, to name in a message."""
    return ", ".join(leaf.path for leaf in tensor_leaves(bound) if leaf.argument == argument) or "none"


def nested_spec(value: Any, specs: Mapping[tuple[Any, ...], Any]) -> Any:
    """The dynamic_shapes entry of a nested argument: ``specs`` (key path -> axes) in the value's structure."""
    flat, treespec = pytree.tree_flatten_with_path(value)
    return pytree.tree_unflatten([specs.get(tuple(keys)) for keys, _ in flat], treespec)
