"""What the command line turns into export() arguments: the user's model file, dynamic dims, translations.

Kept apart from ``cli.py`` (the commands and the parser): this is the part that
runs the user's code, and every mistake in it is a :class:`UsageError` (exit 3)
naming the file, function or flag, never a traceback. It imports nothing of
onnxsight's (a private helper beside the root package, like ``_lazy``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any, Mapping


class UsageError(Exception):
    """A problem with the command line or its inputs: exit code 3."""


def split_target(spec: str) -> tuple[str, str]:
    """``FILE.py[:FUNCTION]`` -> (file, function); the function defaults to ``build``."""
    path, sep, function = spec.rpartition(":")
    if sep and path.endswith(".py") and function.isidentifier():
        return path, function
    return spec, "build"


def _import_file(path: str) -> Any:
    """Import a Python file as a fresh module (its folder on sys.path while it runs)."""
    if not os.path.isfile(path):
        raise UsageError(f"{path}: no such file")
    name = f"onnxsight_user_{abs(hash(os.path.abspath(path)))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(module_spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file: report, do not crash
        raise UsageError(f"{path} raised {type(exc).__name__} on import: {exc}") from exc
    finally:
        sys.path.pop(0)
    return module


def load_model(spec: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Run ``FUNCTION()`` from ``FILE.py``: it returns ``(model, args)`` or ``(model, args, kwargs)``."""
    path, function = split_target(spec)
    module = _import_file(path)
    build = getattr(module, function, None)
    if not callable(build):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise UsageError(f"{path} has no function {function!r}; it defines: {', '.join(found) or 'nothing callable'}")
    try:
        built = build()
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"{path}:{function}() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(built, tuple) or len(built) not in (2, 3):
        raise UsageError(f"{path}:{function}() must return (model, args) or (model, args, kwargs), "
                         f"got {type(built).__name__}")
    model, args, *rest = built
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    return model, args, dict(rest[0] or {}) if rest else {}


