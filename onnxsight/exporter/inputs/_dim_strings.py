"""Dimension names as strings in ``dynamic_shapes``, as torch.onnx documents them: ``{"x": {0: "batch"}}``.

torch.export takes ``Dim`` objects only. A string names a dynamic dim: it becomes one ``Dim`` per
distinct name, so the same name on two inputs is one dim (torch.export checks they agree), and the
name is the dim's name in the ONNX graph. A ``Dim`` the user made with the same name is that dim.
``Dim`` names must be Python identifiers; any other string (``"batch size"``) gets an identifier of
its own for torch.export and is written to the graph as the user spelled it.

One name on axes whose example sizes differ cannot be one dim (PyTorch's test_api gives
``{1: "sequence"}`` to the three inputs of ``cat((x, y), 1) + z``): each size is a dim of its own,
``sequence``, ``sequence_2``, ..., and a warning says so (ARG023) (:func:`split_by_size`).
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Callable, Iterator, Mapping

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext


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


def split_by_size(ctx: DiagnosticContext, dynamic_shapes: Any, model: Any, args: tuple, kwargs: dict) -> Any:
    """The spec with a dim name given to axes of different example sizes made one name per size (ARG023)."""
    if isinstance(dynamic_shapes, str) or not any(isinstance(v, str) for v in spec_leaves(dynamic_shapes)):
        return dynamic_shapes
    try:
        positional = tuple(args) if isinstance(args, (tuple, list)) else (args,)
        bound = inspect.signature(model.forward).bind(*positional, **(kwargs or {})).arguments
    except (TypeError, ValueError, AttributeError):
        return dynamic_shapes  # the argument checks report it
    found: dict[str, list[tuple[str, int, int]]] = {}

    def record(where: str, axis: int, size: int, name: str) -> str:
        found.setdefault(name, []).append((where, axis, size))
        return name

    _each_name(dynamic_shapes, bound, record)
    taken = set(found) | {v.__name__ for v in spec_leaves(dynamic_shapes) if _is_named_dim(v)}
    renamed: dict[tuple[str, int], str] = {}
    for name, axes in found.items():
        sizes = list(dict.fromkeys(size for _, _, size in axes))
        if len(sizes) < 2:
            continue
        names = {sizes[0]: name}
        for size in sizes[1:]:
            names[size] = _identifier(name, taken=taken) if name.isidentifier() else f"{name} ({size})"
            taken.add(names[size])
        renamed.update({(where, axis): names[size] for where, axis, size in axes})
        ctx.emit(rules.DIM_NAME_ON_DIFFERENT_SIZES, name=name,
                 axes=", ".join(f"{where} axis {axis}: {size}" for where, axis, size in axes),
                 dims=", ".join(f"{names[size]!r} ({', '.join(f'{w} axis {a}' for w, a, s in axes if s == size)})"
                                for size in sizes))
    if not renamed:
        return dynamic_shapes
    return _each_name(dynamic_shapes, bound, lambda where, axis, size, name: renamed.get((where, axis), name))


def _each_name(spec: Any, bound: Mapping[str, Any], fn: Callable[[str, int, int, str], str]) -> Any:
    """``spec`` rebuilt with ``fn(input, axis, example size, name)`` in place of each dim name on a tensor axis."""
    if isinstance(spec, Mapping):
        return {key: _each(value, bound.get(key), str(key), fn) if key in bound else value
                for key, value in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_each(value, example, name, fn) for value, (name, example) in zip(spec, bound.items()))
    return spec


def _each(spec: Any, value: Any, where: str, fn: Callable[[str, int, int, str], str]) -> Any:
    if isinstance(value, torch.Tensor):
        if isinstance(spec, Mapping):
            return {axis: fn(where, axis, value.shape[axis], dim) if _on_axis(dim, axis, value) else dim
                    for axis, dim in spec.items()}
        if isinstance(spec, (list, tuple)):
            return type(spec)(fn(where, axis, value.shape[axis], dim) if _on_axis(dim, axis, value) else dim
                              for axis, dim in enumerate(spec))
        return spec
    if isinstance(spec, Mapping) and isinstance(value, Mapping):
        return {key: _each(item, value.get(key), f"{where}[{key!r}]", fn) if key in value else item
                for key, item in spec.items()}
    if isinstance(spec, (list, tuple)) and isinstance(value, (list, tuple)):
        return type(spec)(_each(item, example, f"{where}[{index}]", fn)
                          for index, (item, example) in enumerate(zip(spec, value)))
    return spec


def _on_axis(dim: Any, axis: Any, value: torch.Tensor) -> bool:
    return isinstance(dim, str) and isinstance(axis, int) and -value.dim() <= axis < value.dim()
