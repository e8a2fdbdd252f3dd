"""Capture: torch.export non-strict, then strict; every attempt recorded and classified.

Dynamic dims: a dim the user asked dynamic either stays dynamic, is narrowed by
one of torch.export's suggested fixes (a range or a relation, applied and
reported as CAP007 with the ``dynamic_shapes`` code to write), or is refused
(CAP005/CAP008, naming the input, axis and the user's line). The outcome of
every requested dim is kept in ``facts["dynamic_dims"]`` (see ``_audit``).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, is_user_file, traceback_frames, user_frame
from onnxsight.exporter.capture import _audit as audit
from onnxsight.exporter.capture import _refused as refused
from onnxsight.exporter.capture._fixes import RequestedDim, derive_range_fixes, parse_fixes, render, requested_dims
from onnxsight.exporter.capture._tied import apart, model_line, refine, tied
from onnxsight.exporter.capture._patches import applied as applied_patches
from onnxsight.exporter._record import CaptureAttempt
from onnxsight.exporter.capture._torchlog import TorchLog, recording
from onnxsight.exporter.capture._packed import PackedSequenceRefused, packed_sequences
from onnxsight.exporter.capture._export_flag import dynamo_sees_onnx_export
from onnxsight.exporter.capture._early_stop import Watch
from onnxsight.exporter.capture._rnn_kernels import rnn_shape_kernels
from onnxsight.exporter.inputs._fake import model_is_fake

STRATEGIES: tuple[tuple[str, bool], ...] = (("torch.export(strict=False)", False), ("torch.export(strict=True)", True))
MAX_FIX_ROUNDS = 4
# How a dim whose example size is 0 or 1 is captured: from the example grown to size 2 along it first where every
# such size is 1, then torch.export's size-oblivious reasoning, then (when that finds no fix it can apply) the
# grown example with the fixes; each capture is checked at the example.
PLAIN, OBLIVIOUS, GROWN = "plain", "size-oblivious", "example grown to 2"
HOW = {OBLIVIOUS: "captured size-oblivious", GROWN: "captured from the example grown to size 2"}


def classify(exc: BaseException) -> rules.Rule:
    """The catalog rule for why torch.export failed, by exception type and structured fields.

    The exception and its causes are inspected outermost first; torch's message
    text is never matched, except to tell an INVALID_INPUT about dynamic_shapes.
    """
    from torch._dynamo.exc import UncapturedHigherOrderOpError, Unsupported, UserError, UserErrorType
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError, GuardOnDataDependentSymNode

    chain = list(refused.chain(exc))
    if any(isinstance(error, PackedSequenceRefused) for error in chain):
        return rules.PACKED_SEQUENCE_REFUSED
    # NOTE: strict capture wraps a guard on a data-dependent value (an unbacked symbol from a tensor's
    # contents) in a UserError(CONSTRAINT_VIOLATION); it names no dim the user asked dynamic.
    guard = next((error for error in chain if isinstance(error, GuardOnDataDependentSymNode)), None)
    if guard is not None and refused.needs_integer(guard):
        return rules.DATA_DEPENDENT_INTEGER
    if guard is not None or any(isinstance(error, (DataDependentOutputException, DynamicOutputShapeException))
                                for error in chain):
        return rules.DATA_DEPENDENT_CONTROL_FLOW
    for error in chain:
        if isinstance(error, UserError):
            kind = error.error_type
            if kind in (UserErrorType.CONSTRAINT_VIOLATION, UserErrorType.DYNAMIC_DIM):
                return rules.DYNAMIC_SHAPE_VIOLATION
            if kind is UserErrorType.DYNAMIC_CONTROL_FLOW:
                return rules.DATA_DEPENDENT_CONTROL_FLOW
            if kind is UserErrorType.INVALID_INPUT and "dynamic_shapes" in str(error):
                return rules.BAD_DYNAMIC_SHAPES
        elif isinstance(error, ConstraintViolationError):
            return rules.DYNAMIC_SHAPE_VIOLATION
        elif isinstance(error, (Unsupported, UncapturedHigherOrderOpError)):
            return rules.UNSUPPORTED_PYTHON_CONSTRUCT
    if refused.uint8_mask(exc) is not None:
        return rules.UINT8_MASK
    if refused.unflattenable_output(exc) is not None:
        return rules.OUTPUT_TYPE_NOT_FLATTENABLE
    return rules.ALL_CAPTURE_FAILED


def _short(exc: BaseException, limit: int = 600) -> str:
    """torch's first paragraph: the sentence that says what went wrong, without its debugging advice."""
    text = str(exc).strip() or type(exc).__name__
    text = text.split("\n\n")[0].strip()
    # torch's pointer to its own docs ends some messages (a dynamic_shapes structure mismatch): not the problem
    text = "\n".join(line for line in text.splitlines() if not line.startswith("For more information about this error"))
    return text if len(text) <= limit else text[:limit] + " ..."


