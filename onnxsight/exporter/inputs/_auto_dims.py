"""``dynamic_shapes="auto"``: which dims are dynamic, read from examples of real calls.

The user passes the inputs of a few real calls (``examples=[args2, args3]``) beside the
export's ``args``; a dim whose size differs between them is dynamic. Dims whose sizes agree
in every example share one ``torch.export.Dim`` (a batch that all inputs carry is one
symbol, not one per input, so the graph does not need guards relating them). The names are
the user's: ``batch`` for an axis 0 that every tensor input carries and that varies
together, else ``<argument>_dim<axis>`` (``input_ids_dim1``), which is what the ONNX model's
inputs will show. Anything that cannot be compared (another nesting, rank or dtype, a Python
value that differs) is ARG003 naming the argument: those would be baked into the graph.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Mapping, Sequence

import torch
from torch.utils import _pytree as pytree

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext

#: One example as the user gave it: ``args`` (a tuple or one tensor), or ``(args, kwargs)``
#: when the export was given kwargs.
Example = Any


def example_inputs(example: Example, with_kwargs: bool) -> tuple[tuple, dict]:
    """An example as ``(args, kwargs)``: ``(args, kwargs)`` pairs when the export has kwargs, else args."""
    if with_kwargs:
        if not (isinstance(example, (tuple, list)) and len(example) == 2 and isinstance(example[1], Mapping)):
            raise TypeError("with kwargs, each example is an (args, kwargs) pair")
        args, kwargs = example
        return (tuple(args) if isinstance(args, (tuple, list)) else (args,)), dict(kwargs)
    return (tuple(example) if isinstance(example, tuple) else (example,)), {}


def infer_dynamic_shapes(ctx: DiagnosticContext, model: torch.nn.Module, args: tuple, kwargs: dict,
                         examples: Sequence[tuple[tuple, dict]]) -> dict[str, Any] | None:
    """torch.export ``dynamic_shapes`` (keyed by forward()'s arguments) for the dims that vary.

    ``args``/``kwargs`` are the export's inputs, ``examples`` the others as ``(args, kwargs)``.
    Emits ARG003 and returns None when an example cannot be compared with the export's inputs.
    """
    signature = inspect.signature(model.forward)
    try:
        calls = [signature.bind(*a, **k).arguments for a, k in [(args, kwargs), *examples]]
    except TypeError as exc:
        ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"an example does not match forward()'s signature: {exc}")
        return None
    sizes = _sizes_by_axis(ctx, calls)
    if sizes is None:
        return None
    varying = {key: values for key, values in sizes.items() if len(set(values)) > 1}
    dims = _name_dims(varying, [key for key in sizes if key[2] == 0])
    shapes: dict[str, Any] = {}
    for name, value in calls[0].items():
        leaves, spec = pytree.tree_flatten_with_path(value)
        leaf_specs = []
        for path, leaf in leaves:
            where = pytree.keystr(path)
            axes = {axis: dims[(name, where, axis)] for axis in range(leaf.dim())
                    if (name, where, axis) in dims} if isinstance(leaf, torch.Tensor) else {}
            leaf_specs.append(axes or None)
        shapes[name] = leaf_specs[0] if isinstance(value, torch.Tensor) else (
            pytree.tree_unflatten(leaf_specs, spec) if any(leaf_specs) else None)
    return shapes if any(v is not None for v in shapes.values()) else None


def _sizes_by_axis(ctx: DiagnosticContext, calls: list[Mapping[str, Any]]
                   ) -> dict[tuple[str, str, int], list[int]] | None:
    """(argument, pytree path, axis) -> its size in every call; ARG003 for what cannot be compared."""
    first = calls[0]
    sizes: dict[tuple[str, str, int], list[int]] = {}
    for number, call in enumerate(calls[1:], start=1):
        if list(call) != list(first):
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"example {number} passes arguments {list(call)}; the export's "
                                                     f"args pass {list(first)}")
            return None
    for name, value in first.items():
        flat = [pytree.tree_flatten_with_path(call[name]) for call in calls]
        for number, (leaves, spec) in enumerate(flat[1:], start=1):
            if spec != flat[0][1]:
                ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"argument {name} of example {number} is nested "
                                                         f"differently from the export's args ({spec} vs {flat[0][1]})")
                return None
        for index, (path, leaf) in enumerate(flat[0][0]):
            where = pytree.keystr(path)
            others = [leaves[index][1] for leaves, _ in flat[1:]]
            problem = _leaf_problem(leaf, others)
            if problem:
                ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"argument {name}{where}: {problem}")
                return None
            if isinstance(leaf, torch.Tensor):
                for axis in range(leaf.dim()):
                    sizes[(name, where, axis)] = [int(t.shape[axis]) for t in [leaf, *others]]
    return sizes


def _leaf_problem(leaf: Any, others: list[Any]) -> str | None:
    """Why one input cannot be compared across the examples (None when it can)."""
    for number, other in enumerate(others, start=1):
        if isinstance(leaf, torch.Tensor):
            if not isinstance(other, torch.Tensor):
                return f"a tensor in the export's args but {type(other).__name__} in example {number}"
            if other.dim() != leaf.dim() or other.dtype != leaf.dtype:
                return (f"rank {leaf.dim()} {leaf.dtype} in the export's args but rank {other.dim()} {other.dtype} "
                        f"in example {number}: only sizes may vary")
        elif type(other) is not type(leaf) or other != leaf:
            return (f"{leaf!r} in the export's args but {other!r} in example {number}: a Python value is baked "
                    "into the graph, so it must be the same in every example")
    return None


def _name_dims(varying: Mapping[tuple[str, str, int], list[int]],
               batch_axes: list[tuple[str, str, int]]) -> dict[tuple[str, str, int], Any]:
    """One Dim per group of axes with the same sizes in every example, named for the user."""
    groups: dict[tuple[int, ...], list[tuple[str, str, int]]] = {}
    for key, values in varying.items():
        groups.setdefault(tuple(values), []).append(key)
    dims: dict[tuple[str, str, int], Any] = {}
    taken: set[str] = set()
    for members in groups.values():
        name = "batch" if sorted(members) == sorted(batch_axes) else _dim_name(members[0])
        while name in taken:
            name += "_"
        taken.add(name)
        dim = torch.export.Dim(name)
        dims.update({key: dim for key in members})
    return dims


def _dim_name(key: tuple[str, str, int]) -> str:
    """``("inputs", "['x']", 1)`` -> ``inputs_x_dim1``: a valid identifier (torch.export.Dim requires one)."""
    name, where, axis = key
    path = re.sub(r"\W+", "_", where).strip("_")
    return f"{name}_{path}_dim{axis}" if path else f"{name}_dim{axis}"
