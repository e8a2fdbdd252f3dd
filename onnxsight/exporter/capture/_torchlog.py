"""torch's logging during one capture attempt: kept for the report, never printed, and mined for lines.

A failed strict capture makes torch print dozens of ``E... torch/_guards.py``
lines on stderr. While an attempt runs, every handler of torch's loggers is
replaced by one recorder: records at WARNING and above become the attempt's
``log`` lines (the report shows them), and the ShapeEnv's INFO records
(``create_symbol``, ``[guard added]``, ``set_replacement``) become
:class:`ShapeEvent` values carrying the user's source line, which torch's own
errors do not carry in non-strict mode.

Versions: the ShapeEnv's record formats (``create_symbol`` with the source name as its third
argument, ``[guard added]``, ``set_replacement``) are those of torch 2.13.0 (the lock) and 2.14.1
(``make test-latest``); tests/exporter/test_library_versions.py fails by name when a release changes them.

# NOTE: the process's logging configuration must not change what we learn. ``logging.disable`` (a
# manager-wide threshold), and ``dictConfig``'s default of disabling every logger that already exists,
# would stop those records before any handler sees them. For the attempt only, torch's loggers are
# enabled and answer ``isEnabledFor`` from their own level alone (an instance attribute that
# ``Logger.info``/``.warning`` consult first); nothing else in the process is touched, and
# everything is put back after. Tested under each in tests/exporter/test_capture_logging_config.py.
"""

from __future__ import annotations

import functools
import io
import linecache
import logging
import operator
import os
import re
import sys
from contextlib import contextmanager, nullcontext, redirect_stderr
from dataclasses import dataclass
from typing import Iterator

import torch

from onnxsight.diagnostics import Location, is_user_file
from onnxsight.exporter.capture._early_stop import SizeOneGuard, Watch

SHAPES_LOGGER = "torch.fx.experimental.symbolic_shapes"
MAX_LINES = 200
_SYMBOL = re.compile(r"\b[su]\d+\b")


@dataclass(frozen=True)
class ShapeEvent:
    """One ShapeEnv decision: a symbol created, a guard added, a symbol replaced by a value."""

    kind: str                       # "symbol" | "guard" | "replacement"
    symbols: tuple[str, ...]        # sympy symbol names involved (``s77``)
    text: str                       # the source name, the guard expression, or the replacement value
    location: Location | None       # the user's line that caused it (None: torch's own doing)
    origin: Location | None = None  # the model library's line inside it (transformers), if any


class TorchLog(logging.Handler):
    """Records torch's log lines and the ShapeEnv's decisions of one attempt."""

    def __init__(self, watched: frozenset[str] = frozenset(), stop: Watch | None = None) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.events: list[ShapeEvent] = []
        self.dropped = 0
        self.watched = watched              # torch's source names of the dims asked dynamic
        self._symbols: set[str] = set()     # the symbols torch created for them
        self.stop = stop                    # the size-0/1 dims whose doom stops the attempt (_early_stop)
        self.stopped: SizeOneGuard | None = None
        self._stopping = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.name == SHAPES_LOGGER and record.levelno < logging.WARNING:
                event = self._event(record)
                if event is not None:
                    self.events.append(event)
            elif record.levelno >= logging.WARNING:
                first = record.getMessage().strip().splitlines() or [""]
                self._add(f"{record.levelname} {record.name}: {first[0][:300]}")
        except Exception:  # noqa: BLE001 - a log record must never break the export
            return
        if self._stopping:   # out of torch's trace, once (see _early_stop)
            self._stopping = False
            raise self.stopped  # type: ignore[misc]

    def source_symbols(self) -> dict[str, str]:
        """torch's source name (``L['x'].size()[0]``) -> the symbol created for it."""
        return {e.text: e.symbols[0] for e in self.events if e.kind == "symbol" and e.symbols}

    def where(self, symbol: str, *, specialised: bool = False) -> ShapeEvent | None:
        """The event whose line specialised (or else first constrained) ``symbol``.

        # NOTE: a size is fixed by an equality: the symbol replaced by a constant, else the first
        # ``Eq`` guard on it (``Eq((h//8)*(w//8), 16)``: a branch on the trained image size). The
        # ``Ne``/``>=`` guards a conv adds earlier only narrow the range; pointing at them named
        # DINOv2's patch embedding instead of its position-embedding shortcut.
        """
        own = [e for e in self.events if symbol in e.symbols and e.location]
        if specialised:
            ranked = ([e for e in own if e.kind == "replacement" and e.symbols[:1] == (symbol,)
                       and re.fullmatch(r"-?\d+", e.text.strip())],
                      [e for e in own if e.kind == "guard" and e.text.startswith("Eq(")],
                      [e for e in own if e.kind == "replacement" and e.symbols[:1] == (symbol,)])
            for events in ranked:
                if events:
                    return events[0]
        return next((e for e in own if e.kind == "guard"), None)

    def _event(self, record: logging.LogRecord) -> ShapeEvent | None:
        """A ShapeEnv decision about a watched dim; the user's line is looked up only for those."""
        message, args = str(record.msg), record.args if isinstance(record.args, tuple) else ()
        if "create_symbol" in message and len(args) >= 3 and str(args[2]) in self.watched:
            self._symbols.add(str(args[0]))
            if self.stop is not None and len(args) >= 4:
                self.stop.created(str(args[0]), str(args[2]), str(args[3]))
            return ShapeEvent("symbol", (str(args[0]),), str(args[2]), None)
        if "[guard added]" in message and len(args) >= 2:
            symbols = tuple(dict.fromkeys(_SYMBOL.findall(str(args[1]))))
            if self._symbols.intersection(symbols):
                event = ShapeEvent("guard", symbols, str(args[1]), *_locations())
                where = event.origin or event.location
                stop = None if self.stop is None or self.stopped is not None else \
                    self.stop.dooms(str(args[0]), event.text, symbols, f" ({where})" if where else "")
                if stop is not None:
                    self.stopped, self._stopping = stop, True
                return event
        if message.startswith("set_replacement") and len(args) >= 2 and str(args[0]) in self._symbols:
            return ShapeEvent("replacement", (str(args[0]),), str(args[1]), *_locations())
        return None

    def log_lines(self) -> tuple[str, ...]:
        extra = (f"... {self.dropped} more log lines",) if self.dropped else ()
        return tuple(self.lines) + extra

    def add_warning(self, text: str) -> None:
        """A Python warning torch raised during the attempt."""
        self._add(f"warning {(text.strip().splitlines() or [''])[0][:300]}")

    def _add(self, line: str) -> None:
        if len(self.lines) < MAX_LINES:
            self.lines.append(line)
        else:
            self.dropped += 1

    def add_stderr(self, text: str) -> None:
        """What torch printed straight to stderr (``export/_trace.py`` prints a partial graph on failure)."""
        for line in text.splitlines():
            if line.strip():
                self._add(f"stderr: {line.rstrip()[:300]}")


