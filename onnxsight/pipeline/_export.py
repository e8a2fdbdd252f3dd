"""onnxsight.export: the exporter core, then verification and the reports, composed in one place.

The exporter knows nothing of verification or reports (it sits below both);
verification knows the exporter's public API; reports render records. This
module is the one place that sees all three, so ``export(report=, verify=)``
lives here, as does the promise that the reports are written whether the
export succeeds or fails.
"""

from __future__ import annotations

import inspect
import os
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter import ExportError, ONNXProgram
from onnxsight.exporter import export as export_core
from onnxsight.exporter import keyword_dict, require_artifacts_dir
from onnxsight.pipeline._examples import resolve_dynamic_shapes, verify_examples
from onnxsight.pipeline._run_record import build_run_record
from onnxsight.pipeline._torch_onnx import TorchOnnxOptions, torch_onnx_options
from onnxsight.reports import write_reports, write_sarif


def export(model: Any, args: Any = (), f: str | os.PathLike | None = None, *,
           kwargs: Mapping[str, Any] | None = None,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           opset_version: int | None = None, dynamic_shapes: Any = None,
           dynamic_axes: Mapping[str, Any] | None = None, external_data: bool | None = None,
           custom_translations: Mapping[Any, Callable[..., Any]] | None = None,
           module_functions: bool | Iterable[type] = False, optimize: bool | str = True,
           report: bool = False, verify: bool = False, artifacts_dir: str | os.PathLike = ".",
           examples: Sequence[Any] | None = None, verbose: bool | None = None,
           float_model: Any = None, **torch_onnx: Any) -> ONNXProgram:
    """Export ``model`` to ONNX; with ``verify=True`` compare it with PyTorch, with ``report=True`` write reports.

    Raises :class:`onnxsight.ExportError` (a subclass per stage) naming each
    problem's rule code, operator and source line. With ``report=True`` the
    markdown/HTML/SARIF reports and the run record are written into
    ``artifacts_dir`` whether the export succeeds or not; a failed export's
    error carries their paths (``.report_path``, ``.report_paths``).

    ``examples``: the inputs of other real calls (each like ``args``, or ``(args, kwargs)`` when
    ``kwargs`` is given). ``dynamic_shapes="auto"`` makes the dims that vary between ``args`` and
    the examples dynamic (``batch``, else ``<argument>_dim<axis>``); with examples the program is
    verified as with ``verify=True`` and at every example (``program.example_verifications``).

    ``module_functions=True`` (or a set of nn.Module classes: ``{nn.TransformerEncoderLayer}``) keeps the
    module hierarchy: each module call is an ONNX local function named after its class, its call node
    named after the module path; ``program.save(path, inline_functions=True)`` writes the flat graph.

    ``verbose=True`` shows torch's own log output on the console (None: only when ``TORCH_LOGS`` is set);
    without it, torch's output is kept in the run record, off the console.

    ``float_model``: for a quantized model, the float model it was quantized from: implies
    ``verify=True``, and the verification (and the reports) also rank every layer by the error
    quantization adds against it (``program.verification.quantization_layers``).

    ``torch_onnx``: torch.onnx.export's other keyword arguments (``dynamo=``, ``training=``, ``optimize=``,
    ...), so that a call written for it works here: each is accepted where it means the same, noted
    (ARG019) where it cannot change the result, refused (ARG018) otherwise (``pipeline/_torch_onnx.py``).

    ``optimize=False`` keeps the graph as translated (docs/optimization.md lists the passes it skips);
    ``optimize="ort-fusion"`` also writes the forms ONNX Runtime's legacy Python transformer optimizer needs where
    they are not free (GPT-2's and LLaMA's attention for its decoder fusers at ``opt_level=0``, a pre-LN block's
    projection biases as rows), and at opset 23 attention and RMS norms without the standard's Attention and
    RMSNormalization, which that optimizer does not know.
    """
    if (args is None or args == ()) and not kwargs and _is_program(model) and model.example_inputs is not None:
        args, kwargs = model.example_inputs  # an ExportedProgram: verified at the inputs it was captured with
    args, kwargs = keyword_dict(model, args, kwargs)  # torch.onnx's (x, {"mask": m}): verified as called
    inputs = (model, args, kwargs)
    verify = verify or float_model is not None
    if report:
        require_artifacts_dir(model, artifacts_dir)  # ARG009 before any work: the reports are written last
    calls: list[tuple[tuple, dict]] = []
    options = TorchOnnxOptions()
    try:
        if torch_onnx:
            options = torch_onnx_options(model, torch_onnx, inspect.signature(export).parameters)
            module_functions = options.core.get("module_functions", module_functions)
            if "custom_translations" in options.core:   # torch.onnx's table; the user's own win where both name an op
                custom_translations = {**options.core["custom_translations"], **(custom_translations or {})}
        if examples is not None or isinstance(dynamic_shapes, str):
            dynamic_shapes, calls = resolve_dynamic_shapes(model, args, kwargs, dynamic_shapes, dynamic_axes,
                                                           examples)
            verify = True
        program = export_core(model, args, f, kwargs=kwargs, input_names=input_names, output_names=output_names,
                              opset_version=opset_version, dynamic_shapes=dynamic_shapes, dynamic_axes=dynamic_axes,
                              external_data=external_data, custom_translations=custom_translations,
                              module_functions=module_functions, optimize=optimize, verbose=verbose,
                              modes=options.core.get("modes", "eval"))
    except ExportError as exc:
        exc.diagnostics = [*options.notes, *exc.diagnostics]
        if report:
            _write_reports(exc, exc.diagnostics, exc.record, artifacts_dir, program=None, inputs=inputs)
        raise
    program.sarif_writer = write_sarif
    program.diagnostics = [*options.notes, *program.diagnostics]
    if verify:
        try:
            _verify(program, args, kwargs, calls, repro_dir=_repro_dir(model, artifacts_dir) if report else None,
                    float_model=float_model)
        except Exception as exc:
            wrapped = exc if isinstance(exc, ExportError) else _internal_error(exc, program)  # an example it refuses
            if report:
                _write_reports(wrapped, wrapped.diagnostics, program.record, artifacts_dir, program=program,
                               inputs=inputs)
            if wrapped is exc:
                raise
            raise wrapped from exc
    if report:
        _write_reports(None, program.diagnostics, program.record, artifacts_dir, program=program, inputs=inputs)
    return program


