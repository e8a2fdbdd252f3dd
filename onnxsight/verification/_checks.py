"""Checks of a call to verify() before any work: each bad argument is a VerificationError with its rule.

Without them a wrong call ends in a traceback from deep inside torch or ONNX
Runtime (``'str' object has no attribute 'to_dict'``, providers ``'C', 'P', 'U'``)
that does not name the argument at fault.
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Sequence

from onnxsight import rules
from onnxsight.verification._runners import refuse
from onnxsight.verification._tolerance import Tolerance

MODES = ("propagated", "isolated")


def is_program(prog: Any) -> bool:
    """True for what onnxsight.export returns (it has the exported program to pair with)."""
    # NOTE: getattr_static, not hasattr: hasattr would build the embedded model_proto (all the weights).
    return all(inspect.getattr_static(prog, name, None) is not None
               for name in ("exported_program", "value_names", "model_proto"))


def check_program(prog: Any) -> None:
    """VER001 unless ``prog`` is what onnxsight.export returned (it has the exported program to pair with)."""
    if is_program(prog):
        return
    kind = type(prog)
    given = f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__name__
    if isinstance(prog, (str, os.PathLike)):
        use = f"{os.fspath(prog)!r} is a path; compare an ONNX file with onnxsight.verify_onnx(path)"
    elif type(prog).__name__ == "ModelProto":
        use = "an onnx.ModelProto has no PyTorch program to compare with; use onnxsight.verify_onnx(model)"
    elif _is_module(prog):
        given += " (a torch.nn.Module)"
        use = "export it first: prog = onnxsight.export(model, args), then onnxsight.verify(prog)"
    else:
        use = "pass the program onnxsight.export(model, args) returns"
    raise refuse(rules.VERIFY_NOT_A_PROGRAM, given=given, use=use)


def _is_module(value: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    return isinstance(value, torch.nn.Module)


def check_options(*, mode: Any, providers: Any, tolerance: Any, torch_device: Any, memory_budget: Any,
                  max_repros: Any, per_node: Any, random_inputs: Any, other_sizes: Any, onnx_model: Any) -> None:
    """VER007 (type), VER008 (device), VER009 (tolerance), VER010 (mode), VER014 (value) for verify()'s options."""
    if not isinstance(mode, str) or mode not in MODES:
        raise refuse(rules.VERIFY_INVALID_MODE, choices=", ".join(MODES), given=repr(mode))
    _check_providers(providers)
    if tolerance is not None and not isinstance(tolerance, Tolerance):
        pair = isinstance(tolerance, (tuple, list)) and len(tolerance) == 2
        use = f"onnxsight.Tolerance.uniform({tolerance[0]!r}, {tolerance[1]!r})" if pair else \
            "onnxsight.Tolerance.uniform(atol, rtol)"
        raise refuse(rules.VERIFY_TOLERANCE_TYPE, given=f"{type(tolerance).__name__} {tolerance!r}", use=use)
    for name, value in (("per_node", per_node), ("random_inputs", random_inputs), ("other_sizes", other_sizes)):
        if not isinstance(value, bool):
            raise refuse(rules.VERIFY_ARGUMENT_TYPE, argument=name, expected="a bool",
                         given=f"{type(value).__name__} {value!r}")
    for name, value, low in (("memory_budget", memory_budget, 1), ("max_repros", max_repros, 0)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise refuse(rules.VERIFY_ARGUMENT_TYPE, argument=name, expected="an int",
                         given=f"{type(value).__name__} {value!r}")
        if value < low:
            raise refuse(rules.VERIFY_INVALID_OPTION, argument=name, given=value,
                         expected=f"{name} must be at least {low}")
    _check_onnx_model(onnx_model)
    check_device(torch_device)


def _check_providers(providers: Any) -> None:
    if isinstance(providers, (str, bytes)) or not isinstance(providers, Sequence):
        raise refuse(rules.VERIFY_ARGUMENT_TYPE, argument="providers",
                     expected="a sequence of provider names, for example (\"CPUExecutionProvider\",)",
                     given=f"{type(providers).__name__} {providers!r}")
    if not providers:
        raise refuse(rules.VERIFY_INVALID_OPTION, argument="providers", given="()",
                     expected="name at least one execution provider")
    bad = [p for p in providers if not isinstance(p, str)]
    if bad:
        raise refuse(rules.VERIFY_ARGUMENT_TYPE, argument="providers", expected="provider names (str)",
                     given=f"{type(bad[0]).__name__} {bad[0]!r}")


def _check_onnx_model(onnx_model: Any) -> None:
    if onnx_model is None or type(onnx_model).__name__ == "ModelProto":
        return
    if not isinstance(onnx_model, (str, os.PathLike)):
        raise refuse(rules.VERIFY_ARGUMENT_TYPE, argument="onnx_model", expected="an onnx.ModelProto or a path",
                     given=type(onnx_model).__name__)
    if not os.path.isfile(onnx_model):
        raise refuse(rules.VERIFY_INVALID_OPTION, argument="onnx_model", given=repr(os.fspath(onnx_model)),
                     expected="no such file")


def check_device(torch_device: Any) -> None:
    """VER008 for a device string torch does not know, or CUDA where this torch has none."""
    import torch

    try:
        device = torch.device(torch_device)
    except (RuntimeError, TypeError) as exc:
        raise refuse(rules.VERIFY_DEVICE_UNAVAILABLE, device=repr(torch_device),
                     reason=f"not a device torch knows ({str(exc).splitlines()[0]})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise refuse(rules.VERIFY_DEVICE_UNAVAILABLE, device=repr(torch_device),
                     reason="this PyTorch has no CUDA device (torch.cuda.is_available() is False)")
    if device.type not in ("cpu", "cuda"):
        raise refuse(rules.VERIFY_DEVICE_UNAVAILABLE, device=repr(torch_device),
                     reason="verification runs PyTorch on cpu or cuda")


def check_model_inputs(prog: Any, graph_inputs: Sequence[str]) -> None:
    """VER012 when ``onnx_model`` takes other inputs than the program."""
    names = list(prog.input_names)
    if len(graph_inputs) != len(names):
        raise refuse(rules.VERIFY_MODEL_INPUTS_DIFFER, onnx_count=len(graph_inputs),
                     onnx_names=", ".join(graph_inputs), count=len(names), names=", ".join(names))
