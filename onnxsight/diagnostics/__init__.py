"""Structured diagnostics: what each stage saw, located in the user's source."""

from __future__ import annotations

from onnxsight.diagnostics._context import DiagnosticContext, as_location, module_path, node_location
from onnxsight.diagnostics._diagnostic import Diagnostic
from onnxsight.diagnostics._location import (
    Location, caller_location, is_user_file, parse_stack_trace, traceback_frames, user_frame)
from onnxsight.rules import Level

__all__ = ["Diagnostic", "DiagnosticContext", "Level", "Location", "as_location", "caller_location", "is_user_file",
           "module_path", "node_location", "parse_stack_trace", "traceback_frames", "user_frame"]
