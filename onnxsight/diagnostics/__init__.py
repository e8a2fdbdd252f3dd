"""Structured diagnostics: what each stage saw, located in the user's source.

``__all__`` is the public surface: the frozen :class:`Diagnostic`, its
:class:`Level` and :class:`Location` (also ``onnxsight.Diagnostic`` ...).
The other names are for onnxsight's own stages: ``DiagnosticContext``
collects and emits diagnostics (``ctx.emit(rules.X, node=..., **fields)``),
the location helpers find the user's source line. Light: no torch here.
"""

from __future__ import annotations

from onnxsight.diagnostics._context import (
    DiagnosticContext, as_location, module_path, node_location, repeats, torch_logs_requested)
from onnxsight.diagnostics._diagnostic import Diagnostic
from onnxsight.diagnostics._location import (
    Location, caller_location, is_user_file, parse_stack_trace, traceback_frames, user_entry_point, user_frame)
from onnxsight.rules import Level

__all__ = ["Diagnostic", "Level", "Location"]