@dataclass
class _Try:
    program: torch.export.ExportedProgram | None
    error: BaseException | None
    log: TorchLog
    seconds: float


def _run(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any, strict: bool,
         oblivious: bool, watched: frozenset[str], echo: bool = False, stop: Watch | None = None) -> _Try:
    """One torch.export call with torch's logging recorded instead of printed (and printed too: ``echo``);
    ``stop``: stopped at a guard that rules out size 2 for one of those dims (``_early_stop``)."""
    from torch.fx.experimental import _config as shapes_config

    start = time.perf_counter()
    with recording(watched, echo=echo, stop=stop) as log, warnings.catch_warnings(record=True) as caught, \
            shapes_config.patch(backed_size_oblivious=oblivious):
        # Every warning is recorded whatever the process's filters say ("ignore" would hide torch's from
        # the report, "error" would turn one into a capture failure); the user's own are re-issued after.
        warnings.simplefilter("always")
        # torch.export's own deprecation noise, not the user's concern.
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
        program: torch.export.ExportedProgram | None = None
        error: BaseException | None = None
        try:
            # RNN ops keep a dynamic sequence length (_rnn_kernels); packed sequences become sequence_lens (_packed);
            # dynamo folds is_in_onnx_export() (_export_flag)
            with rnn_shape_kernels(), packed_sequences(), \
                    dynamo_sees_onnx_export() if strict else contextlib.nullcontext():
                program = torch.export.export(model, args, kwargs=kwargs or None, dynamic_shapes=dynamic_shapes,
                                              strict=strict)
        except Exception as exc:  # noqa: BLE001 - every failure is recorded and classified
            error = exc
    _sort_warnings(caught, log)
    return _Try(program, error, log, time.perf_counter() - start)


def _sort_warnings(caught: list[warnings.WarningMessage], log: TorchLog) -> None:
    """The user's own warnings are shown again; torch's go to the attempt's log with its other output."""
    for warning in caught:
        if is_user_file(warning.filename):
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno or 0)
        else:
            log.add_warning(f"{warning.category.__name__}: {warning.message}")


def _read_fixes(message: str, by_label: dict[str, list[RequestedDim]]) -> tuple[list[Any], str, dict[str, Any]]:
    """(fixes, the "Suggested fixes" text to refine with, {label: (value, fix)} of those making a dim static)."""
    fixes, suggested = parse_fixes(message, set(by_label)), message
    if not fixes:  # guards torch.export suggests no fix for: propose a range, torch checks it next attempt
        fixes = derive_range_fixes(message, {label: dims[0].size for label, dims in by_label.items()})
        suggested = "Suggested fixes:\n" + "".join(f"  {fix.text}\n" for fix in fixes)
    static = {f.name: (f.value, f.text) for f in fixes if f.kind == "static" and f.name in by_label}
    for name, value in audit.specialised(message):
        if name in by_label:
            static.setdefault(name, (value, f"{name} = {value}"))
    return fixes, suggested, static


