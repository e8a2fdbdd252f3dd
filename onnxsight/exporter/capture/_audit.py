"""The specialisation audit: what became of every dim the user asked dynamic, and the diagnostics saying so.

Each requested dim gets one entry in ``record.facts["dynamic_dims"]``::

    {"input": "x", "axis": 0, "dim": "batch", "status": "dynamic" | "narrowed" | "refused" | "unknown",
     "detail": "...", "file": "/path/model.py", "line": 12, "code": "return x.view(4, -1)",
     "origin": "/site-packages/transformers/.../modeling_bert.py:210" or None}

``narrowed``: a torch.export fix (range or relation) was applied, ``detail`` is the fix;
``refused``: the dim cannot stay dynamic, ``detail`` says why and ``file``/``line`` where (the user's
line; ``origin`` the model library's line inside it, when the model comes from one).
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Optional

import torch
from torch.utils import _pytree as pytree

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, Location
from onnxsight.exporter.capture._fixes import Fix, RequestedDim, refine, render
from onnxsight.exporter.capture._library_options import option_for
from onnxsight.exporter.capture._torchlog import TorchLog

Entries = dict[tuple[str, int], dict[str, Any]]
Where = tuple[Optional[Location], Optional[Location]]    # (the user's line, a model library's line inside it)
_MARKED = re.compile(r"You marked (\S+) as dynamic but your code specialized it to be a constant \((-?\d+)\)")
_SOLVED = re.compile(r"solving the guards generated for (\S+) = \S+ resulted in a specialized value of (-?\d+)")


def start(dims: Iterable[RequestedDim]) -> Entries:
    return {(d.path, d.axis): {"input": d.path, "axis": d.axis, "dim": d.name, "status": "unknown", "detail": "",
                               "file": None, "line": None, "code": None, "origin": None} for d in dims}


def groups(dims: Iterable[RequestedDim]) -> dict[str, list[RequestedDim]]:
    """Dims by the label torch's messages use; one Dim shared by several inputs is one label."""
    found: dict[str, list[RequestedDim]] = {}
    for dim in dims:
        found.setdefault(dim.label, []).append(dim)
    return found


def set_status(entries: Entries, dims: Iterable[RequestedDim], status: str, detail: str,
               where: Where = (None, None)) -> None:
    location, origin = where
    for dim in dims:
        entry = entries.get((dim.path, dim.axis))
        if entry is not None:
            entry.update(status=status, detail=detail, file=location.file if location else None,
                         line=location.line if location else None, code=location.code if location else None,
                         origin=f"{origin.file}:{origin.line}" if origin else None)


def specialised(message: str) -> list[tuple[str, int]]:
    """(dim label, value) for each "specialized it to be a constant" torch reports without a fix line."""
    found = [(m[1], int(m[2])) for m in _MARKED.finditer(message)]
    return found + [(m[1], int(m[2])) for m in _SOLVED.finditer(message)]


def violated(message: str, dims: Iterable[RequestedDim]) -> list[RequestedDim]:
    """The requested dims torch's violation message names (for the message, never for classifying)."""
    return [d for d in dims if re.search(rf"(?<![\w']){re.escape(d.label)}(?![\w'])", message)]


def where(log: TorchLog, dims: Iterable[RequestedDim], *, specialised: bool = False) -> Where:
    """The user's line (and a library's line inside it) that specialised or constrained any of ``dims``."""
    symbols = log.source_symbols()
    for dim in dims:
        for source in dim.sources:
            symbol = symbols.get(source)
            event = log.where(symbol, specialised=specialised) if symbol else None
            if event is not None:
                return event.location, event.origin
    return None, None


def guard(log: TorchLog, dims: Iterable[RequestedDim], every: Iterable[RequestedDim]) -> str | None:
    """The equality guard that fixed one of ``dims``, in the dims' names: ``(height//8)*(width//8) == 16``.

    ``every``: all requested dims, so that a guard relating two of them names both. None when the
    size was fixed otherwise (a replacement by a constant names the line alone).
    """
    symbols = log.source_symbols()
    names = {symbols[source]: dim.label for dim in every for source in dim.sources if source in symbols}
    for dim in dims:
        for source in dim.sources:
            event = log.where(symbols[source], specialised=True) if source in symbols else None
            if event is not None and event.kind == "guard" and event.text.startswith("Eq("):
                return _readable(event.text, names)
    return None


def _readable(text: str, names: dict[str, str]) -> str:
    """torch's printed sympy ``Eq(((s0//8))*((s53//8)), 16)`` as Python over the dims' names."""
    text = re.sub(r"\b[su]\d+\b", lambda m: names.get(m[0], m[0]), text)
    inner, depth = text[len("Eq("):-1], 0
    for index, char in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            text = f"{inner[:index].strip()} == {inner[index + 1:].strip()}"
            break
    return _single_parens(text)


