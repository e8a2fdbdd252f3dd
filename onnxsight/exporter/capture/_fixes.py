"""The dims a user asked dynamic, torch.export's suggested fixes, and the ``dynamic_shapes`` code to write.

torch.export's ConstraintViolation error ends with a "Suggested fixes:" block:
``seq = Dim('seq', max=32)`` narrows a range, ``seq = 8*_seq - 3`` (with a new
root ``_seq``) or ``b = a`` adds a relation, ``batch = 4`` makes a dim a
constant. onnxsight applies the first two kinds and never the third when the
dim was asked dynamic (see ``_capture``).

torch.export suggests nothing for a guard that is not a range (``(w // 4) != 1``: an
intermediate size that must not be 1, which a pyramid of poolings or a broadcast meets at
small inputs); :func:`derive_range_fixes` finds the range around the example where such
guards hold, for torch.export to verify on the next attempt.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping

import torch
from torch.utils import _pytree as pytree

from onnxsight.exporter.inputs._pytree_libs import active_containers

_FIX = re.compile(r"^\s*(?P<name>[^=\s][^=]*?)\s*=\s*(?P<rhs>.+?)\s*$")


@dataclass(frozen=True)
class RequestedDim:
    """One axis of one input leaf that ``dynamic_shapes`` marks dynamic."""

    path: str            # forward()'s argument and the path inside it: ``x``, ``inputs['a']``
    axis: int
    name: str | None     # the torch.export Dim's name; None for ``Dim.DYNAMIC``
    size: int            # the example's size along ``axis``
    source: str          # torch's name for it: ``L['inputs']['a'].size()[0]``
    shape: tuple[int, ...] = ()  # the example leaf's shape
    flat_source: str = ""        # torch's name in strict mode: ``L['flat_args'][3].size()[0]``
    leaf: int = field(default=0, compare=False, repr=False)   # id() of the example tensor

    @property
    def sources(self) -> tuple[str, ...]:
        return (self.source, self.flat_source) if self.flat_source else (self.source,)

    @property
    def label(self) -> str:
        """How torch's messages name the dim: the Dim's name, else its source."""
        return self.name or self.source

    def describe(self) -> str:
        return f"input `{self.path}` axis {self.axis} ({self.name or 'Dim.DYNAMIC'})"


@dataclass(frozen=True)
class Fix:
    """One line of torch.export's "Suggested fixes" block."""

    name: str
    kind: str           # "static" | "range" | "root" | "relation"
    text: str           # the line as torch wrote it
    value: int | None = None
    guards: tuple[str, ...] = ()   # derived by onnxsight from these guards (torch.export suggested none)


def bound_arguments(model: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return dict(inspect.signature(model.forward).bind(*args, **kwargs).arguments)


def requested_dims(model: torch.nn.Module, args: tuple, kwargs: Mapping[str, Any],
                   dynamic_shapes: Any) -> list[RequestedDim]:
    """Every axis ``dynamic_shapes`` asks dynamic (named Dims, derived Dims, ``Dim.DYNAMIC``)."""
    if dynamic_shapes is None:
        return []
    try:
        bound = bound_arguments(model, args, kwargs)
    except TypeError:
        return []
    spec = dict(zip(bound, dynamic_shapes)) if isinstance(dynamic_shapes, (tuple, list)) else dynamic_shapes
    if not isinstance(spec, Mapping):
        return []
    found: list[RequestedDim] = []
    for arg, value in bound.items():
        if arg in spec:
            found.extend(_walk(spec[arg], value, arg, f"L[{arg!r}]"))
    # Strict capture names inputs by their index among the flattened (args, kwargs).
    flat = {id(leaf): index for index, leaf in enumerate(pytree.tree_leaves((tuple(args), dict(kwargs))))}
    return [replace(dim, flat_source=f"L['flat_args'][{flat[dim.leaf]}].size()[{dim.axis}]")
            if dim.leaf in flat else dim for dim in found]


def _walk(spec: Any, value: Any, path: str, source: str) -> Iterator[RequestedDim]:
    if isinstance(value, torch.Tensor):
        items = spec.items() if isinstance(spec, Mapping) else enumerate(spec) if isinstance(spec, (list, tuple)) \
            else ()
        for axis, dim in items:
            if isinstance(axis, int) and 0 <= axis < value.dim() and _asks_dynamic(dim):
                name = getattr(dim, "__name__", None)
                yield RequestedDim(path, axis, name if isinstance(name, str) else None, int(value.shape[axis]),
                                   f"{source}.size()[{axis}]", tuple(int(n) for n in value.shape), leaf=id(value))
    elif (container := active_containers().get(type(value))) is not None and isinstance(spec, list):
        # a KV cache (its entry one spec per tensor: inputs/_cache_shapes): named as its ONNX inputs are
        leaves, context = container.flatten(value)
        prefix = dict(container.renames).get(path, path)
        for name, leaf, item in zip(container.leaf_names(context), leaves, spec):
            yield from _walk(item, leaf, f"{prefix}.{name}", f"{source}[{name!r}]")
    elif isinstance(value, Mapping) and isinstance(spec, Mapping):
        for key, item in value.items():
            if key in spec:
                yield from _walk(spec[key], item, f"{path}[{key!r}]", f"{source}[{key!r}]")
    elif isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)):
        for index, (sub, item) in enumerate(zip(spec, value)):
            yield from _walk(sub, item, f"{path}[{index}]", f"{source}[{index}]")


