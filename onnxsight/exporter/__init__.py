"""The exporter core: capture, decomposition, translation registry, GraphBuilder, ONNXProgram."""

from __future__ import annotations

from onnxsight.exporter._api import export
from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._errors import (AccuracyError, CaptureError, CheckerError, DecompositionError,
                                        ExportError, InvalidArgumentError, RuntimeCheckError, TranslationError)
from onnxsight.exporter._program import ONNXProgram
from onnxsight.exporter._record import CaptureAttempt, ExportRecord, StageRecord
from onnxsight.exporter._registry import Registry, Translation, default_registry, target_key, translation

__all__ = ["AccuracyError", "CaptureAttempt", "CaptureError", "CheckerError", "DecompositionError", "ExportError",
           "ExportRecord", "GraphBuilder", "InvalidArgumentError", "ONNXProgram", "Registry", "RuntimeCheckError",
           "StageRecord", "Translation", "TranslationError", "Value", "default_registry", "export", "target_key",
           "translation"]