def model_location(spec: str) -> tuple[str, int, str]:
    """(file, line, function): where the command line's diagnostics without a source line are shown.

    The user's file is the model file named on the command line: the line of its
    ``FUNCTION`` definition (line 1 when it cannot be found), as an absolute path.
    """
    path, function = split_target(spec)
    absolute = os.path.abspath(path)
    line = 1
    try:
        with open(absolute, encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if text.lstrip().startswith(f"def {function}(") and not text[:1].isspace():
                    line = number
                    break
    except OSError:
        pass
    return absolute, line, function


def batch_dynamic_shapes(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """``--dynamic-batch``: dimension 0 of every tensor input is the dynamic ``batch`` dim."""
    import torch
    from torch.utils import _pytree as pytree

    batch = torch.export.Dim("batch")
    try:
        bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    except (TypeError, AttributeError):
        return None  # export() reports the mismatch (ARG001/ARG002) with the signature
    return {name: pytree.tree_map(lambda v: {0: batch} if isinstance(v, torch.Tensor) and v.dim() else None, value)
            for name, value in bound.items()}


def dynamic_dim(text: str) -> tuple[str, int, str | None]:
    """``--dynamic NAME:AXIS[:DIMNAME]`` -> (name, axis, dim name); an argparse type (bad text: exit 3)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1].lstrip("-").isdigit() or (len(parts) == 3
                                                                                          and not parts[2]):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NAME:AXIS[:DIMNAME] (e.g. x:0:batch, or input_ids:1:sequence)")
    return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else None


def dynamic_axes(dims: list[tuple[str, int, str | None]]) -> dict[str, dict[int, str]]:
    """Repeated ``--dynamic`` flags -> torch.onnx-style ``dynamic_axes`` ({input: {axis: dim name}}).

    NAME is forward()'s argument name, one of ``--input-names`` or a leaf path; export() resolves it
    and checks the axis against the input's rank. Every NAME must name an input: one that names none
    is ARG003 (exit 3), where a legacy ``dynamic_axes`` key only warns (see ``RequiredAxes``).
    """
    from onnxsight.exporter import RequiredAxes

    axes: dict[str, dict[int, str]] = {}
    for name, axis, dim in dims:
        axes.setdefault(name, {})[axis] = dim or f"{name}_dim_{axis}"
    return RequiredAxes(axes, source="--dynamic")


def names_list(text: str) -> list[str]:
    """``--input-names a,b`` -> ["a", "b"] (an argparse type: empty names are a usage error)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated names, e.g. input_ids,attention_mask")
    return names


def load_translations(specs: list[str]) -> dict[Any, Any]:
    """``--translations MODULE:ATTR`` (or ``FILE.py:ATTR``), repeatable -> one custom_translations dict.

    ATTR is a dict ``{op: translation}`` (the custom_translations of export()), or
    a function returning one.
    """
    merged: dict[Any, Any] = {}
    for spec in specs:
        where, sep, attr = spec.rpartition(":")
        if not sep or not where or not attr.isidentifier():
            raise UsageError(f"--translations {spec!r}: expected MODULE:ATTR or FILE.py:ATTR "
                             "(e.g. my_ops:TRANSLATIONS)")
        if where.endswith(".py"):
            module = _import_file(where)
        else:
            try:
                sys.path.insert(0, os.getcwd())
                module = importlib.import_module(where)
            except Exception as exc:  # noqa: BLE001 - the user's module
                raise UsageError(f"--translations {spec!r}: cannot import {where!r}: "
                                 f"{type(exc).__name__}: {exc}") from exc
            finally:
                sys.path.pop(0)
        if not hasattr(module, attr):
            raise UsageError(f"--translations {spec!r}: {where} has no attribute {attr!r}")
        value = getattr(module, attr)
        if callable(value) and not isinstance(value, Mapping):
            value = value()
        if not isinstance(value, Mapping):
            raise UsageError(f"--translations {spec!r}: {where}.{attr} must be a dict {{op: translation}}, "
                             f"got {type(value).__name__}")
        merged.update(value)
    return merged


# NOTE: the exporter's supported opsets (exporter/inputs/_arguments.py SUPPORTED_OPSETS), repeated here so that
# `onnxsight --help` and a bad --opset answer without importing torch; tests/test_cli_bad_calls.py pins that
# the two agree.
OPSETS = range(15, 26)


def opset_number(text: str) -> int:
    """``--opset N``: an int the exporter supports (anything else is a usage error, exit 3)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an opset number (supported: "
                                         f"{OPSETS.start}..{OPSETS.stop - 1})") from None
    if value not in OPSETS:
        raise argparse.ArgumentTypeError(f"opset {value} is not supported; supported opsets are "
                                         f"{OPSETS.start}..{OPSETS.stop - 1}")
    return value


def export_options_parser() -> argparse.ArgumentParser:
    """The export() arguments of `export` and `verify FILE.py`: opset, names, dynamic dims, translations."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument("--opset", type=opset_number, default=None, metavar="N",
                         help=f"ONNX opset (default 18; {OPSETS.start}..{OPSETS.stop - 1})")
    options.add_argument("--translations", action="append", default=[], metavar="MODULE:ATTR",
                         help="custom translations: ATTR of MODULE (or FILE.py) is a dict {op: translation}, as "
                              "export(custom_translations=...) takes (repeatable)")
    options.add_argument("--input-names", type=names_list, default=None, metavar="A,B",
                         help="names of the ONNX inputs, comma-separated")
    options.add_argument("--output-names", type=names_list, default=None, metavar="A,B",
                         help="names of the ONNX outputs, comma-separated")
    options.add_argument("--module-functions", action="store_true",
                         help="keep the module hierarchy: each module call an ONNX local function named after "
                              "its class (Netron shows each as a box); the call node is named after the module path")
    dynamic = options.add_mutually_exclusive_group()
    dynamic.add_argument("--dynamic", action="append", type=dynamic_dim, default=[], metavar="NAME:AXIS[:DIM]",
                         help="make AXIS of input NAME (forward()'s argument or an --input-names name) dynamic, "
                              "named DIM in the ONNX model (repeatable: x:0:batch --dynamic x:2:height)")
    dynamic.add_argument("--dynamic-batch", action="store_true",
                         help="make dimension 0 of every tensor input a dynamic 'batch' dim (example batch > 1)")
    return options
