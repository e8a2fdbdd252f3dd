"""Checking export() arguments before any work is done, and dynamic_axes -> dynamic_shapes."""

from __future__ import annotations

import inspect
from typing import Any, Mapping

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext

SUPPORTED_OPSETS = range(17, 24)
DEFAULT_OPSET = 18


def check_arguments(ctx: DiagnosticContext, model: Any, args: Any, kwargs: Any, opset: int,
                    dynamic_shapes: Any, dynamic_axes: Any) -> tuple[tuple, dict]:
    """Normalise args/kwargs and emit ARG* errors for anything wrong; returns (args, kwargs)."""
    if not isinstance(model, torch.nn.Module):
        ctx.emit(rules.INVALID_MODEL, type=type(model).__name__)
        return (), {}
    if isinstance(opset, bool) or not isinstance(opset, int) or opset not in SUPPORTED_OPSETS:
        ctx.emit(rules.UNSUPPORTED_OPSET, opset=opset,
                 supported=f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}")
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    args = tuple(args)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        ctx.emit(rules.INVALID_ARGUMENT, argument="kwargs", error=f"expected a dict, got {type(kwargs).__name__}")
        kwargs = {}
    kwargs = dict(kwargs or {})
    signature = inspect.signature(model.forward)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        ctx.emit(rules.ARGS_MISMATCH, model=type(model).__name__, signature=str(signature), error=str(exc))
    if dynamic_shapes is not None and dynamic_axes is not None:
        ctx.emit(rules.INVALID_ARGUMENT, argument="dynamic_axes",
                 error="give either dynamic_shapes (torch.export style) or dynamic_axes (torch.onnx style), not both")
    if dynamic_shapes is not None:
        _check_dynamic_shapes(ctx, signature, args, kwargs, dynamic_shapes)
    return args, kwargs


def _check_dynamic_shapes(ctx: DiagnosticContext, signature: inspect.Signature, args: tuple, kwargs: dict,
                          dynamic_shapes: Any) -> None:
    names = list(signature.bind_partial(*args, **kwargs).arguments)
    if isinstance(dynamic_shapes, Mapping):
        unknown = [k for k in dynamic_shapes if k not in names]
        if unknown:
            ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                     error=f"keys {unknown} are not arguments of forward(); arguments given are {names}")
    elif isinstance(dynamic_shapes, (tuple, list)):
        # torch.export matches a tuple against the bound arguments: `*tensors` is one entry holding a tuple.
        if len(dynamic_shapes) != len(names):
            ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                     error=f"{len(dynamic_shapes)} entries for {len(names)} inputs ({', '.join(names)})")
    else:
        ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                 error=f"expected a dict keyed by argument name or a tuple, got {type(dynamic_shapes).__name__}")


def convert_dynamic_axes(ctx: DiagnosticContext, model: torch.nn.Module, args: tuple, kwargs: dict,
                         dynamic_axes: Mapping[str, Any], input_names: list[str] | None
                         ) -> tuple[dict[str, Any] | None, dict[tuple[str, int], str]]:
    """torch.onnx's ``{input: {axis: name}}`` -> torch.export dynamic_shapes, plus the dim names wanted.

    Input names may be forward()'s argument names or the ``input_names`` given.
    Output axes are ignored (ONNX output shapes follow from the inputs).
    """
    bound = list(inspect.signature(model.forward).bind(*args, **kwargs).arguments)
    alias = dict(zip(input_names or [], bound))
    shapes: dict[str, Any] = {}
    names: dict[tuple[str, int], str] = {}
    for key, axes in dynamic_axes.items():
        arg = alias.get(key, key)
        if arg not in bound:
            continue  # an output name, or an unknown name (reported below if it names nothing)
        if isinstance(axes, Mapping):
            items = {int(a): str(n) for a, n in axes.items()}
        elif isinstance(axes, (list, tuple)):
            items = {int(a): f"{key}_dim_{int(a)}" for a in axes}
        else:
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"dynamic_axes[{key!r}] must be a dict or a list of axes")
            continue
        shapes[arg] = {axis: torch.export.Dim.DYNAMIC for axis in items}
        names.update({(arg, axis): name for axis, name in items.items()})
    if not shapes:
        return None, names
    return {name: shapes.get(name) for name in bound}, names


def named_dims(dynamic_shapes: Any, args: tuple, kwargs: dict, model: torch.nn.Module) -> dict[tuple[str, int], str]:
    """(argument, axis) -> the name of the torch.export Dim given there."""
    bound = list(inspect.signature(model.forward).bind(*args, **kwargs).arguments)
    if isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = dict(zip(bound, dynamic_shapes))
    names: dict[tuple[str, int], str] = {}
    for arg, spec in (dynamic_shapes or {}).items():
        items = spec.items() if isinstance(spec, Mapping) else enumerate(spec) if isinstance(spec, (list, tuple)) else ()
        for axis, dim in items:
            name = getattr(dim, "__name__", None)
            if isinstance(name, str) and isinstance(axis, int):
                names[(arg, axis)] = name
    return names


def symbol_names(program: torch.export.ExportedProgram, wanted: dict[tuple[str, int], str]) -> dict[str, str]:
    """sympy symbol (``s0``) -> the user's dim name, from the placeholders' fake tensor shapes."""
    result: dict[str, str] = {}
    for node in program.graph_module.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        for axis, dim in enumerate(getattr(val, "shape", ())):
            name = wanted.get((node.name, axis))
            expr = getattr(getattr(dim, "node", None), "expr", None)
            if name and expr is not None and getattr(expr, "is_Symbol", False):
                result.setdefault(str(expr), name)
    return result
