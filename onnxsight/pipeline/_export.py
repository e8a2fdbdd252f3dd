"""onnxsight.export: the exporter core, then verification and the reports, composed in one place.

The exporter knows nothing of verification or reports (it sits below both);
verification knows the exporter's public API; reports render records. This
module is the one place that sees all three, so ``export(report=, verify=)``
lives here, as does the promise that the reports are written whether the
export succeeds or fails.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter import ExportError, ONNXProgram
from onnxsight.exporter import export as export_core
from onnxsight.exporter import require_artifacts_dir
from onnxsight.pipeline._run_record import build_run_record
from onnxsight.reports import write_reports, write_sarif


def export(model: Any, args: Any = (), f: str | os.PathLike | None = None, *,
           kwargs: Mapping[str, Any] | None = None,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           opset_version: int | None = None, dynamic_shapes: Any = None,
           dynamic_axes: Mapping[str, Any] | None = None, external_data: bool | None = None,
           custom_translations: Mapping[Any, Callable[..., Any]] | None = None,
           report: bool = False, verify: bool = False, artifacts_dir: str | os.PathLike = ".") -> ONNXProgram:
    """Export ``model`` to ONNX; with ``verify=True`` compare it with PyTorch, with ``report=True`` write reports.

    Raises :class:`onnxsight.ExportError` (a subclass per stage) naming each
    problem's rule code, operator and source line. With ``report=True`` the
    markdown/HTML/SARIF reports and the run record are written into
    ``artifacts_dir`` whether the export succeeds or not; a failed export's
    error carries their paths (``.report_path``, ``.report_paths``).
    """
    inputs = (model, args, kwargs)
    if report:
        require_artifacts_dir(model, artifacts_dir)  # ARG009 before any work: the reports are written last
    try:
        program = export_core(model, args, f, kwargs=kwargs, input_names=input_names, output_names=output_names,
                              opset_version=opset_version, dynamic_shapes=dynamic_shapes, dynamic_axes=dynamic_axes,
                              external_data=external_data, custom_translations=custom_translations)
    except ExportError as exc:
        if report:
            _write_reports(exc, exc.diagnostics, exc.record, artifacts_dir, program=None, inputs=inputs)
        raise
    program.sarif_writer = write_sarif
    if verify:
        try:
            _verify(program, args, kwargs)
        except Exception as exc:
            wrapped = _internal_error(exc, program)
            if report:
                _write_reports(wrapped, wrapped.diagnostics, program.record, artifacts_dir, program=program,
                               inputs=inputs)
            raise wrapped from exc
    if report:
        _write_reports(None, program.diagnostics, program.record, artifacts_dir, program=program, inputs=inputs)
    return program


def _verify(program: ONNXProgram, args: Any, kwargs: Any) -> None:
    """verify=True: run the verification engine as the export's "accuracy" stage; keep its result on the program."""
    from onnxsight.verification import verify as run_verify  # loads ONNX Runtime: only when asked for

    with program.record.stage("accuracy") as stage:
        result = run_verify(program, args if isinstance(args, (tuple, list)) else (args,), kwargs, other_sizes=True)
        program.verification = result
        ctx = DiagnosticContext()
        ctx.extend(result.diagnostics)
        program.diagnostics = [*program.diagnostics, *ctx.diagnostics]
        if not result.passed:
            stage.status = "failed"
            stage.detail = f"{len(result.root_causes)} root cause(s)"


def _internal_error(exc: Exception, program: ONNXProgram) -> ExportError:
    """INT001 for an unexpected failure after the export (in verification), as the ExportError to raise."""
    ctx = DiagnosticContext(fallback_location=caller_location())
    stages = program.record.stages
    ctx.emit(rules.INTERNAL_ERROR, stage=stages[-1].name if stages else "export",
             error_type=type(exc).__name__, error=str(exc)[:500])
    return ExportError(f"onnxsight failed internally: {type(exc).__name__}: {exc}",
                       diagnostics=[*program.diagnostics, *ctx.diagnostics], record=program.record)


def _write_reports(error: ExportError | None, diagnostics: Sequence[Any], record: Any,
                   artifacts_dir: str | os.PathLike, *, program: ONNXProgram | None,
                   inputs: tuple[Any, Any, Any]) -> None:
    """report=True: gather the run record, render markdown, HTML, SARIF; on failure the error learns the paths."""
    run = build_run_record(record=record, diagnostics=diagnostics, program=program, error=error, inputs=inputs)
    paths = write_reports(run, os.fspath(artifacts_dir), diagnostics=diagnostics, export_record=record)
    if error is not None:
        error.report_paths = list(paths)
        error.report_path = paths[0] if paths else None
