"""Dims the model's code ties together although the user named them apart.

Two cases, both met by an encoder-decoder whose attention mask, encoder states and cross-attention
cache are given dims of their own:

- the example has them equal: torch.export raises a constraint violation whose fixes relate them
  (``cache_length2 = seq_length``), naming an axis without a ``Dim`` of its own (``Dim.DYNAMIC``,
  ``Dim.AUTO``, a name given as a string) by its source: ``L['attention_mask'].size()[1] = seq_length``.
  torch's ``refine_dynamic_shapes_from_suggested_fixes`` only knows named dims and fails on such a
  line; :func:`refine` applies them to the axis itself, so the dims become one, named after the first
  (as torch.onnx does with string names), and CAP007 says so;
- the example has them different: tracing fails inside torch (``RuntimeError: Attempting to
  broadcast a dimension of length s26``, ``The size of tensor a (s26) must match ...``), naming torch's
  symbols only. :func:`apart` finds the dims behind those symbols for CAP023;
- torch.export ties them without a word (the axis it meets first has no name of its own, and
  the named ones are unified through it): :func:`tied` finds them in the captured program for CAP024.

In each case the line is the model's: a library's line (transformers' attention), called from the user's.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

import torch
from torch.utils import _pytree as pytree

from onnxsight.diagnostics import Location, user_frame
from onnxsight.exporter.capture._fixes import RequestedDim, bound_arguments
from onnxsight.exporter.capture._torchlog import TorchLog, _is_model_code
from onnxsight.exporter.inputs._dim_strings import spec_leaves
from onnxsight.exporter.inputs._pytree_libs import active_containers

_SOURCE_FIX = re.compile(r"^\s*(?P<source>L\[.+\]\.size\(\)\[\d+\])\s*=\s*(?P<rhs>.+?)\s*$")
_SYMBOL = re.compile(r"\b[su]\d+\b")
_BROADCAST = ("Attempting to broadcast a dimension", "must match the size of tensor")


def refine(message: str, dynamic_shapes: Any, model: torch.nn.Module | None = None, args: tuple = (),
           kwargs: Mapping[str, Any] | None = None) -> Any:
    """torch.export's application of its suggested fixes, with the fixes it names by an axis's source applied too.

    Raises (as torch's own does) when a fix cannot be applied: a source that names no axis of the
    example, a right-hand side whose dim the spec does not have.
    """
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    block = message.partition("Suggested fixes:")[2]
    named, by_source = [], {}
    for line in block.strip("\n").splitlines():
        if not line.strip():
            break
        match = _SOURCE_FIX.match(line)
        if match:
            by_source[match["source"]] = match["rhs"]
        else:
            named.append(line)
    refined = dynamic_shapes
    if named:  # NOTE: torch's refine reads every entry's __name__, which Dim.AUTO/DYNAMIC lack: set aside meanwhile
        hints: dict[int, Any] = {}

        def mark(hint: Any) -> int:
            key = _MARK - len(hints)
            hints[key] = hint
            return key

        marked = _map(dynamic_shapes, mark)
        refined = refine_dynamic_shapes_from_suggested_fixes("Suggested fixes:\n" + "\n".join(named), marked)
        refined = _map(refined, None, lambda value: hints.get(value, value))
    if not by_source:
        return refined
    if model is None:
        raise ValueError(f"fixes name axes by their source ({', '.join(by_source)}): the example is needed")
    return _apply(refined, by_source, model, args, dict(kwargs or {}))


_MARK = -(10 ** 12)   # stand-ins for Dim hints while torch refines: ints it passes through unchanged


def _map(spec: Any, hint: Any, other: Any = None) -> Any:
    """``spec`` with each Dim hint replaced by ``hint(it)`` (and, given ``other``, each int by ``other(it)``)."""
    if isinstance(spec, Mapping):
        return {key: _map(item, hint, other) for key, item in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_map(item, hint, other) for item in spec)
    if hint is not None and type(spec).__name__ == "_DimHint":
        return hint(spec)
    if other is not None and isinstance(spec, int) and not isinstance(spec, bool):
        return other(spec)
    return spec


def _apply(shapes: Any, fixes: dict[str, str], model: torch.nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
    bound = bound_arguments(model, args, kwargs)
    dims = {dim.__name__: dim for dim in _dims(shapes)}
    values = {source: _dim(rhs, dims) for source, rhs in fixes.items()}
    flat = {id(leaf): index for index, leaf in enumerate(pytree.tree_leaves((tuple(args), dict(kwargs))))}
    done: set[str] = set()
    by_name = dict(zip(bound, shapes)) if isinstance(shapes, (tuple, list)) else dict(shapes)
    for name, value in bound.items():
        if name in by_name:
            by_name[name] = _respec(by_name[name], value, f"L[{name!r}]", values, flat, done)
    missing = set(values) - done
    if missing:
        raise ValueError(f"fixes name axes the example does not have: {', '.join(sorted(missing))}")
    return type(shapes)(by_name[name] for name in bound) if isinstance(shapes, (tuple, list)) else \
        {name: by_name[name] for name in shapes}


def _respec(spec: Any, value: Any, source: str, values: dict[str, Any], flat: dict[int, int], done: set[str]) -> Any:
    """``spec`` with each axis a fix names (by ``L[...]`` or strict capture's ``L['flat_args'][i]``) set to its dim."""
    if spec is None:
        return None
    if isinstance(value, torch.Tensor):
        axes = {}
        for axis in range(value.dim()):
            for name in (f"{source}.size()[{axis}]", f"L['flat_args'][{flat.get(id(value), -1)}].size()[{axis}]"):
                if name in values:
                    axes[axis] = values[name]
                    done.add(name)
        if not axes:
            return spec
        if isinstance(spec, Mapping):
            return {**spec, **axes}
        return type(spec)(axes.get(axis, item) for axis, item in enumerate(spec))
    container = active_containers().get(type(value))
    if container is not None and isinstance(spec, list):
        leaves, context = container.flatten(value)
        return [_respec(item, leaf, f"{source}[{name!r}]", values, flat, done)
                for name, leaf, item in zip(container.leaf_names(context), leaves, spec)]
    if isinstance(value, Mapping) and isinstance(spec, Mapping):
        return {key: _respec(item, value[key], f"{source}[{key!r}]", values, flat, done) if key in value else item
                for key, item in spec.items()}
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)) and len(value) == len(spec):
        return type(spec)(_respec(item, sub, f"{source}[{index}]", values, flat, done)
                          for index, (sub, item) in enumerate(zip(value, spec)))
    return spec


