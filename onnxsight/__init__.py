"""onnxsight: export PyTorch models to ONNX and learn exactly what went wrong, and where."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from onnxsight.diagnostics import Diagnostic, DiagnosticContext, Level, Location
from onnxsight.exporter import (ExportError, GraphBuilder, ONNXProgram, Registry, Value, default_registry, export,
                                translation)

# The verification engine imports onnxruntime; load it on first use.
_LAZY = {
    "verify": "onnxsight.verification",
    "verify_onnx": "onnxsight.verification",
    "Tolerance": "onnxsight.verification",
    "VerificationResult": "onnxsight.verification",
}

__all__ = ["Diagnostic", "DiagnosticContext", "ExportError", "GraphBuilder", "Level", "Location", "ONNXProgram",
           "Registry", "Tolerance", "Value", "VerificationResult", "__version__", "default_registry", "export",
           "translation", "verify", "verify_onnx"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnxsight' has no attribute {name!r}")
