"""ONNX dim names for torch.export's symbols: one symbol, one name, on inputs, outputs and value_info.

torch.export gives each dynamic input axis a symbol of its own and, once it proves two
equal (two inputs sharing ``Dim("batch")``, or ``a + b``), records in its ShapeEnv that
one replaces the other (``s97 -> s52``). Placeholder metadata keeps the replaced symbol,
so naming only the surviving one exported ``a:[s97,3]``, ``b:[batch,3]``. Here every
symbol gets the name of the dim it stands for:

- the name the user gave: ``dynamic_axes``' names and top-level ``Dim`` names (``wanted``),
  then the ``Dim`` names torch recorded for nested inputs (dicts, lists);
- otherwise (``Dim.AUTO``/``Dim.DYNAMIC``) the input and axis, ``x_dim_0``, the form
  ``dynamic_axes`` lists already produce (the input by its ONNX name when ``input_names`` renamed it);
- a replaced symbol, the name of its replacement, or an expression of named ones (``2*batch``).

Two different symbols never share a name: a second dim called ``batch`` that torch keeps
apart from the first becomes ``batch_2``, so verify(dim_sizes=...) binds each dim. The exception is
one ``Dim`` object on axes of equal example size that torch left two symbols (a ``DynamicCache``'s
keys of some layers): the user declared them one dim, and the graph says so.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch


def symbol_names(program: torch.export.ExportedProgram, wanted: dict[tuple[str, int], str],
                 input_names: list[str] | None = None, spelled: dict[str, str] | None = None) -> dict[str, str]:
    """sympy symbol (``s52``, and every symbol it replaced) -> the ONNX dim name.

    ``input_names``: the ONNX names of the user inputs, in order (``input_names=``, or a library's
    ``past_key_values.0.key``): an unnamed dim is then ``features_dim_0`` after the input it is
    on in the ONNX model, not after forward()'s argument the user renamed. ``spelled``: a Dim name ->
    the string the user wrote for it where that is no identifier (``batch_size`` -> ``batch size``).
    """
    onnx_name = {placeholder: name for placeholder, name in zip(program.graph_signature.user_inputs, input_names or [])
                 if name}  # None: the input keeps its own name
    axes = list(_symbolic_axes(program))
    names: dict[str, str] = {}
    taken: set[str] = set()
    same_dim: dict[tuple[str, Any], str] = {}   # (a user's Dim name, example size) -> the ONNX name it got
    for own_only in (True, False):  # names the user chose, each symbol after its first named axis in input order
        for placeholder, axis, node in axes:
            name = wanted.get((placeholder, axis)) or wanted.get((onnx_name.get(placeholder), axis))
            dim = None if name else _debug_name(node, own_only=own_only)
            symbol = str(node.expr)
            if (name or dim) and symbol not in names:
                # NOTE: one Dim object on axes of equal example size is one dim, as the user declared, even where
                # torch.export left two symbols (a DynamicCache's keys of some layers, flattened per layer)
                if name:
                    names[symbol] = _unique(name, taken)
                else:
                    key = (dim, _example_size(node))
                    names[symbol] = same_dim[key] = same_dim.get(key) or _unique(dim, taken)
    for placeholder, axis, symbol in _replaced_axes(program):  # Dim("height") fixed to 8*_height: still "height"
        name = wanted.get((placeholder, axis)) or wanted.get((onnx_name.get(placeholder), axis))
        if name and symbol not in names and name.isidentifier():
            names[symbol] = _unique(name, taken)
    for placeholder, axis, node in axes:
        names.setdefault(str(node.expr), _unique(f"{onnx_name.get(placeholder, placeholder)}_dim_{axis}", taken))
    shape_env = next((node.shape_env for _, _, node in axes if node.shape_env is not None), None)
    for old, new in dict(getattr(shape_env, "replacements", None) or {}).items():
        new = shape_env.replace(new)  # to the end of a chain of replacements
        if str(old) not in names and new.free_symbols and all(str(s) in names for s in new.free_symbols):
            names[str(old)] = str(new.xreplace({s: _symbol(names[str(s)]) for s in new.free_symbols}))
    if spelled:
        names = {symbol: rename_symbols(name, spelled) for symbol, name in names.items()}
    return names


def _symbolic_axes(program: torch.export.ExportedProgram) -> Iterator[tuple[str, int, Any]]:
    """(placeholder name, axis, SymNode) for every input axis whose size is one symbol."""
    for fx_node in program.graph_module.graph.nodes:
        if fx_node.op != "placeholder":
            continue
        for axis, dim in enumerate(getattr(fx_node.meta.get("val"), "shape", ())):
            node = getattr(dim, "node", None)
            if node is not None and getattr(node.expr, "is_Symbol", False):
                yield fx_node.name, axis, node


def _replaced_axes(program: torch.export.ExportedProgram) -> Iterator[tuple[str, int, str]]:
    """(placeholder name, axis, symbol) for every input axis whose own symbol torch replaced by an expression.

    NOTE: a fix such as ``height = 8*_height`` (torch.export's, applied) makes the axis ``8*s56``
    while shapes keep the axis's own symbol (``s100``, SymNode ``_expr``; ONNX shapes are written
    from it), so the user's name goes on that symbol: the graph says ``height``, ``height//8``.
    """
    for fx_node in program.graph_module.graph.nodes:
        if fx_node.op != "placeholder":
            continue
        for axis, dim in enumerate(getattr(fx_node.meta.get("val"), "shape", ())):
            node = getattr(dim, "node", None)
            own = getattr(node, "_expr", None)
            if node is not None and getattr(own, "is_Symbol", False) and not getattr(node.expr, "is_Symbol", False):
                yield fx_node.name, axis, str(own)


def _debug_name(node: Any, *, own_only: bool = False) -> str | None:
    """The ``Dim`` name torch recorded for this axis (nested inputs: ``L['inputs']['a'].size()[0]``).

    ``own_only``: the axis's own symbol only, not the one torch replaced it by (a ``Dim.DYNAMIC`` axis tied to a
    named one would otherwise lend the name of whichever axis torch kept, not of the first named one).
    """
    env = node.shape_env
    debug = getattr(env, "source_name_to_debug_name", None) or {}
    sources = getattr(env, "var_to_sources", None) or {}
    for symbol in (getattr(node, "_expr", None),) if own_only else (getattr(node, "_expr", None), node.expr):
        for source in sources.get(symbol, ()):
            name = debug.get(source.name)
            if name:
                return name
    return None


def _example_size(node: Any) -> Any:
    """The example's size of the axis ``node`` stands for (None where torch does not say)."""
    # NOTE: ``backed_var_to_val``: reading ``var_to_val`` emits a FutureWarning on the user's console
    sizes = getattr(node.shape_env, "backed_var_to_val", None) or {}
    return sizes.get(getattr(node, "_expr", None))


