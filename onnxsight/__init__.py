"""onnxsight: export PyTorch models to ONNX and learn exactly what went wrong, and where.

The public API is ``__all__``: DESIGN.md's contract (``export``, ``verify``,
``verify_onnx``, ``verify_generation`` and ``export_generation`` with their ``GenerationResult``
and ``GenerationPrograms``, ``ONNXProgram``, ``VerificationResult``, ``Tolerance``,
``Diagnostic``, ``Level``, ``Location``, ``fake_mode``, and ``GraphBuilder`` and ``Value``,
which custom translations receive) and every error onnxsight raises.
tests/test_public_api.py pins it. Writing translations for onnxsight itself
(``Registry``, ``@translation``) goes through ``onnxsight.exporter``
(CONTRIBUTING.md).

Importing this package loads nothing heavy: every name is imported on first
use, so ``onnxsight rules`` and SARIF tooling never wait for torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxsight._lazy import lazy_names

__version__ = "0.1.0"

_NAMES = {
    "export": "onnxsight.pipeline",
    "export_generation": "onnxsight.pipeline",
    "verify_generation": "onnxsight.pipeline",
    "ONNXProgram": "onnxsight.exporter.program._onnx_program",
    "fake_mode": "onnxsight.exporter.inputs._fake",
    "GraphBuilder": "onnxsight.exporter._builder",
    "Value": "onnxsight.exporter._builder",
    "verify": "onnxsight.verification",
    "verify_onnx": "onnxsight.verification",
    "VerificationResult": "onnxsight.verification",
    "Tolerance": "onnxsight.verification",
    "GenerationResult": "onnxsight.verification",
    "GenerationPrograms": "onnxsight.verification",
    "Diagnostic": "onnxsight.diagnostics",
    "Level": "onnxsight.rules",
    "Location": "onnxsight.diagnostics",
    # The errors: ExportError and one subclass per stage, and verification's.
    "ExportError": "onnxsight.exporter._errors",
    "InvalidArgumentError": "onnxsight.exporter._errors",
    "CaptureError": "onnxsight.exporter._errors",
    "DecompositionError": "onnxsight.exporter._errors",
    "TranslationError": "onnxsight.exporter._errors",
    "CheckerError": "onnxsight.exporter._errors",
    "VerificationError": "onnxsight.verification",
    "WeightsChangedError": "onnxsight.exporter.program._onnx_program",
    "WeightsError": "onnxsight.exporter._errors",
}
_SUBPACKAGES = ("cli", "diagnostics", "exporter", "pipeline", "reports", "rules", "verification", "zoo")

__all__ = ["__version__", *sorted(_NAMES)]

__getattr__, __dir__ = lazy_names(__name__, _NAMES, submodules=_SUBPACKAGES)

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from onnxsight.diagnostics import Diagnostic, Location
    from onnxsight.exporter._builder import GraphBuilder, Value
    from onnxsight.exporter._errors import (CaptureError, CheckerError, DecompositionError, ExportError,
                                            InvalidArgumentError, TranslationError, WeightsError)
    from onnxsight.exporter.inputs._fake import fake_mode
    from onnxsight.exporter.program._onnx_program import ONNXProgram, WeightsChangedError
    from onnxsight.pipeline import export, export_generation, verify_generation
    from onnxsight.rules import Level
    from onnxsight.verification import (GenerationPrograms, GenerationResult, Tolerance, VerificationError,
                                        VerificationResult, verify, verify_onnx)
