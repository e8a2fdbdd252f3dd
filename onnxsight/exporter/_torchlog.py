"""torch's logging during one capture attempt: kept for the report, never printed, and mined for lines.

A failed strict capture makes torch print dozens of ``E... torch/_guards.py``
lines on stderr. While an attempt runs, every handler of torch's loggers is
replaced by one recorder: records at WARNING and above become the attempt's
``log`` lines (the report shows them), and the ShapeEnv's INFO records
(``create_symbol``, ``[guard added]``, ``set_replacement``) become
:class:`ShapeEvent` values carrying the user's source line, which torch's own
errors do not carry in non-strict mode.
"""

from __future__ import annotations

import io
import logging
import re
import sys
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass
from typing import Iterator

from onnxsight.diagnostics import Location, is_user_file

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


class TorchLog(logging.Handler):
    """Records torch's log lines and the ShapeEnv's decisions of one attempt."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.events: list[ShapeEvent] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if record.name == SHAPES_LOGGER and record.levelno < logging.WARNING:
                event = _event(record)
                if event is not None:
                    self.events.append(event)
                return
            if record.levelno >= logging.WARNING:
                if len(self.lines) < MAX_LINES:
                    first = record.getMessage().strip().splitlines() or [""]
                    self.lines.append(f"{record.levelname} {record.name}: {first[0][:300]}")
                else:
                    self.dropped += 1
        except Exception:  # noqa: BLE001 - a log record must never break the export
            return

    def source_symbols(self) -> dict[str, str]:
        """torch's source name (``L['x'].size()[0]``) -> the symbol created for it."""
        return {e.text: e.symbols[0] for e in self.events if e.kind == "symbol" and e.symbols}

    def where(self, symbol: str, *, specialised: bool = False) -> Location | None:
        """The user's line that specialised (or else first constrained) ``symbol``."""
        if specialised:
            for event in self.events:
                if event.kind == "replacement" and event.symbols[:1] == (symbol,) and event.location:
                    return event.location
        for event in self.events:
            if event.kind == "guard" and symbol in event.symbols and event.location:
                return event.location
        return None

    def log_lines(self) -> tuple[str, ...]:
        extra = (f"... {self.dropped} more log lines",) if self.dropped else ()
        return tuple(self.lines) + extra

    def add_stderr(self, text: str) -> None:
        """What torch printed straight to stderr (``export/_trace.py`` prints a partial graph on failure)."""
        for line in text.splitlines():
            if line.strip():
                if len(self.lines) < MAX_LINES:
                    self.lines.append(f"stderr: {line.rstrip()[:300]}")
                else:
                    self.dropped += 1


def _event(record: logging.LogRecord) -> ShapeEvent | None:
    message, args = str(record.msg), record.args if isinstance(record.args, tuple) else ()
    if "create_symbol" in message and len(args) >= 3:
        return ShapeEvent("symbol", (str(args[0]),), str(args[2]), None)
    if "[guard added]" in message and len(args) >= 2:
        expr = str(args[1])
        return ShapeEvent("guard", tuple(dict.fromkeys(_SYMBOL.findall(expr))), expr, _user_location())
    if message.startswith("set_replacement") and len(args) >= 2:
        return ShapeEvent("replacement", (str(args[0]),), str(args[1]), _user_location())
    return None


def _user_location() -> Location | None:
    """The innermost user frame: TorchDynamo's traced stack in strict mode, the live stack otherwise."""
    try:
        from torch._guards import TracingContext

        traced = TracingContext.extract_stack()
    except Exception:  # noqa: BLE001
        traced = ()
    for summary in reversed(list(traced)):
        if is_user_file(summary.filename):
            return Location(summary.filename, summary.lineno, summary.name, (summary.line or "").strip() or None)
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if is_user_file(path):
            import linecache

            code = linecache.getline(path, frame.f_lineno).strip() or None
            return Location(path, frame.f_lineno, frame.f_code.co_name, code)
        frame = frame.f_back
    return None


@contextmanager
def recording() -> Iterator[TorchLog]:
    """Route every torch logger's output, and what torch prints on stderr, to one :class:`TorchLog`."""
    recorder = TorchLog()
    loggers = [logging.getLogger("torch")] + [
        logger for name, logger in list(logging.root.manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and name.startswith("torch.") and logger.handlers
        and not name.startswith("torch.__trace")]
    saved = [(logger, list(logger.handlers)) for logger in loggers]
    shapes = logging.getLogger(SHAPES_LOGGER)
    shapes_level, shapes_propagate = shapes.level, shapes.propagate
    printed = io.StringIO()
    try:
        for logger, _ in saved:
            logger.handlers = [recorder]
        if shapes not in loggers:
            shapes.propagate = False
            shapes.handlers = [recorder]
            saved.append((shapes, []))
        if shapes.getEffectiveLevel() > logging.INFO:
            shapes.setLevel(logging.INFO)
        with redirect_stderr(printed):
            yield recorder
    finally:
        recorder.add_stderr(printed.getvalue())
        shapes.setLevel(shapes_level)
        shapes.propagate = shapes_propagate
        for logger, handlers in saved:
            logger.handlers = handlers