def _single_parens(text: str) -> str:
    """``(((h - 3)//32)) + 1`` -> ``((h - 3)//32) + 1``: a pair of parentheses directly around another goes."""
    stack, pairs = [], {}
    for index, char in enumerate(text):
        if char == "(":
            stack.append(index)
        elif char == ")" and stack:
            pairs[stack.pop()] = index
    drop = {i for i, j in pairs.items() if pairs.get(i + 1) == j - 1} | \
        {j for i, j in pairs.items() if pairs.get(i + 1) == j - 1}
    return "".join(char for index, char in enumerate(text) if index not in drop)


def _path(location: Location) -> str:
    relative = os.path.relpath(location.file)
    return location.file if relative.startswith("..") else relative


def cause(location: Location | None, origin: Location | None = None) -> str:
    """"`x.view(4, -1)` at model.py:12", with the library line first when the user's line calls into one (the
    library line alone where the model is a library's, transformers' with no line of the user's on the stack)."""
    if location is None and origin is None:
        return "the model's code"
    line = origin or location
    text = f"`{line.code}` at {_path(line)}:{line.line}" if line.code else f"{_path(line)}:{line.line}"
    return f"{text} (called from {_path(location)}:{location.line})" if origin and location else text


def refuse(ctx: DiagnosticContext, entries: Entries, log: TorchLog, dims: list[RequestedDim], value: int | None,
           fix: str, shapes: Any, *, size_cause: bool, every: Iterable[RequestedDim] = (),
           static: str | None = None, model: torch.nn.Module | None = None, kwargs: Any = None) -> None:
    """CAP005 (the code fixes the dim to a constant) or CAP008 (the example's size 0/1 is the cause).

    ``every``: all requested dims (a guard relating two is shown in both names); ``static``: the fix
    lines of every dim refused with this one, so that the static spec offered makes all of them static.
    ``model``/``kwargs``: the call, for a form of the model's library that holds at every size (``_library_options``).
    """
    found = where(log, dims, specialised=True)
    dim = dims[0]
    if size_cause:
        ctx.emit(rules.EXAMPLE_SIZE_SPECIALIZED, location=found[0], input=dim.path, axis=dim.axis,
                 dim=dim.name or "Dim.DYNAMIC", size=dim.size,
                 cause=f"; {cause(*found)} depends on it" if found[0] else "", shape=_grown_shape(dim))
        set_status(entries, dims, "refused", f"example size {dim.size}: {fix}", found)
        return
    condition = guard(log, dims, every) if found[0] else None
    ctx.emit(rules.DYNAMIC_DIM_SPECIALIZED, location=found[0], input=dim.path, axis=dim.axis,
             dim=dim.name or "Dim.DYNAMIC", value=value if value is not None else "a constant",
             cause=cause(*found) + (f" (guard `{condition}`)" if condition else ""), suggestion=fix,
             static=_static_code(static or fix, shapes),
             option=option_for(model, kwargs or {}, found, value) if model is not None else "")
    set_status(entries, dims, "refused", f"specialised to {value}: torch.export suggests `{fix}`", found)


def _static_code(fixes: str, shapes: Any) -> str:
    """The ``dynamic_shapes`` code with the dims of ``fixes`` (fix lines, one per line) made static."""
    lines = "".join(f"  {line.strip()}\n" for line in fixes.splitlines())
    try:
        return render(refine(f"Suggested fixes:\n{lines}", shapes))
    except Exception:  # noqa: BLE001 - an unnamed Dim.DYNAMIC: say it in words
        return "drop the axis from dynamic_shapes"


def _grown_shape(dim: RequestedDim) -> str:
    """The example's shape with the dim at 2: what to pass instead."""
    shape = [2 if axis == dim.axis else size for axis, size in enumerate(dim.shape)]
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def narrowed(entries: Entries, log: TorchLog, dims: Iterable[RequestedDim], fixes: Iterable[Fix]) -> Where:
    """Mark the dims a range or relation fix narrows; returns where the first of them was constrained."""
    by_label = groups(dims)
    first: Where = (None, None)
    for fix in fixes:
        if fix.kind in ("range", "relation") and fix.name in by_label:
            found = where(log, by_label[fix.name])
            set_status(entries, by_label[fix.name], "narrowed", fix.text, found)
            first = first if first[0] else found
    return first


def fixes_applied(ctx: DiagnosticContext, entries: Entries, dims: list[RequestedDim], applied: list[Fix],
                  code: str, found: Where) -> None:
    """CAP007: the export succeeded with the fixes; the message is the code to write.

    A fix with ``guards`` is one onnxsight derived itself from guards torch.export suggested none
    for (torch.export checked it on the next attempt); the message says which, and from which guard.
    """
    touched = [d for d in dims if entries.get((d.path, d.axis), {}).get("status") == "narrowed"]
    derived = [fix for fix in applied if fix.guards]
    parts = [] if len(derived) == len(applied) else ["suggested by torch.export"]
    for fix in derived:
        what = "derived" if not parts else f"`{fix.text}` derived"
        parts.append(f"{what} by onnxsight from the guard{'s' if len(fix.guards) > 1 else ''} "
                     + ", ".join(f"`{g}`" for g in fix.guards)
                     + ", for which torch.export suggests no fix, and checked by torch.export")
    origin = "; ".join(parts)
    ctx.emit(rules.DYNAMIC_SHAPE_FIX_APPLIED, location=found[0], origin=origin,
             dims=", ".join(d.describe() for d in touched) or "the dynamic dims", fixes="; ".join(fix.text for fix in applied),
             cause=cause(*found), code=code)


