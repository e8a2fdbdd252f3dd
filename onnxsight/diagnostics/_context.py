"""DiagnosticContext: collects diagnostics during one export or verification."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterable, Iterator, Mapping

from onnxsight.diagnostics._diagnostic import Diagnostic
from onnxsight.diagnostics._location import Location, parse_stack_trace, user_frame
from onnxsight.rules import Level, Rule

logger = logging.getLogger("onnxsight")

_LOG_LEVELS = {Level.ERROR: logging.ERROR, Level.WARNING: logging.WARNING, Level.NOTE: logging.INFO}


def module_path(node: Any) -> str | None:
    """The ``nn_module_stack`` of an FX node as a dotted path (``encoder.layer.0.attn``)."""
    meta = getattr(node, "meta", None)
    stack = meta.get("nn_module_stack") if isinstance(meta, Mapping) else None
    if not stack or not isinstance(stack, Mapping):
        return None
    paths = [str(value[0]) if isinstance(value, tuple) and value else str(value) for value in stack.values()]
    paths = [p for p in paths if p]
    return paths[-1] if paths else None


def node_location(node: Any) -> tuple[Location | None, tuple[Location, ...]]:
    """(user frame, full stack) of an FX node, from its ``stack_trace`` meta (never raises)."""
    meta = getattr(node, "meta", None)
    stack = parse_stack_trace(meta.get("stack_trace") if isinstance(meta, Mapping) else None)
    return user_frame(stack), stack


def as_location(value: Any) -> Location | None:
    """A Location from a Location, a path (str/PathLike) or None; anything else is dropped."""
    if value is None or isinstance(value, Location):
        return value
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        return Location(file=path) if isinstance(path, str) and path else None
    return None


def repeats(diagnostics: Iterable[Diagnostic]) -> list[tuple[Diagnostic, int]]:
    """Each distinct diagnostic (same rule, level, message and line) once, in first-seen order, with its count.

    The same finding made at one line for every layer of a model reads once on a console, with the count.
    """
    counts: dict[tuple[Any, ...], list[Any]] = {}
    for diagnostic in diagnostics:
        where = diagnostic.location
        key = (diagnostic.rule.code, diagnostic.level, diagnostic.message,
               (where.file, where.line) if where is not None else None)
        counts.setdefault(key, [diagnostic, 0])[1] += 1
    return [(diagnostic, count) for diagnostic, count in counts.values()]


def torch_logs_requested() -> bool:
    """The user asked for torch's own logs (``TORCH_LOGS``): shown as torch prints them."""
    return bool(os.environ.get("TORCH_LOGS", "").strip())


class DiagnosticContext:
    """Collects diagnostics; applies the minimum level and warnings-as-errors options.

    ``verbose``: show torch's own log output on the console while the stages run (None: only when
    ``TORCH_LOGS`` is set); otherwise the stages keep it for the run record.
    """

    def __init__(self, *, min_level: Level = Level.NOTE, warnings_as_errors: bool = False,
                 fallback_location: Location | None = None, verbose: bool | None = None) -> None:
        self.min_level = Level(min_level)
        self.warnings_as_errors = warnings_as_errors
        self.fallback_location = fallback_location
        self.verbose = torch_logs_requested() if verbose is None else bool(verbose)
        self._diagnostics: list[Diagnostic] = []
        self._held: list[Diagnostic] | None = None

    @contextlib.contextmanager
    def logging_once(self) -> Iterator[None]:
        """Log the diagnostics found in the block when it ends, each distinct one once with its count."""
        outer, self._held = self._held, []
        try:
            yield
        finally:
            held, self._held = self._held, outer
            if outer is not None:  # an enclosing block logs them
                outer.extend(held)
            else:
                for diagnostic, count in repeats(held):
                    _log(diagnostic, count)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return list(self._diagnostics)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self._diagnostics if d.level is Level.ERROR]

    def extend(self, diagnostics: Iterable[Diagnostic]) -> None:
        for diagnostic in diagnostics:
            self._add(diagnostic)

    def emit(self, rule: Rule, *, node: Any = None, location: Location | None = None,
             stack: tuple[Location, ...] = (), related: tuple[Location, ...] = (),
             module: str | None = None, level: Level | None = None,
             properties: Mapping[str, Any] | None = None, **fields: Any) -> Diagnostic | None:
        """Record a diagnostic of ``rule`` with the template ``fields``.

        With ``node`` (an FX node), location, stack, module path and the
        fx_node/target properties are taken from its meta.
        """
        props = dict(properties or {})
        if node is not None:
            node_loc, node_stack = node_location(node)
            location = location or node_loc
            stack = stack or node_stack
            module = module or module_path(node)
            props.setdefault("fx_node", getattr(node, "name", None))
            props.setdefault("target", str(getattr(node, "target", "")))
        diagnostic = Diagnostic(
            rule=rule, level=Level(level or rule.level), message=rule.format(**fields), fields=fields,
            location=as_location(location) or self.fallback_location,
            related=tuple(loc for loc in map(as_location, related) if loc is not None),
            stack=tuple(loc for loc in map(as_location, stack) if loc is not None),
            module_path=module, properties={k: v for k, v in props.items() if v is not None})
        return self._add(diagnostic)

    def _add(self, diagnostic: Diagnostic) -> Diagnostic | None:
        if self.warnings_as_errors and diagnostic.level is Level.WARNING:
            diagnostic = Diagnostic(**{**diagnostic.__dict__, "level": Level.ERROR})
        if diagnostic.level.rank < self.min_level.rank:
            return None
        self._diagnostics.append(diagnostic)
        if self._held is not None:
            self._held.append(diagnostic)
        else:
            _log(diagnostic, 1)
        return diagnostic


def _log(diagnostic: Diagnostic, count: int) -> None:
    if count > 1:
        logger.log(_LOG_LEVELS[diagnostic.level], "%s (%d times)", diagnostic, count)
    else:
        logger.log(_LOG_LEVELS[diagnostic.level], "%s", diagnostic)