@dataclass
class _Session:
    """One strategy, retried with torch.export's safe fixes applied, until it succeeds or is refused."""

    model: torch.nn.Module
    args: tuple
    kwargs: dict[str, Any]
    ctx: DiagnosticContext
    attempts: list[CaptureAttempt]
    strategy: str
    strict: bool
    dims: list[RequestedDim]
    entries: dict[tuple[str, int], dict[str, Any]]
    final: bool = False                  # a refusal or an unfixable constraint was reported: stop
    error: BaseException | None = None
    applied: list[Any] = field(default_factory=list)  # the Fixes applied, torch.export's and derived ones
    deferred: tuple[_Try, dict[str, Any], Any] | None = None  # a size-1 specialisation left to the grown example
    where: audit.Where = (None, None)    # where the first applied fix was required
    # The plain capture's violation (a guard without a fix, or a fix that makes a dim static: its
    # {label: (value, fix)}), retried size-oblivious; reported when that retry does not capture the model.
    retried: tuple[_Try, BaseException, dict[str, Any] | None, Any] | None = None
    sized_failed: bool = False           # the size-oblivious capture failed other than by a violation
    # The grown example's capture tried first (_grown_first): the size-oblivious capture that follows it reuses
    # it (and its check at the example, in ``checked``) where it would capture that grown example again.
    first: _Try | None = None
    checked: dict[int, str | None] = field(default_factory=dict)   # id(program) -> check_at_example's answer

    def run(self, dynamic_shapes: Any) -> torch.export.ExportedProgram | None:
        """Capture; dims whose example size is 1 first from the example grown to 2 (``_grown_first``), then
        (or where a size is 0) size-oblivious, then from the grown example with the fixes torch proposes."""
        small = [d for d in self.dims if d.size <= 1]
        if small and all(d.size == 1 for d in small):
            program = self._grown_first(dynamic_shapes)
            if program is not None or self.final:
                return program
        shapes, mode = dynamic_shapes, (OBLIVIOUS if small else PLAIN)
        for _ in range(MAX_FIX_ROUNDS + 1):
            args, kwargs = audit.grown(self.args, self.kwargs, self.dims) if mode == GROWN else (self.args,
                                                                                                self.kwargs)
            # NOTE: only the first size-oblivious capture stops early: its violation on a size-0/1 dim means the
            # grown example next whatever the violation says; a retry's (self.retried) is judged in full.
            stop = Watch({s: d.label for d in self.dims if d.size <= 1 for s in d.sources}, {}) \
                if mode == OBLIVIOUS and self.retried is None else None
            label = self.strategy + (f", {mode}" if mode != PLAIN else "") + \
                (f", {len(self.applied)} fix(es) applied" if self.applied else "")
            if mode == GROWN and shapes is dynamic_shapes and self.first is not None:
                attempt = replace(self.first, seconds=0.0)   # that capture again: its outcome, not a second trace
                label += " (the first attempt's outcome)"
            else:
                attempt = _run(self.model, args, kwargs, shapes, self.strict, mode == OBLIVIOUS,
                               frozenset(s for d in self.dims for s in d.sources), echo=self.ctx.verbose, stop=stop)
            if attempt.program is not None:
                self.attempts.append(CaptureAttempt(label, True, attempt.seconds, log=attempt.log.log_lines()))
                return self._accept(attempt, shapes, mode)
            exc = attempt.error
            assert exc is not None
            stopped = attempt.log.stopped
            if stopped is not None and any(error is stopped for error in refused.chain(exc)):
                self.attempts.append(CaptureAttempt(label, False, attempt.seconds, type(stopped).__name__, str(stopped),
                                                    rules.DYNAMIC_SHAPE_VIOLATION.code, log=attempt.log.log_lines()))
                self.error = stopped
                if stopped.value is not None:   # a size fixed: refused at this line if the grown example fails too
                    self.deferred = (attempt, {stopped.dim: (stopped.value, f"{stopped.dim} = {stopped.value}")},
                                     shapes)
                mode = GROWN   # as its violation would have: _fix's fallback for a size-0/1 dim
                continue
            rule = classify(exc)
            self.attempts.append(CaptureAttempt(label, False, attempt.seconds, type(exc).__name__, _short(exc),
                                                rule.code, log=attempt.log.log_lines()))
            self.error = exc
            if self.retried is not None and mode == OBLIVIOUS and rule is not rules.DYNAMIC_SHAPE_VIOLATION:
                self._report_retried()
                return None
            if rule is not rules.DYNAMIC_SHAPE_VIOLATION and mode == OBLIVIOUS:
                mode = GROWN  # size-oblivious capture hit something else: capture a grown example
                self.sized_failed = True
                continue
            if rule is not rules.DYNAMIC_SHAPE_VIOLATION and mode == GROWN and self.sized_failed:
                # NOTE: torch's own check on sizes failed at both (repeat_interleave: repeats of size 1 or of the
                # input's): the model computes with the example's size 0/1. A plain capture says so as a
                # violation (CAP008), where the grown example's error would be CAP006 with torch's words.
                self.sized_failed = False
                mode = PLAIN
                continue
            if rule is not rules.DYNAMIC_SHAPE_VIOLATION and self.deferred is not None:
                self._refuse(*self.deferred)  # the grown example failed too: the size-1 specialisation is why
                return None
            if rule is rules.BAD_DYNAMIC_SHAPES:  # the spec, not the strategy: every strategy refuses it alike
                return None
            if rule is not rules.DYNAMIC_SHAPE_VIOLATION:
                if not self._apart(attempt, exc):
                    self._strategy_failed(attempt, exc)
                return None
            refined = self._fix(attempt, shapes, exc, fallback=mode == OBLIVIOUS and self.retried is None,
                                retry=mode == PLAIN)
            if refined is GROWN:
                mode = GROWN
                continue
            if refined is OBLIVIOUS:  # see the NOTEs in _fix
                mode = OBLIVIOUS
                continue
            if refined is None:
                return None
            shapes = refined
        self._violation(attempt, exc)
        return None

    def _grown_first(self, shapes: Any) -> torch.export.ExportedProgram | None:
        """The example grown to size 2 along every size-1 dim, captured as torch.export asks examples to be
        (sizes >= 2) and checked at the example; None (and ``first`` kept) when it does not capture the model.

        NOTE: why this comes before the size-oblivious capture. Where both capture a model they trace the same
        branches (size-oblivious reasoning takes a size >= 2's side of every size test it can; one it cannot
        adds a guard that rules out 2, and the grown example is captured next), and both graphs are checked
        at the user's size-1 example, so the grown example first gives the same graph and the same guarantee
        (the dim dynamic, the graph right at size 1), and where size-oblivious capture fails (a size test in
        a kernel: Hiera's `AdaptiveAvgPool1d` guards `batch <= 1` at its last module) one trace instead of
        two. It is what torch.export's tutorial tells users to pass where a dim is to be dynamic (sizes other
        than 0 and 1; its size-oblivious switch is experimental there), and what optimum's dummy inputs are
        (batch 2). What the size-oblivious capture still decides, it decides as before:
        when the grown example fails (growing one dim and not another that the model ties to it: a cache's
        past and its mask; a model that runs only at batch 1) or computes something else at the example (a
        branch on the size), the size-oblivious capture runs next and finds the line a refusal names (and
        reuses this capture where it sends capture to the grown example). A size of 0 is not grown first:
        an empty tensor (a cache before the first step) grown is zeros the model was not given.
        """
        args, kwargs = audit.grown(self.args, self.kwargs, self.dims)
        attempt = _run(self.model, args, kwargs, shapes, self.strict, False,
                       frozenset(s for d in self.dims for s in d.sources), echo=self.ctx.verbose)
        label, log = f"{self.strategy}, {GROWN}", attempt.log.log_lines()
        if attempt.program is not None:
            problem = self.checked[id(attempt.program)] = audit.check_at_example(attempt.program, self.model,
                                                                                 self.args, self.kwargs)
            if problem is None:
                self.attempts.append(CaptureAttempt(label, True, attempt.seconds, log=log))
                return self._accept(attempt, shapes, GROWN)
            self.attempts.append(CaptureAttempt(label, False, attempt.seconds, error=problem,
                                                rule=rules.EXAMPLE_SIZE_SPECIALIZED.code, log=log))
        else:
            exc = attempt.error
            assert exc is not None
            self.attempts.append(CaptureAttempt(label, False, attempt.seconds, type(exc).__name__, _short(exc),
                                                classify(exc).code, log=log))
        self.first = attempt
        return None

    def _retag(self, rule: rules.Rule) -> None:
        """The last attempt's rule: what onnxsight made of its violation (fixed, refused)."""
        self.attempts[-1] = replace(self.attempts[-1], rule=rule.code)

    def _fix(self, attempt: _Try, shapes: Any, exc: BaseException, *, fallback: bool, retry: bool = False) -> Any:
        """The refined dynamic_shapes to try next, or None once a refusal or violation is reported.

        ``fallback``: a violation without an applicable fix returns GROWN (try a grown example) instead.
        ``retry``: it, or a fix that makes a dim static, returns OBLIVIOUS (capture again size-oblivious).
        In that retry, a violation without a fix reports the plain capture's (``_report_retried``).
        """
        by_label = audit.groups(self.dims)
        fixes, suggested, static = _read_fixes(str(getattr(exc, "msg", None) or exc), by_label)
        # NOTE: size-oblivious capture still specialises a size-1 dim the model branches on
        # (`batch == 1`) next to other violations; the grown example's capture (checked at the
        # example in _accept) decides whether that dim can stay dynamic, so it is not refused here.
        if static and fallback and all(any(d.size <= 1 for d in by_label[name]) for name in static):
            self.deferred = (attempt, static, shapes)
            return GROWN
        # NOTE: a size of 1 somewhere inside the model at the example (a CNN's last feature map at
        # 32x32) makes plain capture solve its guards to the example's size; size-oblivious reasoning
        # (torch.onnx's default) does not, and the result is checked at the example (_accept). A
        # specialisation the retry still requires is real: it is refused with the retry's own line.
        if static and retry:
            self.retried = (attempt, exc, static, shapes)
            return OBLIVIOUS
        if static:
            self._refuse(attempt, static, shapes)
            return None
        # NOTE: size-oblivious reasoning bounds a dim whose example is 0 or 1 by that example
        # (`batch <= 1`); applied, it would empty the range of the grown-example retry ([2:1]).
        # Such a range is about the example, not the model: capture the grown example instead.
        if fallback and any(f.kind == "range" and any(d.size <= 1 for d in by_label.get(f.name, ()))
                            for f in fixes):
            return GROWN
        try:
            refined = refine(suggested, shapes, self.model, self.args, self.kwargs) if fixes else None
        except Exception:  # noqa: BLE001 - a fix torch cannot apply itself is reported, not guessed
            refined = None
        if refined is None:
            if fallback:
                return GROWN
            # NOTE: a guard true over the whole range that sympy cannot prove (a KV cache's
            # contiguity check: min(8 + 8*past, 16 + 16*past) == 8 + 8*past) has no fix to apply;
            # size-oblivious reasoning does not raise it. The graph is then checked at the example
            # (_accept); if that capture fails too, this violation is the one reported.
            if retry:
                self.retried = (attempt, exc, None, shapes)
                return OBLIVIOUS
            if self.retried is not None:
                self._report_retried()
                return None
            self._violation(attempt, exc)
            return None
        self.applied.extend(fixes)
        self._retag(rules.DYNAMIC_SHAPE_FIX_APPLIED)
        found = audit.narrowed(self.entries, attempt.log, self.dims, fixes)
        self.where = self.where if self.where[0] else found
        return refined

    def _refuse(self, attempt: _Try, static: dict[str, Any], shapes: Any) -> None:
        """CAP005/CAP008 for each dim a fix would make static, at the line ``attempt``'s log names."""
        by_label = audit.groups(self.dims)
        together = "\n".join(text for _, text in static.values())  # the static spec: every refused dim
        for name, (value, text) in static.items():
            small = any(d.size <= 1 for d in by_label[name])
            audit.refuse(self.ctx, self.entries, attempt.log, by_label[name], value, text, shapes, size_cause=small,
                         every=self.dims, static=together, model=self.model, kwargs=self.kwargs)
            self._retag(rules.EXAMPLE_SIZE_SPECIALIZED if small else rules.DYNAMIC_DIM_SPECIALIZED)
        self.final = True

    def _accept(self, attempt: _Try, shapes: Any, mode: str) -> torch.export.ExportedProgram | None:
        program = attempt.program
        assert program is not None
        if mode != PLAIN:
            problem = self.checked[id(program)] if id(program) in self.checked else \
                audit.check_at_example(program, self.model, self.args, self.kwargs)
            small = audit.groups(d for d in self.dims if d.size <= 1)
            if problem is not None and self.retried is not None and not small:
                self.attempts[-1] = replace(self.attempts[-1], success=False, error=problem)
                self._report_retried()
                return None
            if problem is not None:
                log = self.deferred[0].log if self.deferred is not None else attempt.log  # names the line
                for dims in small.values():
                    audit.refuse(self.ctx, self.entries, log, dims, dims[0].size, problem, shapes,
                                 size_cause=True)
                # captured, but not the model at the example: the attempt did not capture it
                self.attempts[-1] = replace(self.attempts[-1], success=False, rule=rules.EXAMPLE_SIZE_SPECIALIZED.code,
                                            error=problem)
                self.final = True
                return None
            how = HOW[mode]
            audit.kept_dynamic(self.ctx, [dims[0] for dims in small.values()], how)
            if self.retried is not None and self.retried[2]:
                audit.kept_oblivious(self.ctx, self.entries, self.retried[0].log, self.dims, self.retried[2])
            for dims in small.values():
                audit.set_status(self.entries, dims, "dynamic", f"example size {dims[0].size}: {how}, checked at "
                                 "the example")
            if mode == GROWN:  # the example it was checked at, the user's, is the one verify() runs by default
                program.example_inputs = (tuple(self.args), dict(self.kwargs or {}))
        if self.applied:
            audit.fixes_applied(self.ctx, self.entries, self.dims, self.applied, render(shapes), self.where)
        self._tied(program, attempt.log)
        return program

    def _tied(self, program: torch.export.ExportedProgram, log: TorchLog) -> None:
        """CAP024 for dims named apart that the program ties without a fix of torch's saying so (CAP007)."""
        quiet = [d for d in self.dims if self.entries.get((d.path, d.axis), {}).get("status") != "narrowed"]
        for dims, relation, found in tied(program, quiet, log):
            self.ctx.emit(rules.DIMS_APART_TIED, location=found[0], dims=", ".join(d.describe() for d in dims),
                          cause=audit.cause(*found), relation=relation)
            audit.set_status(self.entries, [d for d in self.dims if d.label in {x.label for x in dims}], "narrowed",
                             f"tied: {relation}", found)

    def _report_retried(self) -> None:
        """The size-oblivious retry did not capture the model: the plain capture's refusal or violation."""
        assert self.retried is not None
        attempt, exc, static, shapes = self.retried
        if static:
            self._refuse(attempt, static, shapes)
        else:
            self._violation(attempt, exc)

    def _strategy_failed(self, attempt: _Try, exc: BaseException) -> None:
        frames = traceback_frames(exc)
        self.ctx.emit(rules.CAPTURE_STRATEGY_FAILED, location=user_frame(frames), stack=frames,
                      strategy=self.strategy, seconds=f"{attempt.seconds:.2f}", error_type=type(exc).__name__,
                      error=_short(exc, 300).splitlines()[0])  # the rest (torch's advice) is in the attempt

    def _apart(self, attempt: _Try, exc: BaseException) -> bool:
        """CAP023 where tracing failed broadcasting two dims the user named apart; False for other failures."""
        dims, sizes = apart(exc, attempt.log, self.dims)
        if not dims:
            return False
        frames = traceback_frames(exc)
        found = model_line(frames)
        self.ctx.emit(rules.DIMS_APART_MUST_MATCH, location=found[0], stack=frames,
                      dims=" and ".join(d.describe() for d in dims), cause=audit.cause(*found),
                      sizes=sizes, examples=" and ".join(str(d.size) for d in dims))
        self._retag(rules.DIMS_APART_MUST_MATCH)
        audit.set_status(self.entries, [d for d in self.dims if d.label in {x.label for x in dims}], "refused",
                         f"broadcast against each other ({sizes}) with example sizes "
                         f"{' and '.join(str(d.size) for d in dims)}", found)
        self.final = True
        return True

    def _violation(self, attempt: _Try, exc: BaseException) -> None:
        """CAP004: constraints torch.export offers no applicable fix for."""
        frames = traceback_frames(exc)
        names = audit.violated(str(getattr(exc, "msg", None) or exc), self.dims)
        found = audit.where(attempt.log, names)
        self.ctx.emit(rules.DYNAMIC_SHAPE_VIOLATION, location=found[0] or user_frame(frames), stack=frames,
                      dims=", ".join(d.describe() for d in names) or "the dynamic dims", error=_short(exc))
        audit.set_status(self.entries, names, "refused", _short(exc, 200), found)
        self.final = True


