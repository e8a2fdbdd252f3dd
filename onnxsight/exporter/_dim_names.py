"""ONNX dim names for torch.export's symbols: one symbol, one name, on inputs, outputs and value_info.

torch.export gives each dynamic input axis a symbol of its own and, once it proves two
equal (two inputs sharing ``Dim("batch")``, or ``a + b``), records in its ShapeEnv that
one replaces the other (``s97 -> s52``). Placeholder metadata keeps the replaced symbol,
so naming only the surviving one exported ``a:[s97,3]``, ``b:[batch,3]``. Here every
symbol gets the name of the dim it stands for:

- the name the user gave: ``dynamic_axes``' names and top-level ``Dim`` names (``wanted``),
  then the ``Dim`` names torch recorded for nested inputs (dicts, lists);
- otherwise (``Dim.AUTO``/``Dim.DYNAMIC``) the argument and axis, ``x_dim_0``, the form
  ``dynamic_axes`` lists already produce;
- a replaced symbol, the name of its replacement, or an expression of named ones (``2*batch``).

Two different symbols never share a name: a second dim called ``batch`` that torch keeps
apart from the first becomes ``batch_2``, so verify(dim_sizes=...) binds each dim.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch


def symbol_names(program: torch.export.ExportedProgram, wanted: dict[tuple[str, int], str]) -> dict[str, str]:
    """sympy symbol (``s52``, and every symbol it replaced) -> the ONNX dim name."""
    axes = list(_symbolic_axes(program))
    names: dict[str, str] = {}
    taken: set[str] = set()
    for placeholder, axis, node in axes:  # names the user chose first, wherever the symbol appears first
        name = wanted.get((placeholder, axis)) or _debug_name(node)
        symbol = str(node.expr)
        if name and symbol not in names:
            names[symbol] = _unique(name, taken)
    for placeholder, axis, node in axes:
        names.setdefault(str(node.expr), _unique(f"{placeholder}_dim_{axis}", taken))
    shape_env = next((node.shape_env for _, _, node in axes if node.shape_env is not None), None)
    for old, new in dict(getattr(shape_env, "replacements", None) or {}).items():
        if str(old) not in names and new.free_symbols and all(str(s) in names for s in new.free_symbols):
            names[str(old)] = str(new.xreplace({s: _symbol(names[str(s)]) for s in new.free_symbols}))
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


def _debug_name(node: Any) -> str | None:
    """The ``Dim`` name torch recorded for this axis (nested inputs: ``L['inputs']['a'].size()[0]``)."""
    env = node.shape_env
    debug = getattr(env, "source_name_to_debug_name", None) or {}
    sources = getattr(env, "var_to_sources", None) or {}
    for symbol in (getattr(node, "_expr", None), node.expr):
        for source in sources.get(symbol, ()):
            name = debug.get(source.name)
            if name:
                return name
    return None


def _unique(name: str, taken: set[str]) -> str:
    candidate, index = name, 2
    while candidate in taken:
        candidate, index = f"{name}_{index}", index + 1
    taken.add(candidate)
    return candidate


def _symbol(name: str) -> Any:
    import sympy

    return sympy.Symbol(name, integer=True, positive=True)
