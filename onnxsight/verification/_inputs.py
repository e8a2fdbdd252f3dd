"""Inputs for verification: the example inputs, the user's (checked against the program), or seeded
random ones, and the same inputs resized to other sizes of the dynamic dims.

The check happens before any work because PyTorch's FX interpreter skips the
program's shape guards: an input the deployed model rejects would otherwise
"verify". Every refusal is a VerificationError naming the input (the
argument name of ``forward()``), the axis, the expected and given values, and
the dim's range.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from onnxsight import rules
from onnxsight.verification._runners import refuse

_RANGES_CHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar("onnxsight_ranges_checked", default=True)


@contextmanager
def sizes_outside_ranges() -> Iterator[None]:
    """Within this block a size outside its dim's range is compared, not refused (VER003).

    NOTE: for the generation loop's replay of a step ONNX Runtime has already run. The range is the exported
    program's (torch.export narrows a dim, CAP007: LLaMA's mask to at least 4 positions), not the ONNX model's,
    which has no guards; a fault at a 2-token prompt must still be named at its node. Whether the program itself
    takes those sizes is checked after (GEN012). A block, not a verify() option: no user call skips the check.
    """
    token = _RANGES_CHECKED.set(False)
    try:
        yield
    finally:
        _RANGES_CHECKED.reset(token)


@dataclass(frozen=True)
class InputSpec:
    """One tensor input of the program: its name, placeholder meta value and ONNX dim names."""

    name: str
    val: Any                       # FakeTensor with ints and SymInts
    dim_names: tuple[str, ...]     # per axis: the ONNX dim_param, or the static size as text


@dataclass
class Dims:
    """The program's dynamic-dim symbols: names as the ONNX model shows them, and ranges."""

    names: dict[Any, str] = field(default_factory=dict)             # symbol -> "batch"
    aliases: dict[str, Any] = field(default_factory=dict)           # every ONNX dim name and symbol -> symbol
    ranges: dict[Any, tuple[int, int | None]] = field(default_factory=dict)

    def describe(self, symbol: Any) -> str:
        low, high = self.ranges.get(symbol, (0, None))
        return f"{self.names.get(symbol, symbol)} in [{low}, {'inf' if high is None else high}]"


def _generated(name: str) -> bool:
    """True for symbol-like dim names (``s77``) that the user did not choose."""
    return name[:1] == "s" and name[1:].isdigit()


def bound(value: Any) -> int | None:
    """A range bound as an int; None for infinity (sympy ``oo`` and torch's ``int_oo``)."""
    if value is None or str(value) in ("oo", "int_oo", "-oo", "-int_oo"):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def _user_placeholders(program: Any) -> list[Any]:
    from torch.export import graph_signature as gs

    ep = program.exported_program
    user = {spec.arg.name for spec in ep.graph_signature.input_specs
            if spec.kind == gs.InputKind.USER_INPUT and hasattr(spec.arg, "name")}
    return [n for n in ep.graph_module.graph.nodes if n.op == "placeholder" and n.name in user]


def input_specs(program: Any) -> list[InputSpec]:
    """The tensor inputs, in the ONNX model's input order."""
    import torch

    tensors = [n for n in _user_placeholders(program) if isinstance(n.meta.get("val"), torch.Tensor)]
    protos = list(program.model_structure().graph.input)   # not model_proto: that embeds every weight
    names = list(program.input_names) if len(program.input_names) == len(tensors) else [n.name for n in tensors]
    specs = []
    for i, (node, name) in enumerate(zip(tensors, names)):
        dims = protos[i].type.tensor_type.shape.dim if i < len(protos) else ()
        val = node.meta["val"]
        dim_names = tuple(d.dim_param if d.dim_param else str(s) for d, s in zip(dims, val.shape)) \
            if len(dims) == val.dim() else tuple(str(s) for s in val.shape)
        specs.append(InputSpec(name, val, dim_names))
    return specs


def program_dims(program: Any, specs: Sequence[InputSpec]) -> Dims:
    """Every free symbol of the input shapes with its ONNX name and range."""
    import torch

    dims = Dims()
    ranges = {str(k): v for k, v in program.exported_program.range_constraints.items()}
    for spec in specs:
        for size, name in zip(spec.val.shape, spec.dim_names):
            if not isinstance(size, torch.SymInt):
                continue
            expr = size.node.expr
            for symbol in expr.free_symbols:
                if expr.is_symbol:
                    dims.aliases[name] = symbol
                    if _generated(dims.names.get(symbol, str(symbol))):  # prefer the user's Dim name
                        dims.names[symbol] = name
                dims.names.setdefault(symbol, str(symbol))
                dims.aliases[str(symbol)] = symbol
                found = ranges.get(str(symbol))
                dims.ranges[symbol] = (bound(found.lower) or 0, bound(found.upper)) if found else (0, None)
    return dims


