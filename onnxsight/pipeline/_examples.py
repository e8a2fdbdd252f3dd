"""``export(examples=[...])``: dynamic dims read from real calls, and the export verified at each.

``dynamic_shapes="auto"`` infers the dynamic dims from the sizes that vary between ``args``
and the examples (``onnxsight.exporter.infer_dynamic_shapes``); with or without it, every
example is then verified against the exported program, so "it exported with a dynamic batch"
is checked at the batches the user actually calls it with, not assumed.

# NOTE: ``dynamic_shapes="auto"`` without examples is refused (ARG003) rather than read as
# torch's ``Dim.AUTO`` on every dim: AUTO silently specialises whatever the model pins, so the
# user would learn which dims stayed dynamic only from the report. Examples say what varies.
"""

from __future__ import annotations

from typing import Any, Sequence

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter import ExportError, ExportRecord, InvalidArgumentError, ONNXProgram, infer_dynamic_shapes
from onnxsight.exporter import example_inputs

AUTO = "auto"


def resolve_dynamic_shapes(model: Any, args: Any, kwargs: Any, dynamic_shapes: Any, dynamic_axes: Any,
                           examples: Sequence[Any] | None) -> tuple[Any, list[tuple[tuple, dict]]]:
    """(the dynamic_shapes to export with, the examples as (args, kwargs)); ARG003 for a bad combination."""
    ctx = DiagnosticContext(fallback_location=caller_location())
    auto = isinstance(dynamic_shapes, str) and dynamic_shapes == AUTO
    calls: list[tuple[tuple, dict]] = []
    if examples is not None:
        if not isinstance(examples, (list, tuple)):
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"examples must be a list of inputs like args, got "
                                                     f"{type(examples).__name__}")
        else:
            for number, example in enumerate(examples, start=1):
                try:
                    calls.append(example_inputs(example, with_kwargs=bool(kwargs)))
                except TypeError as exc:
                    ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"example {number}: {exc}")
    if auto and dynamic_axes is not None:
        ctx.emit(rules.BAD_DYNAMIC_SHAPES, error="dynamic_shapes='auto' infers the dims from examples; "
                                                 "give it or dynamic_axes, not both")
    elif auto and not calls and not ctx.errors:
        ctx.emit(rules.BAD_DYNAMIC_SHAPES, error="dynamic_shapes='auto' needs examples=[...]: the inputs of other "
                                                 "calls, whose sizes say which dims vary")
    elif isinstance(dynamic_shapes, str) and not auto:
        ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"dynamic_shapes={dynamic_shapes!r}: the only string accepted is "
                                                 "'auto' (with examples=[...])")
    if auto and not ctx.errors:
        main = (tuple(args) if isinstance(args, tuple) else (args,)), dict(kwargs or {})
        dynamic_shapes = infer_dynamic_shapes(ctx, model, *main, calls)
    if ctx.errors:
        record = ExportRecord()
        with record.stage("arguments") as stage:
            stage.status = "failed"
        raise InvalidArgumentError("export() was called with invalid arguments", diagnostics=ctx.diagnostics,
                                   record=record)
    return dynamic_shapes, calls


def verify_examples(program: ONNXProgram, calls: Sequence[tuple[tuple, dict]], run_verify: Any) -> list[Any]:
    """Verify the program at each example; an example it cannot take is an ExportError with the VER rule.

    Results go to ``program.example_verifications`` (one per example, in order).
    """
    from onnxsight.verification import VerificationError

    results = []
    for number, (args, kwargs) in enumerate(calls, start=1):
        try:
            results.append(run_verify(program, args, kwargs))
        except VerificationError as exc:
            raise ExportError(f"example {number} does not run on the exported program: {exc}",
                              diagnostics=[*program.diagnostics, *exc.diagnostics], record=program.record) from exc
    program.example_verifications = results
    return results
