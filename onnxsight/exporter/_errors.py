"""ExportError and its per-stage subclasses."""

from __future__ import annotations

from typing import Any, Sequence

from onnxsight.diagnostics import Diagnostic, Level


class ExportError(Exception):
    """A failed export. ``diagnostics`` holds every finding; ``report_path`` the report files, if any."""

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
        for diagnostic in self.diagnostics:
            if diagnostic.level is Level.ERROR:
                where = f" ({diagnostic.location})" if diagnostic.location else ""
                lines.append(f"  {diagnostic.rule.code} {diagnostic.message}{where}")
        if self.report_paths:
            lines.append("reports: " + ", ".join(self.report_paths))
        return "\n".join(lines)


class InvalidArgumentError(ExportError, ValueError):
    stage = "arguments"


class CaptureError(ExportError):
    stage = "capture"


class DecompositionError(ExportError):
    stage = "decompose"


class TranslationError(ExportError):
    stage = "translate"


class CheckerError(ExportError):
    stage = "check"


class RuntimeCheckError(ExportError):
    stage = "onnxruntime"


class AccuracyError(ExportError):
    stage = "accuracy"