def _dims(spec: Any) -> Iterable[Any]:
    """Every named ``Dim`` in a spec, the roots of derived ones included."""
    for value in spec_leaves(spec):
        if isinstance(value, torch.export.Dim):
            root = getattr(value, "root", None)
            yield root if root is not None else value


def _dim(rhs: str, dims: dict[str, Any]) -> Any:
    """``seq``, ``2*seq``, ``seq + 1`` over the spec's dims, as a Dim (derived where needed)."""
    import sympy

    expr = sympy.sympify(rhs)
    if expr.is_number:
        return int(expr)
    (symbol,) = expr.free_symbols
    if symbol.name not in dims:
        raise ValueError(f"the fix `{rhs}` names a dim the spec does not have")
    scale, offset = sympy.polys.polytools.div(expr, symbol)
    dim = dims[symbol.name]
    if scale != 1:
        dim = int(scale) * dim
    if offset != 0:
        dim = dim + int(offset)
    return dim


def apart(exc: BaseException, log: TorchLog, dims: Iterable[RequestedDim]) -> tuple[list[RequestedDim], str]:
    """(the dims asked dynamic on each side of a failed broadcast, first of each label; the sizes as torch wrote
    them) where both sides are such dims; ([], "") for any other error."""
    sides = _broadcast_sides(str(exc))
    if sides is None:
        return [], ""
    symbols = log.source_symbols()
    by_symbol: dict[str, RequestedDim] = {}
    for dim in dims:
        for source in dim.sources:
            if source in symbols:
                by_symbol.setdefault(symbols[source], dim)
    found: dict[str, RequestedDim] = {}
    for side in sides:
        for symbol in _SYMBOL.findall(side):
            if symbol in by_symbol:
                found.setdefault(by_symbol[symbol].label, by_symbol[symbol])
    if len(found) < 2:
        return [], ""

    def readable(side: str) -> str:
        def name(match: re.Match[str]) -> str:
            dim = by_symbol.get(match[0])
            return match[0] if dim is None else dim.name or f"{dim.path}.shape[{dim.axis}]"
        return _SYMBOL.sub(name, side)

    return list(found.values()), f"{readable(sides[0])} against {readable(sides[1])}"


_LENGTH = re.compile(r"Attempting to broadcast a dimension of length (?P<a>.+?) at (?P<axis>-\d+)!.*?"
                     r"broadcastable to \[(?P<shape>[^\]]*)\]", re.DOTALL)
