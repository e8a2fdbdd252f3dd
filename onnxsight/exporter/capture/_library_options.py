"""Forms a model library offers that hold at every input size, for the refusal of a dim its code fixes (CAP005).

transformers' ViT and ViT-MSN check the image against the trained size (``if height != self.image_size[0]``)
unless called with ``interpolate_pos_encoding=True``, which interpolates the position embeddings to any size.
A dim refused at a line of a module whose forward() takes such an argument, and that the call did not set,
gets the argument in the message. MobileViT offers none: nothing is added.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from onnxsight.diagnostics import Location


@dataclass(frozen=True)
class Option:
    parameter: str
    value: Any
    effect: str      # what the module then does


OPTIONS = (Option("interpolate_pos_encoding", True, "interpolates the position embeddings to any image size"),)


def option_for(model: torch.nn.Module, kwargs: Mapping[str, Any], found: tuple[Location | None, Location | None],
               value: Any) -> str:
    """`` (or call ViTForImageClassification with interpolate_pos_encoding=True, ...)``, or "" when none applies.

    ``found``: the user's line and the library's line that fixed the dim; ``value``: the size it was fixed to.
    """
    files = {os.path.abspath(loc.file) for loc in found if loc is not None}
    for option in OPTIONS:
        if kwargs.get(option.parameter) == option.value:
            continue
        offering = [module for module in model.modules()
                    if option.parameter in _parameters(module) and _source(type(module)) in files]
        if not offering:
            continue
        module = offering[-1]   # the innermost: the one whose code the line is (ViTEmbeddings)
        where = type(model).__name__ if option.parameter in _parameters(model) else \
            f"the {type(module).__name__} inside {type(model).__name__}"
        return (f" (or call {where} with {option.parameter}={option.value!r}, with which {type(module).__name__} "
                f"{option.effect}, from an example of another size than {value}: a shortcut for the trained size "
                "fixes that one)")
    return ""


def _parameters(module: torch.nn.Module) -> Mapping[str, Any]:
    try:
        return inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return {}


def _source(cls: type) -> str | None:
    try:
        path = inspect.getsourcefile(cls)
    except TypeError:
        return None
    return os.path.abspath(path) if path else None