def example_inputs(program: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The (args, kwargs) the program was exported with (VER015 when it kept none)."""
    example = getattr(program.exported_program, "example_inputs", None)
    if example is None:
        raise refuse(rules.VERIFY_NO_EXAMPLE_INPUTS, names=", ".join(program.input_names))
    args, kwargs = example
    return tuple(args), dict(kwargs or {})


# -- the user's inputs, checked ------------------------------------------------------------------------
def user_inputs(program: Any, args: Any, kwargs: Mapping[str, Any] | None, *, device: str = "cpu",
                ) -> tuple[list[Any], dict[Any, int]]:
    """The input tensors, checked against the program's input specs; with the sizes of its symbols.

    numpy arrays are accepted and converted (``torch.from_numpy``: same dtype, no copy).
    """
    if args is None and not kwargs:
        args, kwargs = example_inputs(program)
    if not isinstance(args, (tuple, list)):
        args = (args,)
    args, kwargs = _from_numpy(tuple(args)), _from_numpy(dict(kwargs or {}))
    specs = input_specs(program)
    args, kwargs = _place_keywords(program, specs, args, kwargs)
    _check_structure(program, specs, args, kwargs)
    try:
        tensors = program.flat_inputs(tuple(args), dict(kwargs))
    except ValueError:
        raise refuse(rules.VERIFY_INPUT_COUNT, expected=len(specs), names=", ".join(s.name for s in specs),
                     given=_count_tensors(args, kwargs)) from None
    dims = program_dims(program, specs)
    sizes: dict[Any, int] = {}
    for spec, tensor in zip(specs, tensors):
        _check_tensor(spec, tensor, device, dims)
        _bind(spec, tensor, dims, sizes, specs)
    for spec, tensor in zip(specs, tensors):
        _check_derived(spec, tensor, dims, sizes)
    return list(tensors), sizes


def _from_numpy(tree: Any) -> Any:
    import numpy as np
    import torch
    from torch.utils import _pytree as pytree

    # np.asarray(order="C"), not np.ascontiguousarray: that makes a 0-d array shape [1]
    return pytree.tree_map(lambda v: torch.from_numpy(np.asarray(v, order="C")) if isinstance(v, np.ndarray)
                           else v, tree)


def _count_tensors(args: Any, kwargs: Any) -> int:
    import torch
    from torch.utils import _pytree as pytree

    return sum(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves((args, kwargs)))


def _place_keywords(program: Any, specs: Sequence[InputSpec], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Keyword inputs: those exported as keywords stay; a positional argument named by keyword moves to
    its place; any other name is VER011."""
    in_spec = getattr(getattr(program.exported_program, "call_spec", None), "in_spec", None)
    exported_kw = set(in_spec.children()[1].context) if in_spec is not None else set()
    positional = [s.name for s in specs]
    for key in list(kwargs):
        if key in exported_kw:
            continue
        if key not in positional:
            raise refuse(rules.VERIFY_UNKNOWN_INPUT, input=key, names=", ".join(positional))
        position = positional.index(key)
        if position != len(args):
            raise refuse(rules.VERIFY_UNKNOWN_INPUT, input=key, names=", ".join(positional))
        args = (*args, kwargs.pop(key))
    return args, kwargs


def _check_structure(program: Any, specs: Sequence[InputSpec], args: tuple, kwargs: dict) -> None:
    """VER002 for a different number of positional arguments, VER006 for a non-tensor where a tensor was."""
    import torch

    in_spec = getattr(getattr(program.exported_program, "call_spec", None), "in_spec", None)
    if in_spec is None:
        return
    expected = in_spec.children()[0]
    if expected.num_children != len(args):
        keywords = list(in_spec.children()[1].context)
        names = ", ".join(s.name for s in specs) + (f"; {', '.join(keywords)} by keyword" if keywords else "")
        raise refuse(rules.VERIFY_INPUT_COUNT, expected=len(specs), names=names,
                     given=f"{len(args)} positional" if _count_tensors(args, kwargs) == len(specs)
                     else _count_tensors(args, kwargs))
    placeholders = iter(_user_placeholders(program))
    by_node = {s.val: s for s in specs}
    for value, child in zip(args, expected.children()):
        if not child.is_leaf():
            for _ in range(child.num_leaves):
                next(placeholders, None)
            continue
        node = next(placeholders, None)
        meta = node.meta.get("val") if node is not None else None
        if isinstance(meta, torch.Tensor) and not isinstance(value, torch.Tensor):
            spec = by_node.get(meta)
            raise refuse(rules.VERIFY_INPUT_NOT_TENSOR, input=spec.name if spec else node.name,
                         given=type(value).__name__, expected=_describe(spec) if spec else "a tensor")


def _ranges_of(spec: InputSpec, dims: Dims) -> dict[str, Any]:
    """The input's expected dims and the ranges of its dynamic ones (the diagnostic's properties)."""
    import torch

    ranges = {}
    for size, name in zip(spec.val.shape, spec.dim_names):
        if isinstance(size, torch.SymInt):
            ranges[name] = list(dims.ranges.get(size.node.expr, (0, None)))
    return {"input": spec.name, "expected_shape": list(spec.dim_names), "ranges": ranges}


def _describe(spec: InputSpec) -> str:
    return f"a {str(spec.val.dtype).removeprefix('torch.')} tensor of shape [{', '.join(spec.dim_names)}]"


def _shape(shape: Sequence[Any]) -> str:
    return f"[{', '.join(str(int(s)) for s in shape)}]"


def _check_tensor(spec: InputSpec, tensor: Any, device: str, dims: Dims) -> None:
    """VER005 (device), VER004 (dtype), VER003 (rank, static sizes)."""
    import torch

    allowed = {"cpu", torch.device(device).type}
    if tensor.device.type not in allowed or (tensor.device.type == "cuda" and not torch.cuda.is_available()):
        raise refuse(rules.VERIFY_INPUT_DEVICE, input=spec.name, given=tensor.device.type, expected=device)
    if tensor.dtype != spec.val.dtype:
        raise refuse(rules.VERIFY_INPUT_DTYPE, input=spec.name, given=str(tensor.dtype).removeprefix("torch."),
                     expected=str(spec.val.dtype).removeprefix("torch."))
    expected = f"[{', '.join(spec.dim_names)}]"
    if tensor.dim() != spec.val.dim():
        raise refuse(rules.VERIFY_INPUT_SHAPE, properties=_ranges_of(spec, dims), input=spec.name,
                     given=_shape(tensor.shape), expected=expected,
                     detail=f"rank {spec.val.dim()}, got rank {tensor.dim()}")
    for axis, (size, given) in enumerate(zip(spec.val.shape, tensor.shape)):
        if not isinstance(size, torch.SymInt) and int(size) != int(given):
            raise refuse(rules.VERIFY_INPUT_SHAPE, properties=_ranges_of(spec, dims), input=spec.name,
                         given=_shape(tensor.shape), expected=expected,
                         detail=f"axis {axis} is static {int(size)}, got {int(given)}; export it with a "
                                f"dynamic dim to vary it")


def _bind(spec: InputSpec, tensor: Any, dims: Dims, sizes: dict[Any, int], specs: Sequence[InputSpec]) -> None:
    """Sizes of plain-symbol axes: within their range and equal wherever the symbol appears."""
    import torch

    for axis, (size, given) in enumerate(zip(spec.val.shape, tensor.shape)):
        if not isinstance(size, torch.SymInt) or not size.node.expr.is_symbol:
            continue
        symbol, given = size.node.expr, int(given)
        low, high = dims.ranges.get(symbol, (0, None))
        common = dict(input=spec.name, given=_shape(tensor.shape), expected=f"[{', '.join(spec.dim_names)}]")
        if (given < low or (high is not None and given > high)) and _RANGES_CHECKED.get():
            raise refuse(rules.VERIFY_INPUT_SHAPE, properties=_ranges_of(spec, dims), **common,
                         detail=f"axis {axis} is {given}, outside {dims.describe(symbol)}")
        if symbol in sizes and sizes[symbol] != given:
            first = _first_use(specs, symbol)
            raise refuse(rules.VERIFY_INPUT_SHAPE, properties=_ranges_of(spec, dims), **common,
                         detail=f"axis {axis} is {given}, but dim {dims.names.get(symbol)} is {sizes[symbol]} "
                                f"in {first}; inputs sharing a dim must agree")
        sizes[symbol] = given


def _first_use(specs: Sequence[InputSpec], symbol: Any) -> str:
    import torch

    for spec in specs:
        for axis, size in enumerate(spec.val.shape):
            if isinstance(size, torch.SymInt) and size.node.expr == symbol:
                return f"{spec.name} axis {axis}"
    return "another input"


def _check_derived(spec: InputSpec, tensor: Any, dims: Dims, sizes: Mapping[Any, int]) -> None:
    """Axes sized by an expression of symbols (``2*batch``) must equal it."""
    import torch

    for axis, (size, given) in enumerate(zip(spec.val.shape, tensor.shape)):
        if not isinstance(size, torch.SymInt) or size.node.expr.is_symbol:
            continue
        expr = size.node.expr
        if not expr.free_symbols <= set(sizes):
            continue
        wanted = int(expr.subs(sizes))
        if wanted != int(given):
            import sympy

            named = expr.subs({s: sympy.Symbol(dims.names.get(s, str(s))) for s in expr.free_symbols})
            raise refuse(rules.VERIFY_INPUT_SHAPE, properties=_ranges_of(spec, dims), input=spec.name,
                         given=_shape(tensor.shape),
                         expected=f"[{', '.join(spec.dim_names)}]",
                         detail=f"axis {axis} must be {named} = {wanted}, got {int(given)}")


# -- random inputs -----------------------------------------------------------------------------------------
def _symbol_sizes(program: Any, sizes: Mapping[str, int] | None, generator: Any) -> dict[Any, int]:
    """A size per dynamic-dimension symbol: ``sizes`` (by ONNX dim name or symbol) when given,
    else a size other than the example's, within the program's range constraints (VER013 otherwise)."""
    import torch

    dims = program_dims(program, input_specs(program))
    by_name = {**dims.aliases, **{n: s for s, n in dims.names.items()}}
    chosen: dict[Any, int] = {}
    for key, value in (sizes or {}).items():
        symbol = by_name.get(key)
        if symbol is None:
            raise refuse(rules.VERIFY_INVALID_DIM_SIZE, dim=key, given=value,
                         problem="no dynamic dim has this name; the program's dynamic dims are "
                                 + (", ".join(dims.describe(s) for s in dims.names) or "none"))
        low, high = dims.ranges.get(symbol, (0, None))
        if not isinstance(value, int) or value < max(low, 0) or (high is not None and value > high):
            raise refuse(rules.VERIFY_INVALID_DIM_SIZE, dim=key, given=value,
                         problem=f"outside its range: {dims.describe(symbol)}")
        chosen[symbol] = int(value)
    hints = _hints(program)
    for symbol in dims.names:
        if symbol in chosen:
            continue
        hint = hints.get(symbol, 2)
        low, high = dims.ranges.get(symbol, (0, None))
        upper = high if high is not None else hint + 8
        candidates = [s for s in range(max(low, 1), upper + 1) if s != hint][:8]
        pick = int(torch.randint(len(candidates), (1,), generator=generator)) if candidates else 0
        chosen[symbol] = candidates[pick] if candidates else hint
    return chosen


def _hints(program: Any) -> dict[Any, int]:
    """The example's size of every plain-symbol axis."""
    import torch

    hints: dict[Any, int] = {}
    for spec in input_specs(program):
        for size in spec.val.shape:
            if isinstance(size, torch.SymInt) and size.node.expr.is_symbol and size.node.hint is not None:
                hints[size.node.expr] = int(size.node.hint)
    return hints


def shape_at(val: Any, sizes: Mapping[Any, int]) -> list[int]:
    """The concrete shape of a placeholder's value with its symbols at ``sizes``."""
    import torch

    shape = []
    for d in val.shape:
        if isinstance(d, torch.SymInt):
            expr = d.node.expr
            shape.append(int(expr.subs(sizes)) if expr.free_symbols <= set(sizes) else int(d.node.hint))
        else:
            shape.append(int(d))
    return shape


def random_inputs(program: Any, *, seed: int = 0, dim_sizes: Mapping[str, int] | None = None) -> list[Any]:
    """Seeded random tensors for the user inputs, in the program's input order.

    Floating inputs are standard normal; integer inputs lie in ``[0, size of the smallest dim)``
    (a safe index range); bool inputs are fair coin flips. ``dim_sizes`` fixes symbol sizes
    by symbol or by ONNX dimension name (``{"batch": 7}``); other dynamic dimensions get a
    size other than the example's.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    sizes = _symbol_sizes(program, dim_sizes, generator)
    tensors: list[Any] = []
    for spec in input_specs(program):
        shape, dtype = shape_at(spec.val, sizes), spec.val.dtype
        if dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.randint(0, 2, shape, generator=generator).bool()
        else:
            high = max(1, min(shape)) if shape else 2
            tensor = torch.randint(0, high, shape, generator=generator, dtype=dtype)
        tensors.append(tensor)
    return tensors


def flat_user_inputs(program: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None, *,
                     random: bool = False, seed: int = 0, dim_sizes: Mapping[str, int] | None = None,
                     device: str = "cpu") -> list[Any]:
    """The user input tensors for one verification run (checked; see :func:`user_inputs`)."""
    if random:
        return random_inputs(program, seed=seed, dim_sizes=dim_sizes)
    return user_inputs(program, args, kwargs, device=device)[0]


def bind_sizes(program: Any, tensors: Sequence[Any], *, device: str = "cpu") -> dict[Any, int]:
    """The sizes of the program's symbols in ``tensors`` (flat, in input order), checked like user inputs."""
    specs = input_specs(program)
    dims = program_dims(program, specs)
    sizes: dict[Any, int] = {}
    for spec, tensor in zip(specs, tensors):
        _check_tensor(spec, tensor, device, dims)
        _bind(spec, tensor, dims, sizes, specs)
    return sizes
