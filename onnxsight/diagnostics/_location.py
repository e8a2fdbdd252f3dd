"""Source locations: turning FX stack traces and Python frames into user code lines.

The primary location of a diagnostic is the first frame that is the user's
own code, i.e. not inside torch, onnxsight or the Python standard library.
"""

from __future__ import annotations

import contextvars
import functools
import linecache
import os
import re
import sys
import sysconfig
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Iterator

_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?\s*$')


@dataclass(frozen=True)
class Location:
    """A place in a source file; ``line`` is 1-based."""

    file: str
    line: int | None = None
    function: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file

    def snippet(self, context: int = 2) -> list[tuple[int, str]]:
        """Lines around ``line`` as (number, text) pairs; empty if the file is unreadable."""
        if not self.line:
            return []
        start = max(1, self.line - context)
        out = []
        for number in range(start, self.line + context + 1):
            text = linecache.getline(self.file, number)
            if not text and number > self.line:
                break
            out.append((number, text.rstrip("\n")))
        return out if any(t for _, t in out) else []


# The libraries whose files are never the user's code, where they are imported.
_LIBRARIES = ("torch", "torchvision", "transformers", "timm", "onnx", "onnxruntime", "pytest", "_pytest", "pluggy")


def _library_roots() -> tuple[str, ...]:
    return _roots(tuple(name for name in _LIBRARIES if getattr(sys.modules.get(name), "__file__", None)))


# NOTE: cached by the libraries imported so far: ``sysconfig.get_paths()`` expands its install scheme anew on every
# call (about 0.4 ms), and the translate stage asks for every node's source line, a third of a 16-block CNN's
# translation.
@functools.lru_cache(maxsize=16)
def _roots(libraries: tuple[str, ...]) -> tuple[str, ...]:
    roots = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # onnxsight/
    # "scripts": the console-script launchers (.venv/bin/onnxsight), which are nobody's source code.
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "scripts"):
        path = paths.get(key)
        if path:
            roots.add(os.path.abspath(path))
    for name in libraries:
        roots.add(os.path.dirname(os.path.abspath(sys.modules[name].__file__)))
    return tuple(sorted(roots))


# Model definitions that ship inside onnxsight (the demo's models, the zoo's suites) are the
# "user code" of the reports about them: their lines are where a problem is to be shown.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODEL_DEFINITIONS = (os.path.join(_PACKAGE, "demo.py"), os.path.join(_PACKAGE, "zoo", "suites") + os.sep)


def is_user_file(path: str) -> bool:
    """True for files that are neither onnxsight, torch, other ML libraries nor the stdlib."""
    if not path or path.startswith("<"):
        return False
    return _is_user_path(path if os.path.isabs(path) else os.path.abspath(path), _library_roots())


@functools.lru_cache(maxsize=4096)
def _is_user_path(path: str, roots: tuple[str, ...]) -> bool:
    absolute = os.path.abspath(path)
    if absolute.startswith(_MODEL_DEFINITIONS):
        return True
    return not any(absolute == root or absolute.startswith(root + os.sep) for root in roots)


def parse_stack_trace(text: str | None) -> tuple[Location, ...]:
    """Parse a Python traceback-style string (FX ``stack_trace`` meta) into frames, outermost first.

    Lines that are not frames are ignored, so an unexpected format yields fewer
    frames rather than an exception.
    """
    if isinstance(text, (list, tuple)):
        text = "\n".join(str(part) for part in text)
    if not text or not isinstance(text, str):
        return ()
    return _parsed(text)


# The nodes of one source line share its stack trace: parsed once (the translate stage asks for each node's).
@functools.lru_cache(maxsize=1024)
def _parsed(text: str) -> tuple[Location, ...]:
    frames: list[Location] = []
    lines = text.splitlines()
    for index, raw in enumerate(lines):
        match = _FRAME_RE.match(raw)
        if not match:
            continue
        code = None
        if index + 1 < len(lines) and not _FRAME_RE.match(lines[index + 1]):
            code = lines[index + 1].strip() or None
        frames.append(Location(file=match["file"], line=int(match["line"]),
                               function=(match["func"] or "").strip() or None, code=code))
    return tuple(frames)


def user_frame(frames: tuple[Location, ...]) -> Location | None:
    """The innermost frame that is user code (the line that did the thing)."""
    for frame in reversed(frames):
        if is_user_file(frame.file):
            return frame
    return None


_ENTRY: contextvars.ContextVar[Location | None] = contextvars.ContextVar("onnxsight_entry", default=None)


@contextmanager
def user_entry_point(location: Location | None) -> Iterator[None]:
    """Within this block, ``caller_location`` falls back to ``location`` when no user frame is on the stack.

    The command line calls the library from its own frames only; the user's file is
    the model file named on the command line, so that is where diagnostics without
    a source line of their own are shown (never the ``.venv/bin/onnxsight`` launcher).
    """
    token = _ENTRY.set(location)
    try:
        yield
    finally:
        _ENTRY.reset(token)


def caller_location(frame: FrameType | None = None) -> Location | None:
    """The innermost user frame of the current Python stack (the call site of onnxsight.export).

    Without one (the command line), the entry point set by ``user_entry_point``, if any.
    """
    frame = frame or sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if is_user_file(path):
            return Location(file=path, line=frame.f_lineno, function=frame.f_code.co_name,
                            code=(linecache.getline(path, frame.f_lineno).strip() or None))
        frame = frame.f_back
    return _ENTRY.get()


def traceback_frames(exc: BaseException) -> tuple[Location, ...]:
    """The frames of an exception's traceback, outermost first."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append(Location(file=code.co_filename, line=tb.tb_lineno, function=code.co_name,
                               code=(linecache.getline(code.co_filename, tb.tb_lineno).strip() or None)))
        tb = tb.tb_next
    return tuple(frames)
