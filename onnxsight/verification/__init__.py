"""Verification: PyTorch vs ONNX Runtime (or one provider vs another), per node, with root causes.

``verify`` compares an exported program with its ONNX model value by value;
``verify_onnx`` compares one ONNX model on two execution providers. Both
return a :class:`VerificationResult`.
"""

from __future__ import annotations

from onnxsight.verification._api import DEFAULT_MEMORY_BUDGET, verify
from onnxsight.verification._bundle import ReproCase
from onnxsight.verification._metrics import Metrics, compare
from onnxsight.verification._onnx_only import verify_onnx
from onnxsight.verification._result import VerificationResult
from onnxsight.verification._runners import OrtRunner, Runner, TorchRunner, VerificationError
from onnxsight.verification._tolerance import Bounds, Tolerance

__all__ = ["DEFAULT_MEMORY_BUDGET", "Bounds", "Metrics", "OrtRunner", "ReproCase", "Runner", "Tolerance",
           "TorchRunner", "VerificationError", "VerificationResult", "compare", "verify", "verify_onnx"]
