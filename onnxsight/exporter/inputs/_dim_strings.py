"""Dimension names as strings in ``dynamic_shapes``, as torch.onnx documents them: ``{"x": {0: "batch"}}``.

torch.export takes ``Dim`` objects only. A string names a dynamic dim: it becomes one ``Dim`` per
distinct name, so the same name on two inputs is one dim (torch.export checks they agree), and the
name is the dim's name in the ONNX graph. A ``Dim`` the user made with the same name is that dim.
``Dim`` names must be Python identifiers; any other string (``"batch size"``) gets an identifier of
its own for torch.export and is written to the graph as the user spelled it.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, Mapping

import torch


def dims_from_names(dynamic_shapes: Any) -> tuple[Any, dict[str, str]]:
    """(the spec with each string replaced by its ``Dim``, {Dim name: the user's string} where they differ)."""
    if isinstance(dynamic_shapes, str) or not any(isinstance(v, str) for v in spec_leaves(dynamic_shapes)):
        return dynamic_shapes, {}
    dims: dict[str, Any] = {v.__name__: v for v in spec_leaves(dynamic_shapes) if _is_named_dim(v)}
    spelled: dict[str, str] = {}
    by_string: dict[str, Any] = {}

    def dim_for(name: str) -> Any:
        if name not in by_string:
            identifier = name if name.isidentifier() else _identifier(name, taken=set(dims) | set(spelled))
            if identifier != name:
                spelled[identifier] = name
            by_string[name] = dims.setdefault(identifier, torch.export.Dim(identifier))
        return by_string[name]

    def convert(spec: Any) -> Any:
        if isinstance(spec, str):
            return dim_for(spec)
        if isinstance(spec, Mapping):
            return {key: convert(value) for key, value in spec.items()}
        if isinstance(spec, (list, tuple)):
            return type(spec)(convert(value) for value in spec)
        return spec

    return convert(dynamic_shapes), spelled  # dict keys (argument names, axes) are never dim names


def spec_leaves(spec: Any) -> Iterator[Any]:
    """Every leaf value of a dynamic_shapes spec (dict keys are argument names or axes: not values)."""
    if isinstance(spec, Mapping):
        for value in spec.values():
            yield from spec_leaves(value)
    elif isinstance(spec, (list, tuple)):
        for value in spec:
            yield from spec_leaves(value)
    else:
        yield spec


def _is_named_dim(value: Any) -> bool:
    """A user's ``Dim("batch")`` (not Dim.AUTO/DYNAMIC/STATIC, not a derived ``2 * batch``)."""
    return isinstance(value, torch.export.Dim) and not hasattr(value, "root")


def _identifier(name: str, *, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name) or "dim"
    base = base if base.isidentifier() else f"_{base}"
    candidate, index = base, 2
    while candidate in taken:
        candidate, index = f"{base}_{index}", index + 1
    return candidate
