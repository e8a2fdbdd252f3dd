"""Capture: torch.export non-strict, then strict; every attempt recorded and classified."""

from __future__ import annotations

import time
import warnings
from typing import Any

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, traceback_frames, user_frame
from onnxsight.exporter._record import CaptureAttempt

STRATEGIES: tuple[tuple[str, bool], ...] = (("torch.export(strict=False)", False), ("torch.export(strict=True)", True))


def classify(exc: BaseException) -> rules.Rule:
    """The catalog rule that best names why torch.export failed."""
    name = type(exc).__name__
    text = str(exc)
    user_error_type = str(getattr(exc, "error_type", ""))
    if "INVALID_INPUT" in user_error_type and "dynamic_shapes" in text:  # structure torch checks, we did not
        return rules.BAD_DYNAMIC_SHAPES
    if "specializ" in text or ("inferred to be a constant" in text):
        return rules.DYNAMIC_DIM_SPECIALIZED
    if name in ("ConstraintViolationError",) or "CONSTRAINT_VIOLATION" in user_error_type:
        return rules.DYNAMIC_SHAPE_VIOLATION
    if name in ("GuardOnDataDependentSymNode", "DataDependentOutputException") or "DYNAMIC_CONTROL_FLOW" in user_error_type \
            or "data-dependent" in text.lower() or "data dependent" in text.lower():
        return rules.DATA_DEPENDENT_CONTROL_FLOW
    if name in ("Unsupported", "UncapturedHigherOrderOpError") or "UNSUPPORTED" in user_error_type:
        return rules.UNSUPPORTED_PYTHON_CONSTRUCT
    return rules.ALL_CAPTURE_FAILED


def _short(exc: BaseException, limit: int = 600) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def capture(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any,
            ctx: DiagnosticContext, attempts: list[CaptureAttempt]) -> torch.export.ExportedProgram | None:
    """Try each strategy in order; append an attempt per try. None when all failed (errors emitted)."""
    failures: list[tuple[str, BaseException]] = []
    for strategy, strict in STRATEGIES:
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                # torch.export's own deprecation noise, not the user's concern.
                warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
                program = torch.export.export(model, args, kwargs=kwargs or None, dynamic_shapes=dynamic_shapes,
                                              strict=strict)
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and classified
            seconds = time.perf_counter() - start
            rule = classify(exc)
            attempts.append(CaptureAttempt(strategy, False, seconds, type(exc).__name__, _short(exc), rule.code))
            failures.append((strategy, exc))
            frames = traceback_frames(exc)
            ctx.emit(rules.CAPTURE_STRATEGY_FAILED, location=user_frame(frames), stack=frames,
                     strategy=strategy, seconds=f"{seconds:.2f}", error_type=type(exc).__name__,
                     error=_short(exc, 300))
            continue
        attempts.append(CaptureAttempt(strategy, True, time.perf_counter() - start))
        return program
    # Every strategy failed: report the first (most informative, non-strict) failure as the error.
    strategy, exc = failures[0]
    frames = traceback_frames(exc)
    rule = classify(exc)
    fields = dict(strategy=strategy, error=_short(exc), error_type=type(exc).__name__,
                  strategies=", ".join(s for s, _ in failures))
    if rule is rules.DYNAMIC_DIM_SPECIALIZED:
        fields.update(dim="?", input="?", value="a constant")
    ctx.emit(rule, location=user_frame(frames), stack=frames, **fields)
    return None
