"""onnxsight: export PyTorch models to ONNX and learn exactly what went wrong, and where."""

from __future__ import annotations

__version__ = "0.1.0"

from onnxsight.diagnostics import Diagnostic, DiagnosticContext, Level, Location
from onnxsight.exporter import (ExportError, GraphBuilder, ONNXProgram, Registry, Value, default_registry, export,
                                translation)

__all__ = ["Diagnostic", "DiagnosticContext", "ExportError", "GraphBuilder", "Level", "Location", "ONNXProgram",
           "Registry", "Value", "__version__", "default_registry", "export", "translation"]
