"""ExportError and its per-stage subclasses: the errors ``onnxsight.export`` raises.

Each is public as ``onnxsight.<Name>`` and says so: ``__module__`` is
``"onnxsight"``, so a traceback reads ``onnxsight.TranslationError: ...``
rather than naming this private module (the way ``onnx_ir`` and ``pydantic``
present their errors). A failed comparison under ``verify=True`` is not an
error: the program comes back with ``.verification`` and the ACC diagnostics.
"""

from __future__ import annotations

from typing import Any, Sequence

from onnxsight.diagnostics import Diagnostic, Level, repeats


class ExportError(RuntimeError):
    """A failed export. ``diagnostics`` holds every finding; ``report_path`` the report files, if any.

    A ``RuntimeError``, as torch.onnx's export errors are: code moved from torch.onnx that catches
    ``RuntimeError`` (upstream's own tests of models eager PyTorch refuses) keeps catching it.
    """

    stage = "export"

    def __init__(self, summary: str, *, diagnostics: Sequence[Diagnostic] = (), record: Any = None,
                 report_path: str | None = None) -> None:
        super().__init__(summary)
        self.summary = summary
        self.diagnostics = list(diagnostics)
        self.record = record
        self.report_path = report_path
        self.report_paths: list[str] = []

    @classmethod
    def from_diagnostics(cls, summary: str, diagnostics: Sequence[Diagnostic], **kwargs: Any) -> "ExportError":
        return cls(summary, diagnostics=diagnostics, **kwargs)

    def __str__(self) -> str:
        lines = [self.summary]
        for diagnostic, count in repeats(d for d in self.diagnostics if d.level is Level.ERROR):
            where = f" ({diagnostic.location})" if diagnostic.location else ""
            times = f" ({count} times)" if count > 1 else ""
            lines.append(f"  {diagnostic.rule.code} {diagnostic.message}{where}{times}")
        if self.report_paths:
            lines.append("reports: " + ", ".join(self.report_paths))
        return "\n".join(lines)


class InvalidArgumentError(ExportError, ValueError):
    """The arguments of ``export()`` are wrong (the ARG rules); also a ``ValueError``."""

    stage = "arguments"


class CaptureError(ExportError):
    """``torch.export`` could not capture the model with any strategy."""

    stage = "capture"


class DecompositionError(ExportError):
    """Decomposing the captured program to core ATen failed."""

    stage = "decompose"


class TranslationError(ExportError):
    """Operators without an ONNX translation, or whose translation failed: all of them at once."""

    stage = "translate"


class CheckerError(ExportError):
    """The ONNX model fails the ONNX checker or strict shape inference."""

    stage = "check"


class WeightsError(ExportError, ValueError):
    """A program's weights cannot be used as asked: fake-mode weights without data (VAL007), or a
    checkpoint given to ``save(weights=)`` that does not fit the program (VAL008-VAL010, ARG014)."""

    stage = "weights"


for _public in (ExportError, InvalidArgumentError, CaptureError, DecompositionError, TranslationError, CheckerError,
                WeightsError):
    _public.__module__ = "onnxsight"
del _public
