"""Why torch.export refused a model, where its exception type alone does not say: read from its fields and frames.

- A guard on a data-dependent value (``GuardOnDataDependentSymNode``) whose expression is the value itself
  (``u0``), or a condition on it (``Eq(0, u0)``) at a user line that does not branch: torch needed the
  integer (a size, an index, a slice bound) for an op, not a branch's direction (CAP018, not CAP002).
- A plain ``RuntimeError`` from one of torch's kernels (``_refs.where``, ``meta_index_Tensor``) whose mask
  argument is uint8 (CAP019): eager PyTorch accepts it, torch.export's fake kernels do not.
- A plain ``RuntimeError`` whose innermost frame holds an output of a dict/list/tuple subclass pytree
  does not know (CAP020): torch.export flattens outputs by registered structure.

torch's message text is never matched: the guard's expression and the frames' local values are the
structured facts (and the user's own line, read as Python tokens).
"""

from __future__ import annotations

import io
import os
import tokenize
import traceback
from types import FrameType
from typing import Any, Iterator

import torch
import torch.utils._pytree as pytree

from onnxsight.diagnostics import Location, is_user_file, traceback_frames

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
# The kernels' parameter names for a mask: _refs.where's ``pred``, meta_index_Tensor's ``indices``...
_CONDITIONS = ("pred", "condition")
_INDICES = ("indices", "mask")


def needs_integer(error: BaseException) -> bool:
    """Whether a data-dependent guard asked for a value, not for a branch's direction (CAP018, not CAP002).

    A guard on the value itself (``u0``) is always that. A condition on it (``Eq(0, u0)``) is a branch
    when the user's line branches (``if``, ``while``, ``assert``, a conditional expression, ``and``/``or``/
    ``not``), and a torch op's own check on a size otherwise (``torch.arange(end, out=out)`` resizing ``out``).
    """
    cond = getattr(error, "cond", None)
    if cond is None:
        return False
    if not getattr(cond, "is_Relational", False) and not getattr(cond, "is_Boolean", False):
        return True
    line = caller(error)
    return line is not None and line.code is not None and _branches(line.code) is False


def caller(error: BaseException) -> Location | None:
    """The innermost line of Python that is not torch's machinery (its ops, tracing, symbolic shapes):
    the user's line, or a library's (``torch.distributions`` validating its arguments) that the user called."""
    for frame in reversed(traceback_frames(error)):
        if not _machinery(frame.file):
            return frame
    return None


def library_origin(exc: BaseException) -> Location | None:
    """The library's line that guarded on data for the user's line (torch.distributions validating its
    arguments), shown before the user's (``audit.cause``); None when the guard's line is the user's."""
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    guard = next((error for error in chain(exc) if isinstance(error, GuardOnDataDependentSymNode)), None)
    line = caller(guard) if guard is not None else None
    return line if line is not None and not is_user_file(line.file) else None


def chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, outermost first, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _machinery(path: str) -> bool:
    if not path.startswith(_TORCH_DIR):
        return False
    top = path[len(_TORCH_DIR):].split(os.sep, 1)[0]
    return top.startswith("_") or top in _MACHINERY


_MACHINERY = {"fx", "utils", "export", "overrides.py", "functional.py"}


_BRANCHING = {"if", "elif", "while", "assert", "and", "or", "not"}


def _branches(line: str) -> bool | None:
    """Whether a line of the user's source branches; None when it does not tokenize on its own."""
    try:
        words = {t.string for t in tokenize.generate_tokens(io.StringIO(line).readline) if t.type == tokenize.NAME}
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return bool(words & _BRANCHING)


def _torch_frames(error: BaseException) -> Iterator[FrameType]:
    """The frames of torch's own code in ``error``'s traceback, innermost first."""
    frames = [frame for frame, _ in traceback.walk_tb(error.__traceback__)]
    return (f for f in reversed(frames) if f.f_code.co_filename.startswith(_TORCH_DIR))


def uint8_mask(error: BaseException) -> str | None:
    """`` (torch.where's condition)`` or `` (an index)`` where a torch kernel refused a uint8 mask; else None."""
    if type(error) is not RuntimeError:
        return None
    for frame in _torch_frames(error):
        for names, what in ((_CONDITIONS, " (torch.where's condition)"), (_INDICES, " (an index)")):
            for name in names:
                value = frame.f_locals.get(name)
                values = value if isinstance(value, (list, tuple)) else (value,)
                if any(isinstance(v, torch.Tensor) and v.dtype == torch.uint8 for v in values):
                    return what
    return None


def unflattenable_output(error: BaseException) -> str | None:
    """``<qualname> (a <base> subclass)`` of the unregistered container torch.export stopped at; else None."""
    if type(error) is not RuntimeError:
        return None
    innermost = next(_torch_frames(error), None)
    if innermost is None:
        return None
    for value in innermost.f_locals.values():
        kind = _unregistered_container(value)
        if kind is not None:
            return kind
    return None


def _unregistered_container(value: Any) -> str | None:
    cls = type(value)
    if cls in (dict, list, tuple) or cls in pytree.SUPPORTED_NODES or hasattr(value, "_fields"):
        return None   # a namedtuple flattens as one
    for base in (dict, list, tuple):
        if isinstance(value, base):
            return f"`{cls.__module__}.{cls.__qualname__}` (a {base.__name__} subclass)"
    return None