def _asks_dynamic(dim: Any) -> bool:
    """Named and derived Dims and ``Dim.DYNAMIC`` must stay dynamic; ``AUTO``, ``STATIC``, ints need not."""
    hint = getattr(dim, "type", None)
    if hint is not None and type(dim).__name__ == "_DimHint":
        return hint.name == "DYNAMIC"
    return isinstance(dim, torch.export.Dim) and type(dim).__name__ != "_StaticDim"


def parse_fixes(message: str, requested: set[str]) -> list[Fix]:
    """The "Suggested fixes" block of a torch.export error; [] when there is none."""
    _, found, block = message.partition("Suggested fixes:")
    if not found:
        return []
    fixes: list[Fix] = []
    for line in block.strip("\n").splitlines():
        if not line.strip():
            break
        match = _FIX.match(line)
        if match is None:
            continue
        name, rhs = match["name"], match["rhs"]
        if re.fullmatch(r"-?\d+", rhs):
            fixes.append(Fix(name, "static", line.strip(), int(rhs)))
        elif rhs.startswith("Dim("):
            low, high = re.search(r"min=(\d+)", rhs), re.search(r"max=(\d+)", rhs)
            if low and high and low[1] == high[1]:  # a "range" of one value makes the dim static
                fixes.append(Fix(name, "static", line.strip(), int(low[1])))
            else:
                fixes.append(Fix(name, "range" if name in requested else "root", line.strip()))
        else:
            fixes.append(Fix(name, "relation", line.strip()))
    return fixes


_NOT_ALL = re.compile(r"Not all values of (?P<name>\S+) = (?P<source>\S+) in the specified range "
                      r"(?:(?P<low>\d+) <= )?(?P=name)(?: <= (?P<high>\d+))? satisfy the generated guard "
                      r"(?P<guard>.+?)\.?\s*$", re.MULTILINE)
#: How far around the example :func:`derive_range_fixes` looks (torch.export checks the result).
_SCAN = 4096


def derive_range_fixes(message: str, sizes: Mapping[str, int]) -> list[Fix]:
    """Range fixes for guards torch.export suggests none for (``(w // 4) != 1``), one per dim.

    ``sizes``: the example's size of each requested dim, by label. The range is the widest run
    of sizes around the example where every guard on that dim holds, within the range the user
    gave; above the example it stays open when the guards hold up to the example x 64. Only a
    proposal: the next capture attempt has torch.export check it symbolically, so a guard that
    fails beyond the scan is still caught. A dim whose range would shrink to the example alone
    gets no fix (that would make it static: the violation stands).
    """
    guards: dict[str, list[tuple[str, str, int, int | None]]] = {}
    for match in _NOT_ALL.finditer(message):
        name = match["name"]
        if name in sizes:
            high = int(match["high"]) if match["high"] else None
            guards.setdefault(name, []).append((match["source"], match["guard"], int(match["low"] or 0), high))
    fixes = []
    for name, found in guards.items():
        bounds = _holding_range(found, sizes[name])
        if bounds is None:
            continue
        low, high = bounds
        text = f"{name} = Dim({name!r}, min={low}" + (f", max={high})" if high is not None else ")")
        readable = tuple(dict.fromkeys(guard.replace(source, name) for source, guard, _, _ in found))
        fixes.append(Fix(name, "range", text, guards=readable))
    return fixes


