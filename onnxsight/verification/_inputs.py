"""Inputs for verification: the example inputs, or seeded random ones generated from the input specs.

Random inputs follow each user input's dtype and shape; dynamic dimensions
take sizes other than the example's (within the program's range
constraints), so a model verified this way is checked where the example
never went.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def example_inputs(program: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The (args, kwargs) the program was exported with."""
    example = getattr(program.exported_program, "example_inputs", None)
    if example is None:
        raise ValueError("the exported program kept no example inputs; pass args= to verify()")
    args, kwargs = example
    return tuple(args), dict(kwargs or {})


def _user_placeholders(program: Any) -> list[Any]:
    from torch.export import graph_signature as gs

    ep = program.exported_program
    user = {spec.arg.name for spec in ep.graph_signature.input_specs
            if spec.kind == gs.InputKind.USER_INPUT and hasattr(spec.arg, "name")}
    return [n for n in ep.graph_module.graph.nodes if n.op == "placeholder" and n.name in user]


def _dim_param_symbols(program: Any) -> dict[str, str]:
    """ONNX dim names of the graph inputs (``batch``) -> the program's symbols (``s0``)."""
    import torch

    names: dict[str, str] = {}
    graph_inputs = program.model_proto.graph.input
    for node, info in zip(_user_placeholders(program), graph_inputs):
        val = node.meta.get("val")
        for dim, proto in zip(getattr(val, "shape", ()), info.type.tensor_type.shape.dim):
            if isinstance(dim, torch.SymInt) and proto.dim_param:
                names[proto.dim_param] = str(dim.node.expr)
    return names


def _symbol_sizes(program: Any, sizes: Mapping[str, int] | None, generator: Any) -> dict[str, int]:
    """A size per dynamic-dimension symbol: ``sizes`` (by symbol or ONNX dim name) when given,
    else a size other than the example's, within the program's range constraints."""
    import torch

    aliases = _dim_param_symbols(program) if sizes else {}
    chosen: dict[str, int] = {aliases.get(k, k): int(v) for k, v in (sizes or {}).items()}
    ranges = program.exported_program.range_constraints
    for node in _user_placeholders(program):
        val = node.meta.get("val")
        for dim in getattr(val, "shape", ()):
            if not isinstance(dim, torch.SymInt):
                continue
            symbol = str(dim.node.expr)
            if symbol in chosen or not dim.node.expr.is_symbol:
                continue
            hint = dim.node.hint if dim.node.hint is not None else 2
            bounds = next((r for s, r in ranges.items() if str(s) == symbol), None)
            upper = int(bounds.upper) if bounds is not None and bounds.upper.is_finite else hint + 8
            lower = int(bounds.lower) if bounds is not None else 0
            candidates = [s for s in range(max(lower, 1), upper + 1) if s != hint][:8]
            pick = int(torch.randint(len(candidates), (1,), generator=generator)) if candidates else 0
            chosen[symbol] = candidates[pick] if candidates else hint
    return chosen


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
    for node in _user_placeholders(program):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        shape = [sizes.get(str(d.node.expr), d.node.hint) if isinstance(d, torch.SymInt) else int(d)
                 for d in val.shape]
        if val.dtype.is_floating_point:
            tensor = torch.randn(shape, generator=generator, dtype=torch.float32).to(val.dtype)
        elif val.dtype == torch.bool:
            tensor = torch.randint(0, 2, shape, generator=generator).bool()
        else:
            high = max(1, min(shape)) if shape else 2
            tensor = torch.randint(0, high, shape, generator=generator, dtype=val.dtype)
        tensors.append(tensor)
    return tensors


def flat_user_inputs(program: Any, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None, *,
                     random: bool = False, seed: int = 0,
                     dim_sizes: Mapping[str, int] | None = None) -> list[Any]:
    """The user input tensors for one verification run."""
    if random:
        return random_inputs(program, seed=seed, dim_sizes=dim_sizes)
    if args is None and not kwargs:
        args, kwargs = example_inputs(program)
    if not isinstance(args, (tuple, list)):
        args = (args,)
    return program.flat_inputs(tuple(args), dict(kwargs or {}))