def kept_dynamic(ctx: DiagnosticContext, dims: Iterable[RequestedDim], how: str) -> None:
    """CAP009, one per dim (a Dim shared by several inputs: its first) kept dynamic from a size-1 example."""
    for dim in dims:
        ctx.emit(rules.SIZE_ONE_EXAMPLE_KEPT_DYNAMIC, input=dim.path, axis=dim.axis, dim=dim.name or "Dim.DYNAMIC",
                 size=dim.size, how=how)


def kept_oblivious(ctx: DiagnosticContext, entries: Entries, log: TorchLog, dims: list[RequestedDim],
                   static: dict[str, Any]) -> None:
    """CAP013 for each dim plain capture fixed (``static``: label -> (value, fix)) and the size-oblivious
    capture kept dynamic; ``log`` is the plain capture's, which names the line whose size-1 guard did it."""
    by_label = groups(dims)
    for label, (value, _) in static.items():
        found = where(log, by_label[label], specialised=True)
        condition = guard(log, by_label[label], dims) if found[0] else None
        dim = by_label[label][0]
        ctx.emit(rules.SPECIALIZATION_AVOIDED_SIZE_OBLIVIOUS, location=found[0], input=dim.path, axis=dim.axis,
                 dim=dim.name or "Dim.DYNAMIC", value=value,
                 cause=cause(*found) + (f" (guard `{condition}`)" if condition else ""))
        for each in by_label[label]:
            entry = entries.get((each.path, each.axis))
            if entry is not None and entry["status"] == "unknown":
                set_status(entries, [each], "dynamic", f"plain capture fixed it to {value} (a size of 1 inside the "
                           "model at the example): captured size-oblivious, checked at the example", found)


def grown(args: tuple, kwargs: dict, dims: Iterable[RequestedDim]) -> tuple[tuple, dict]:
    """The example with every dynamic axis of size 0 or 1 grown to 2 (repeated, or zeros from nothing)."""
    axes: dict[int, list[int]] = {}
    for dim in dims:
        if dim.size <= 1:
            axes.setdefault(dim.leaf, []).append(dim.axis)

    def grow(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or id(leaf) not in axes:
            return leaf
        for axis in axes[id(leaf)]:
            if leaf.shape[axis] == 1:
                leaf = torch.cat([leaf, leaf], dim=axis)
            elif leaf.shape[axis] == 0:
                leaf = leaf.new_zeros([2 if i == axis else n for i, n in enumerate(leaf.shape)])
        return leaf

    return pytree.tree_map(grow, (tuple(args), dict(kwargs)))


def check_at_example(program: torch.export.ExportedProgram, model: torch.nn.Module, args: tuple,
                     kwargs: dict) -> str | None:
    """None when the captured graph computes what the model does at the example; else what differs."""
    try:
        expected = pytree.tree_leaves(run_eagerly(model, args, kwargs))
        with torch.no_grad():
            # Without the input guards: a program captured from a grown example declares sizes >= 2.
            got = pytree.tree_leaves(program.module(check_guards=False)(*_copies(args), **_copies(kwargs)))
    except Exception as exc:  # noqa: BLE001 - a runtime assert at size 1 is the answer here
        return f"the graph captured for sizes >= 2 fails at the example: {type(exc).__name__}: " \
               f"{(str(exc).strip().splitlines() or [''])[0][:200]}"
    if len(expected) != len(got):
        return f"the graph captured for sizes >= 2 returns {len(got)} outputs at the example, the model {len(expected)}"
    for index, (want, have) in enumerate(zip(expected, got)):
        if isinstance(want, torch.Tensor):
            try:
                torch.testing.assert_close(have, want)
            except AssertionError:
                return f"the graph captured for sizes >= 2 computes output {index} differently at the example"
    return None


def run_eagerly(model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
    """The model's outputs at the example, run by PyTorch on copies of the inputs (a model that updates its inputs
    in place, a KV cache, must see the example again) with its buffers as they were after (export never changes
    the user's model: a forward that counts its calls, or fills a static cache, writes into them or replaces them)."""
    saved = [(module, name, tensor, tensor.detach().clone()) for module in model.modules()
             for name, tensor in module._buffers.items() if tensor is not None]
    try:
        with torch.no_grad():
            return model(*_copies(args), **_copies(kwargs))
    finally:
        for module, name, tensor, values in saved:
            module._buffers[name] = tensor
            tensor.data.copy_(values)


def _copies(tree: Any) -> Any:
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def confirm(entries: Entries, dims: Iterable[RequestedDim]) -> None:
    """After a successful capture: every dim not narrowed (or noted) stayed dynamic."""
    for dim in dims:
        entry = entries.get((dim.path, dim.axis))
        if entry is not None and entry["status"] == "unknown":
            entry["status"] = "dynamic"
