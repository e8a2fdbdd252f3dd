"""Verification: PyTorch vs ONNX Runtime (or one provider vs another), per node, with root causes.

``verify`` compares an exported program with its ONNX model value by value;
``verify_onnx`` compares one ONNX model on two execution providers. Both
return a :class:`VerificationResult`; tolerances are a :class:`Tolerance`;
``VerificationError`` says verification could not run. ``__all__`` is that
public surface (also at the top level, ``onnxsight.verify``); the other names
are the engine's parts, for onnxsight's own packages and tests. All load on
first use (this package imports onnx, ONNX Runtime and pandas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxsight._lazy import lazy_names

_PUBLIC = {
    "verify": "onnxsight.verification._api",
    "verify_onnx": "onnxsight.verification._onnx_only",
    "VerificationResult": "onnxsight.verification._result",
    "Tolerance": "onnxsight.verification._tolerance",
    "VerificationError": "onnxsight.verification._runners",
    "GenerationResult": "onnxsight.verification._generation_result",
    "GenerationPrograms": "onnxsight.verification._generation_result",
}
_INTERNAL = {
    "DEFAULT_MEMORY_BUDGET": "onnxsight.verification._api",
    "ReproCase": "onnxsight.verification._bundle",
    "Metrics": "onnxsight.verification._metrics",
    "compare": "onnxsight.verification._metrics",
    "compare_detections": "onnxsight.verification._detections",
    "DetectionComparison": "onnxsight.verification._detections",
    "OrtRunner": "onnxsight.verification._runners",
    "Runner": "onnxsight.verification._runners",
    "TorchRunner": "onnxsight.verification._runners",
    "available_providers": "onnxsight.verification._runners",
    "Bounds": "onnxsight.verification._tolerance",
    "run_generation": "onnxsight.verification._generation",
    "DEFAULT_STEPS": "onnxsight.verification._generation",
    "named_cache": "onnxsight.verification._generation_sides",
    "cache_argument": "onnxsight.verification._generation_sides",
    "step_cache": "onnxsight.verification._generation_sides",
    "forward_takes": "onnxsight.verification._generation_sides",
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_names(__name__, {**_PUBLIC, **_INTERNAL})

if TYPE_CHECKING:
    from onnxsight.verification._api import DEFAULT_MEMORY_BUDGET, verify
    from onnxsight.verification._bundle import ReproCase
    from onnxsight.verification._generation import DEFAULT_STEPS, run_generation
    from onnxsight.verification._generation_result import GenerationPrograms, GenerationResult
    from onnxsight.verification._generation_sides import (cache_argument, forward_takes, named_cache,
                                                          step_cache)
    from onnxsight.verification._detections import DetectionComparison, compare_detections
    from onnxsight.verification._metrics import Metrics, compare
    from onnxsight.verification._onnx_only import verify_onnx
    from onnxsight.verification._result import VerificationResult
    from onnxsight.verification._runners import (OrtRunner, Runner, TorchRunner, VerificationError,
                                                 available_providers)
    from onnxsight.verification._tolerance import Bounds, Tolerance