def _unique(name: str, taken: set[str]) -> str:
    candidate, index = name, 2
    while candidate in taken:
        candidate, index = f"{name}_{index}", index + 1
    taken.add(candidate)
    return candidate


def _symbol(name: str) -> Any:
    import sympy

    return sympy.Symbol(name, integer=True, positive=True)


#: sympy's integer/float conversions as a reader writes them (sizes are never negative, so trunc is floor).
_FUNCTIONS = {"TruncToInt": "floor", "FloorToInt": "floor", "CeilToInt": "ceil", "ToFloat": ""}


def readable_dim(expr: str) -> str:
    """``TruncToInt(2.1*ToFloat((height//2)))`` -> ``floor(2.1*(height//2))``: a dim_param people can read."""
    for function, replacement in _FUNCTIONS.items():
        start = expr.find(function + "(")
        while start >= 0:
            open_at = start + len(function)
            close_at = _matching(expr, open_at)
            if close_at is None:
                break
            inner = expr[open_at + 1:close_at]
            if replacement:
                inner = f"{replacement}({inner})"
            elif not (inner.isidentifier() or (inner.startswith("(") and _matching(inner, 0) == len(inner) - 1)):
                inner = f"({inner})"
            expr = expr[:start] + inner + expr[close_at + 1:]
            start = expr.find(function + "(", start)
    return _drop_doubled_parentheses(expr)


def _drop_doubled_parentheses(expr: str) -> str:
    """``(((h - 1)//2)) + 1`` -> ``((h - 1)//2) + 1``: one pair of parentheses directly around another."""
    index = expr.find("((")
    while index >= 0:
        outer, inner = _matching(expr, index), _matching(expr, index + 1)
        if outer is not None and inner is not None and outer == inner + 1:
            expr = expr[:index] + expr[index + 1:inner + 1] + expr[outer + 1:]
        else:
            index += 1
        index = expr.find("((", index)
    return expr


def _matching(text: str, open_at: int) -> int | None:
    depth = 0
    for index in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return index
    return None


def rename_symbols(expr: str, names: dict[str, str]) -> str:
    """Every symbol of ``expr`` replaced by its name in one pass (a name is never renamed again)."""
    import re

    return re.sub(r"\b[A-Za-z_]\w*\b", lambda m: names.get(m.group(), m.group()), expr)