_SIZES = re.compile(r"The size of tensor a \((?P<a>.+?)\) must match the size of tensor b \((?P<b>.+?)\) at")


def _broadcast_sides(text: str) -> tuple[str, str] | None:
    """The two sizes a failed broadcast compared, as torch printed them (``s26``, ``s53``)."""
    match = _SIZES.search(text)
    if match:
        return match["a"], match["b"]
    match = _LENGTH.search(text)
    if match:
        shape = [part.strip() for part in match["shape"].split(",")]
        axis = int(match["axis"])
        if -len(shape) <= axis < 0:
            return match["a"], shape[axis]
    return None


def model_line(frames: tuple[Location, ...]) -> tuple[Location | None, Location | None]:
    """(the user's innermost line, the model library's innermost line below it when the model comes from one)."""
    user = user_frame(frames)
    library = next((frame for frame in reversed(frames) if _is_model_code(frame.file)), None)
    return (user, library if library != user else None) if user is not None else (library, None)


def tied(program: torch.export.ExportedProgram, dims: Iterable[RequestedDim], log: TorchLog
         ) -> list[tuple[list[RequestedDim], str, tuple[Location | None, Location | None]]]:
    """Dims the user named apart that the captured program ties, with no fix of torch.export's saying so.

    Returns (the dims, in input order; how the graph relates them: ``they are one dim, `cache_length2```;
    where). Dims are grouped by the expression torch ends up with for their symbol; a group with two
    names or more is one dim, named after its first named axis in input order (``_dim_names``); a named
    dim that became an expression of other named ones is related to them.
    """
    env = _shape_env(program)
    if env is None:
        return []
    by_source = {source.name: symbol for symbol, sources in dict(getattr(env, "var_to_sources", {}) or {}).items()
                 for source in sources}
    final: dict[str, list[RequestedDim]] = {}
    own: dict[str, str] = {}                 # label -> its own symbol
    for dim in sorted(dims, key=_input_order):
        symbol = next((by_source[s] for s in dim.sources if s in by_source), None)
        if symbol is None or dim.name is None:
            continue
        expr = env.replace(symbol)
        if getattr(expr, "is_number", False):
            continue  # made a constant: CAP005/CAP008 say so
        final.setdefault(str(expr), []).append(dim)
        own.setdefault(dim.label, str(symbol))
    names = {symbol: label for label, symbol in own.items()}
    found = []
    for expr, members in final.items():
        labels = list(dict.fromkeys(d.label for d in members))
        related = {str(s) for s in by_source.values() if str(env.replace(s)) == expr} | set(_SYMBOL.findall(expr))
        if len(labels) > 1:
            firsts = [next(d for d in members if d.label == label) for label in labels]
            found.append((firsts, f"they are one dim, `{labels[0]}`",
                          _where_tied(log, {own[label] for label in labels}, related)))
        elif labels and expr != own[labels[0]] and set(_SYMBOL.findall(expr)) <= set(names):
            readable = _SYMBOL.sub(lambda m: names[m[0]], expr)
            others = [group[0] for key, group in final.items() if key in set(_SYMBOL.findall(expr))]
            found.append((members[:1] + others, f"`{labels[0]}` is `{readable}`",
                          _where_tied(log, {own[labels[0]]}, related | {own[labels[0]]})))
    return found


def _input_order(dim: RequestedDim) -> int:
    """The dim's input's place among the flattened inputs (the graph's input order)."""
    match = re.search(r"\['flat_args'\]\[(\d+)\]", dim.flat_source)
    return int(match[1]) if match else 1 << 30


def _shape_env(program: torch.export.ExportedProgram) -> Any:
    for node in program.graph_module.graph.nodes:
        for dim in getattr(node.meta.get("val"), "shape", ()) if node.op == "placeholder" else ():
            env = getattr(getattr(dim, "node", None), "shape_env", None)
            if env is not None:
                return env
    return None


def _where_tied(log: TorchLog, members: set[str], related: set[str]) -> tuple[Location | None, Location | None]:
    """The line whose guard or replacement first relates one of ``members`` (the dims' own symbols) to another
    symbol of ``related`` (every symbol torch made equal to them): a line in the model's code first."""
    events = [e for e in log.events if e.kind != "symbol" and e.location is not None
              and (set(e.symbols) | set(_SYMBOL.findall(e.text))) & members
              and len((set(e.symbols) | set(_SYMBOL.findall(e.text))) & related) >= 2]
    event = next((e for e in events if e.origin is not None), events[0] if events else None)
    return (event.location, event.origin) if event is not None else (None, None)