@functools.lru_cache(maxsize=4096)
def _is_user(path: str) -> bool:
    return is_user_file(path)


@functools.lru_cache(maxsize=4096)
def _is_model_code(path: str) -> bool:
    """Code that defines a model: the user's, or a model library's (transformers, timm), not torch's or ours."""
    if _is_user(path):
        return True
    if not path or path.startswith("<"):
        return False
    absolute = os.path.abspath(path)
    roots = (os.path.dirname(os.path.abspath(torch.__file__)), os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), os.path.dirname(os.path.abspath(os.__file__)))
    return not any(absolute.startswith(root + os.sep) for root in roots) and "site-packages" in absolute


def _frames() -> list[tuple[str, int, str]]:
    """(file, line, function), innermost first: TorchDynamo's traced stack in strict mode, else the live one."""
    try:
        from torch._guards import TracingContext

        traced = [(f.filename, f.lineno or 0, f.name) for f in reversed(list(TracingContext.extract_stack()))]
    except Exception:  # noqa: BLE001
        traced = []
    if traced:
        return traced
    frames, frame = [], sys._getframe(2)
    while frame is not None:
        frames.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return frames


def _locations() -> tuple[Location | None, Location | None]:
    """(the innermost user frame, the innermost model-code frame when it is a library's).

    A model built and exported by library code alone (a torchvision model in the zoo job: no user
    frame on the stack) is located at the library's line: it is the model's own code, and without
    it the message could only say "the model's code".
    """
    user = origin = None
    for path, line, function in _frames():
        if origin is None and _is_model_code(path):
            origin = _location(path, line, function)
        if _is_user(path):
            user = _location(path, line, function)
            break
    if user is None:
        return origin, None
    return user, (origin if origin != user else None)


def _location(path: str, line: int, function: str) -> Location:
    return Location(path, line, function, linecache.getline(path, line).strip() or None)


@contextmanager
def recording(watched: frozenset[str] = frozenset(), *, echo: bool = False,
              stop: Watch | None = None) -> Iterator[TorchLog]:
    """Route every torch logger's output, and what torch prints on stderr, to one :class:`TorchLog`.

    ``watched``: torch's source names of the dims asked dynamic; only their ShapeEnv decisions are
    kept, and the ShapeEnv's INFO logging is switched on only when there are some. ``echo`` (the
    user asked for torch's logs: ``verbose=True``, ``TORCH_LOGS``): torch's handlers and stderr print
    as usual as well. ``stop``: stop the attempt at a guard that dooms it (``_early_stop``).
    """
    recorder = TorchLog(watched, stop)
    everyone = [logging.getLogger("torch")] + [
        logger for name, logger in list(logging.root.manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and name.startswith("torch.") and not name.startswith("torch.__trace")]
    loggers = [logger for logger in everyone if logger.handlers or logger.name == "torch"]
    saved = [(logger, list(logger.handlers)) for logger in loggers]
    shapes = logging.getLogger(SHAPES_LOGGER)
    shapes_level, shapes_propagate = shapes.level, shapes.propagate
    printed = io.StringIO()
    enabled: list[tuple[logging.Logger, bool]] = []
    try:
        for logger, handlers in saved:
            logger.handlers = handlers + [recorder] if echo else [recorder]
        if shapes not in loggers:
            shapes.propagate = False
            shapes.handlers = [recorder]
            saved.append((shapes, []))
        if watched and shapes.getEffectiveLevel() > logging.INFO:
            shapes.setLevel(logging.INFO)
        enabled = [(logger, logger.disabled) for logger in dict.fromkeys(everyone + [shapes])]
        for logger, _ in enabled:
            logger.disabled = False
            # NOTE: the level each logger had as the attempt started, as a C-level comparison: torch asks
            # isEnabledFor for every debug line of the trace (16,000 times for a ResNet-50, 0.016 s through
            # a Python function walking the logger's parents each time).
            logger.isEnabledFor = functools.partial(  # type: ignore[method-assign]
                operator.le, logger.getEffectiveLevel())   # le(effective, level): level >= effective
        with nullcontext() if echo else redirect_stderr(printed):
            yield recorder
    finally:
        recorder.add_stderr(printed.getvalue())
        shapes.setLevel(shapes_level)
        shapes.propagate = shapes_propagate
        for logger, disabled in enabled:
            logger.disabled = disabled
            logger.__dict__.pop("isEnabledFor", None)
        for logger, handlers in saved:
            logger.handlers = handlers