def _holding_range(guards: list[tuple[str, str, int, int | None]], example: int) -> tuple[int, int | None] | None:
    """(min, max or None) around ``example`` where every guard holds; None if there is no such run."""
    low_limit = max(g[2] for g in guards)
    highs = [g[3] for g in guards if g[3] is not None]
    high_limit = min(highs) if highs else None

    def holds(size: int) -> bool | None:
        try:
            return all(bool(_evaluate(guard, source, size)) for source, guard, _, _ in guards)
        except Exception:  # noqa: BLE001 - a guard we cannot read: no proposal
            return None

    if holds(example) is not True:
        return None
    low = example
    while low - 1 >= low_limit and example - low < _SCAN and holds(low - 1):
        low -= 1
    top = high_limit if high_limit is not None else max(example * 64, example + _SCAN)
    high = example
    while high + 1 <= top and high - example < _SCAN * 16 and holds(high + 1):
        high += 1
    open_above = high_limit is None and high == top
    if low == high or (low == low_limit and (open_above or high == high_limit)):
        return None  # static, or nothing narrowed: the guard is not about this range
    return low, (None if open_above else high)


def _evaluate(guard: str, source: str, size: int) -> Any:
    """``guard`` (torch's printed sympy, one symbol) at ``source = size``."""
    import math

    expression = guard.replace(source, str(size))
    names = {"Max": max, "Min": min, "Mod": lambda a, b: a % b, "FloorDiv": lambda a, b: a // b,
             "CeilToInt": math.ceil, "FloorToInt": math.floor, "Eq": lambda a, b: a == b,
             "Ne": lambda a, b: a != b, "Abs": abs}
    if re.search(r"[A-Za-z_]\w*\[|\.size\(", expression):
        raise ValueError(f"guard on more than one dim: {guard}")
    return eval(expression, {"__builtins__": {}}, names)  # noqa: S307 - torch's printed guard, names restricted


def refine(message: str, dynamic_shapes: Any) -> Any:
    """torch.export's own application of its suggested fixes to ``dynamic_shapes``."""
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    return refine_dynamic_shapes_from_suggested_fixes(message, dynamic_shapes)


def render(dynamic_shapes: Any) -> str:
    """The Python to write: ``seq = Dim("seq", max=32); dynamic_shapes = {"x": {1: seq}}``."""
    roots: dict[str, str] = {}
    body = _render(dynamic_shapes, roots)
    return "; ".join([*(f"{name} = {text}" for name, text in roots.items()), f"dynamic_shapes = {body}"])


def _render(spec: Any, roots: dict[str, str]) -> str:
    if isinstance(spec, Mapping):
        return "{" + ", ".join(f"{key!r}: {_render(value, roots)}" for key, value in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        items = [_render(value, roots) for value in spec]
        return ("[" + ", ".join(items) + "]") if isinstance(spec, list) else \
            ("(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")")
    if type(spec).__name__ == "_DimHint":
        return f"Dim.{spec.type.name}"
    if isinstance(spec, torch.export.Dim):
        root = getattr(spec, "root", None)
        _root(root if root is not None else spec, roots)
        return spec.__name__
    return repr(spec)


def _root(dim: Any, roots: dict[str, str]) -> None:
    bounds = []
    if getattr(dim, "min", None) not in (None, 0):
        bounds.append(f"min={dim.min}")
    if str(getattr(dim, "max", "int_oo")) not in ("int_oo", "oo", "None"):
        bounds.append(f"max={dim.max}")
    roots.setdefault(dim.__name__, f"Dim({', '.join([repr(dim.__name__), *bounds])})")
