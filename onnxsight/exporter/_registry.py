"""The translation registry: an explicit object mapping ATen overloads to translations.

Nothing registers itself on import. Op modules mark functions with
``@translation(...)``; :func:`default_registry` builds a Registry from the
explicit list of op modules, and ``custom_translations`` are added to a copy.
Opset variants of an op are sibling functions with ``since``/``until``.
"""

from __future__ import annotations

import functools
import importlib
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

OP_MODULES: tuple[str, ...] = (
    "onnxsight.exporter.ops.elementwise",
    "onnxsight.exporter.ops.elementwise_math",
    "onnxsight.exporter.ops.elementwise_logic",
    "onnxsight.exporter.ops.reduction",
    "onnxsight.exporter.ops.reduction_stats",
    "onnxsight.exporter.ops.reduction_scan",
    "onnxsight.exporter.ops.shape",
    "onnxsight.exporter.ops.indexing",
    "onnxsight.exporter.ops.creation",
    "onnxsight.exporter.ops.nn",
    "onnxsight.exporter.ops.activation",
    "onnxsight.exporter.ops.pooling",
    "onnxsight.exporter.ops.resize",
    "onnxsight.exporter.ops.norm",
    "onnxsight.exporter.ops.attention",
    "onnxsight.exporter.ops.linalg",
    "onnxsight.exporter.ops.control_flow",
    "onnxsight.exporter.ops.symbolic",
    "onnxsight.exporter.ops.misc",
    "onnxsight.exporter.ops.composite",
    "onnxsight.exporter.ops.spectral",
    "onnxsight.exporter.ops.complex_values",
    "onnxsight.exporter.ops.float4",
    "onnxsight.exporter.ops.sampling",
    "onnxsight.exporter.ops.distance",
    "onnxsight.exporter.ops.embedding_bag",
    "onnxsight.exporter.ops.embedding_renorm",
    "onnxsight.exporter.ops.fold",
    "onnxsight.exporter.ops.rnn",
    "onnxsight.exporter.ops.vision",
    "onnxsight.exporter.ops.moe",
    "onnxsight.exporter.ops.quantize",
    "onnxsight.exporter.ops.quantize_affine",
    "onnxsight.exporter.ops.fake_quantize",
)

_ATTR = "__onnxsight_translations__"


def target_key(target: Any) -> str:
    """Canonical string for an op: ``aten::add.Tensor``, ``mylib::foo.default``, ``higher_order::cond``."""
    if isinstance(target, str):
        text = target.strip()
        if "::" not in text and text.count(".") >= 1 and not text.startswith("_operator"):
            ns, _, rest = text.partition(".")
            text = f"{ns}::{rest}"
        if "::" in text and "." not in text.split("::", 1)[1]:
            text += ".default"
        return text
    name = getattr(target, "name", None)
    if callable(name) and hasattr(target, "_schema"):  # OpOverload
        op_name = target.name()
        return op_name if "." in op_name.split("::", 1)[1] else f"{op_name}.default"
    if hasattr(target, "_qualified_op_name") and hasattr(target, "default"):  # OpOverloadPacket
        return f"{target._qualified_op_name}.default"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order::{target._name}"
    module = getattr(target, "__module__", None) or "builtins"
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)
    return f"{module}.{qualname}"


class UnsupportedVariant(Exception):
    """Raised by a translation for an argument value it does not translate (reported as OPS006).

    ``argument`` is the ATen schema's argument name, ``got`` the value passed and
    ``supported`` the variants that are translated, in words
    (``UnsupportedVariant("mode", "'bicubic'", "'bilinear', 'nearest'")``). A real
    crash in a translation stays any other exception (OPS004).
    """

    def __init__(self, argument: str, got: Any, supported: str) -> None:
        super().__init__(f"{argument}={got} is not translated; supported: {supported}")
        self.argument = argument
        self.got = got if isinstance(got, str) else repr(got)
        self.supported = supported


@dataclass(frozen=True)
class Translation:
    """One registered translation: ``fn(builder, *args, **kwargs)`` valid for opsets [since, until]."""

    key: str
    fn: Callable[..., Any]
    since: int = 1
    until: int | None = None
    custom: bool = False
    complex: bool = False   # the variant for complex inputs (carried as real pairs, see _builder.Value)

    def supports(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


def translation(*targets: Any, since: int = 1, until: int | None = None,
                complex: bool = False) -> Callable[[Callable], Callable]:
    """Mark ``fn`` as the translation of ``targets`` (ATen overloads or ``"ns::op.overload"`` strings).

    ``complex=True`` marks the sibling used when an input is complex. Only marks
    the function; a Registry collects it when built.
    """
    def mark(fn: Callable) -> Callable:
        specs = list(getattr(fn, _ATTR, ()))
        specs.extend((t, since, until, complex) for t in targets)
        setattr(fn, _ATTR, tuple(specs))
        return fn
    return mark


class Registry:
    """Maps op keys to translations; look-ups pick the variant for the target opset."""

    def __init__(self) -> None:
        self._table: dict[str, list[Translation]] = {}

    def register(self, target: Any, fn: Callable[..., Any], *, since: int = 1, until: int | None = None,
                 custom: bool = False, complex: bool = False) -> None:
        key = target_key(target)
        # A user's translation replaces ours for every opset.
        entries = [] if custom else list(self._table.get(key, []))
        for existing in entries:
            if existing.complex != complex:
                continue
            if existing.supports(since) or Translation(key, fn, since, until).supports(existing.since):
                raise ValueError(f"{key}: {fn.__qualname__} overlaps {existing.fn.__qualname__} for opsets "
                                 f"{since}..{until or 'latest'}")
        entries.append(Translation(key, fn, since, until, custom, complex))
        self._table[key] = sorted(entries, key=lambda t: t.since)

    def add_module(self, module: types.ModuleType) -> None:
        """Register every function of ``module`` marked with ``@translation``."""
        for value in vars(module).values():
            for target, since, until, complex in getattr(value, _ATTR, ()) if callable(value) else ():
                if getattr(value, "__module__", None) == module.__name__:
                    self.register(target, value, since=since, until=until, complex=complex)

    def lookup(self, target: Any, opset: int, *, complex: bool | None = False) -> Translation | None:
        """The variant for ``opset``: for complex inputs when ``complex``, any variant when None."""
        for entry in reversed(self._table.get(target_key(target), [])):
            if entry.supports(opset) and (complex is None or entry.complex == complex):
                return entry
        return None

    def min_opset(self, target: Any) -> int | None:
        """Lowest opset any variant supports (to tell 'needs a newer opset' from 'unsupported')."""
        entries = self._table.get(target_key(target), [])
        return min((e.since for e in entries), default=None)

    def __contains__(self, target: Any) -> bool:
        return target_key(target) in self._table

    def keys(self) -> Iterable[str]:
        return self._table.keys()

    def copy(self) -> Registry:
        clone = Registry()
        clone._table = {k: list(v) for k, v in self._table.items()}
        return clone


def default_registry(modules: Iterable[str] = OP_MODULES) -> Registry:
    """A new Registry with onnxsight's own translations (a copy: the caller may register its own).

    NOTE: the table is built once per set of op modules (1,500 registrations walked from 99 modules' attributes,
    a few milliseconds of every export) and copied for each caller."""
    return _built(tuple(modules)).copy()


@functools.lru_cache(maxsize=None)
def _built(modules: tuple[str, ...]) -> Registry:
    registry = Registry()
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # op family not written yet
                continue
            raise
        registry.add_module(module)
    return registry