def capture(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any,
            ctx: DiagnosticContext, attempts: list[CaptureAttempt],
            facts: dict[str, Any] | None = None) -> torch.export.ExportedProgram | None:
    """Try each strategy in order; append an attempt per try. None when all failed (errors emitted).

    ``facts["dynamic_dims"]`` receives the audit of every dim asked dynamic. The capture
    patches the model needs (``_patches``: known library functions torch.export cannot
    trace) are installed for the duration and reported (CAP010/CAP011).
    """
    with applied_patches(model, ctx):
        return _capture(model, args, kwargs, dynamic_shapes, ctx, attempts, facts)


def _capture(model: torch.nn.Module, args: tuple, kwargs: dict[str, Any], dynamic_shapes: Any,
             ctx: DiagnosticContext, attempts: list[CaptureAttempt],
             facts: dict[str, Any] | None) -> torch.export.ExportedProgram | None:
    dims = requested_dims(model, args, kwargs, dynamic_shapes)
    entries = audit.start(dims)
    if facts is not None and dims:
        facts["dynamic_dims"] = list(entries.values())
    failures: list[tuple[str, BaseException]] = []
    for strategy, strict in STRATEGIES:
        session = _Session(model, args, kwargs, ctx, attempts, strategy, strict, dims, entries)
        program = session.run(dynamic_shapes)
        if program is not None:
            audit.confirm(entries, dims)
            return program
        if session.final:
            return None
        assert session.error is not None
        failures.append((strategy, session.error))
        if classify(session.error) is rules.BAD_DYNAMIC_SHAPES:
            break  # ARG003 once, without a CAP001 per strategy repeating torch's message
    # Every strategy failed: report the first (most informative, non-strict) failure as the error, unless the
    # model does not run at all (CAP025: the model's own error, not the exporter's).
    strategy, exc = failures[0]
    rule = classify(exc)
    if rule is rules.ALL_CAPTURE_FAILED and _raises_eagerly(ctx, model, args, kwargs):
        return None
    frames = traceback_frames(exc)
    location = user_frame(frames)
    user, library = model_line(frames)
    raised = library or user  # CAP006: the model's line the error came from (a view in transformers' modeling file)
    ctx.emit(rule, location=location, stack=frames, strategy=strategy, error=_short(exc),
             error_type=type(exc).__name__, strategies=", ".join(s for s, _ in failures),
             dims="the dynamic dims", cause=audit.cause(location, refused.library_origin(exc)),
             subject=refused.uint8_mask(exc) or refused.unflattenable_output(exc) or "",
             raised_at=f" (raised at {audit.cause(raised)})" if raised not in (None, location) else "")
    return None


def _raises_eagerly(ctx: DiagnosticContext, model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Run ``model`` once as PyTorch runs it (``audit.run_eagerly``: copies of the inputs, buffers kept); where it
    raises, emit CAP025 at the line that raised and return True. Only after every strategy failed: one more
    forward then costs nothing a successful export pays."""
    if model_is_fake(model):   # weights without data (fake_mode(), meta): nothing to run
        return False
    try:
        audit.run_eagerly(model, args, kwargs)
    except Exception as error:  # noqa: BLE001 - any error of the model's is the one to report
        emit_model_raised(ctx, model, error)
        return True
    return False


def emit_model_raised(ctx: DiagnosticContext, model: Any, error: BaseException) -> None:
    """CAP025 for ``error``, raised by ``model`` when PyTorch ran it, at the line that raised it."""
    frames = traceback_frames(error)
    location = user_frame(frames)
    origin = refused.caller(error)
    ctx.emit(rules.MODEL_RAISES_EAGERLY, location=location, stack=frames, model=type(model).__name__,
             error_type=type(error).__name__, error=_short(error),
             cause=audit.cause(location, origin if origin != location else None))
