"""The input forms of torch.onnx.export and torch.export that onnxsight takes as they mean there (issue 25).

- A trailing dict in ``args`` holds keyword arguments when ``kwargs`` is not given: torch.onnx's
  convention (``torch.onnx.export(model, (x, {"mask": mask}))``). onnxsight also takes a dict as a
  positional input (``forward(self, a, b: dict)``), which torch.onnx cannot; so the dict is read as
  keyword arguments exactly when forward() takes them so, and as a positional input otherwise.
- ``dynamic_shapes`` given as a ``torch.export.ShapesCollection`` (specs keyed by the example tensors)
  or ``torch.export.AdditionalInputs`` (other example inputs): the spec each stands for, as
  torch.export derives it.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext


def keyword_dict(model: Any, args: Any, kwargs: Any) -> tuple[Any, Any]:
    """(args, kwargs), the trailing dict of ``args`` moved to ``kwargs`` where torch.onnx moves it."""
    if kwargs or not isinstance(args, (tuple, list)) or not args or not isinstance(args[-1], dict):
        return args, kwargs
    forward = getattr(model, "forward", None) if isinstance(model, torch.nn.Module) else None
    if forward is None or not all(isinstance(key, str) for key in args[-1]):
        return args, kwargs
    try:
        inspect.signature(forward).bind(*args[:-1], **args[-1])
    except (TypeError, ValueError):
        return args, kwargs  # forward() takes the dict as a positional input
    return tuple(args[:-1]), dict(args[-1])


def collected_shapes(ctx: DiagnosticContext, dynamic_shapes: Any, model: Any, args: Any, kwargs: Any) -> Any:
    """A ShapesCollection's or AdditionalInputs' spec (torch.export's own derivation); else as given.

    One that torch.export cannot derive a spec from is ARG003 with its reason (None returned).
    """
    if not isinstance(dynamic_shapes, (torch.export.ShapesCollection, torch.export.AdditionalInputs)):
        return dynamic_shapes
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    try:
        return dynamic_shapes.dynamic_shapes(model, args, kwargs or {})
    except Exception as exc:  # torch's own words for what does not fit
        ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"{type(dynamic_shapes).__name__} gives no spec for these inputs: "
                                                 f"{type(exc).__name__}: {str(exc).strip()[:300]}")
        return None
