"""``torch.onnx.is_in_onnx_export()`` is True while onnxsight exports, as it is while torch.onnx does.

Model code branches on it to take an export-friendly path (a custom op replaced by standard ops, a
cache skipped). torch.onnx's export sets a module flag that ``is_in_onnx_export()`` reads; setting
the same flag is what lets that code see an onnxsight export as an ONNX export. The previous value
is restored afterwards (an enclosing export keeps its own), on success and on failure.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def onnx_exporting() -> Iterator[None]:
    """While inside, ``torch.onnx.is_in_onnx_export()`` returns True."""
    try:
        from torch.onnx._internal.exporter import _flags
    except ImportError:  # a torch whose flag moved: is_in_onnx_export() then reads False, as before
        yield
        return
    previous = _flags._is_onnx_exporting
    _flags._is_onnx_exporting = True
    try:
        yield
    finally:
        _flags._is_onnx_exporting = previous


@contextlib.contextmanager
def dynamo_sees_onnx_export() -> Iterator[None]:
    """Strict capture: TorchDynamo answers ``is_in_onnx_export()`` as True too.

    Dynamo does not call the function: it folds it to a constant from its table of tracing-state
    functions, where it is False. Without this, a strict capture (the fallback when non-strict
    fails) would take the eager branch that the user's code keeps away from ONNX, without a word.
    """
    import torch

    try:
        from torch._dynamo.variables.torch import tracing_state_functions
        table = tracing_state_functions()
    except (ImportError, AttributeError):  # another torch: strict capture sees what dynamo says
        yield
        return
    key = torch.onnx.is_in_onnx_export
    had, previous = key in table, table.get(key)
    table[key] = torch.onnx.is_in_onnx_export()
    try:
        yield
    finally:
        if had:
            table[key] = previous
        else:
            table.pop(key, None)