def _is_program(model: Any) -> bool:
    """A ``torch.export.ExportedProgram`` (a module's own ``example_inputs`` attribute does not count)."""
    import torch

    return isinstance(model, torch.export.ExportedProgram)


def _verify(program: ONNXProgram, args: Any, kwargs: Any, calls: Sequence[tuple[tuple, dict]] = (), *,
            repro_dir: str | None = None, float_model: Any = None) -> None:
    """verify=True: run the verification engine as the export's "accuracy" stage; keep its result on the program.

    With examples, each is verified too (``program.example_verifications``); the stage fails if any does.
    ``repro_dir`` (with ``report=True``): where a failed comparison's minimal repro bundle goes.
    """
    from onnxsight.verification import verify as run_verify  # loads ONNX Runtime: only when asked for

    with program.record.stage("accuracy") as stage:
        result = run_verify(program, args if isinstance(args, (tuple, list)) else (args,), kwargs, other_sizes=True,
                            repro_dir=repro_dir, float_model=float_model)
        program.verification = result
        examples = verify_examples(program, calls, run_verify) if calls else []
        # the engine logged each of these as it found it: kept on the program, not logged a second time
        found = [d for outcome in (result, *examples) for d in outcome.diagnostics]
        program.diagnostics = [*program.diagnostics, *found]
        failed = [str(n) for n, r in enumerate(examples, start=1) if not r.passed]
        if not result.passed or failed:
            stage.status = "failed"
            stage.detail = f"{len(result.root_causes)} root cause(s)" + (
                f"; example(s) {', '.join(failed)} differ" if failed else "")


def _repro_dir(model: Any, artifacts_dir: str | os.PathLike) -> str:
    """``<artifacts_dir>/<Model>_<timestamp>_repro``: next to the reports, never another run's."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(os.fspath(artifacts_dir), f"{type(model).__name__}_{stamp}_repro")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}_{n}"
    return path


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
