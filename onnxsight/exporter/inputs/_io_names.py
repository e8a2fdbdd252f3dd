"""Graph input and output names the user looks up: the model's own names, not FX node names.

Outputs are named after the model's output structure where the user gave no ``output_names``:
the keys of a dict or a transformers ``ModelOutput`` (``logits``, ``encoder_last_hidden_state``),
a namedtuple's fields, joined with dots below the top (``hidden_states.0``); a KV cache returned
is ``present.{layer}.key`` (``present.{layer}.decoder.key`` / ``.encoder.key`` for an
encoder-decoder's self- and cross-attention parts: ``_cache_names``). An output reached through
sequence indices alone (a bare tensor, a tuple) keeps its FX name: the structure has no name for it.

Inputs keep forward()'s argument names (``encoder_outputs_0`` for a tensor inside a tuple), except a
cache's tensors: ``past_key_values.{layer}.key``. Intermediate values keep their FX names
(DESIGN.md: the verification engine pairs them by that name).
"""

from __future__ import annotations

import inspect
from typing import Any

from torch.utils import _pytree as pytree

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.inputs._cache_names import PRESENT
from onnxsight.exporter.inputs._pytree_libs import Container, active_containers

Groups = list[tuple[str, str, list[str]]]   # (argument, container type name, leaf names) per container met


def io_names(program: Any, model: Any, ctx: DiagnosticContext
             ) -> tuple[list[str | None] | None, list[str | None] | None]:
    """Names for the graph's tensor inputs and outputs (None: the value keeps its name), per the module docstring.

    Call it inside ``library_pytrees()``. Each container flattened is noted (CAP012).
    """
    call_spec = getattr(program, "call_spec", None)
    if call_spec is None or call_spec.in_spec is None:
        return None, None
    active = active_containers()
    return (_input_names(program, model, active, ctx) if active else None), _output_names(program, active, ctx)


def _input_names(program: Any, model: Any, active: dict[type, Container],
                 ctx: DiagnosticContext) -> list[str | None] | None:
    import torch
    from torch.export import graph_signature as gs

    in_spec = program.call_spec.in_spec
    leaf_names: list[str | None] = []
    groups: Groups = []
    arguments = [*in_spec.children()[0].children(), *in_spec.children()[1].children()]
    for spec, argument in zip(arguments, _argument_names(model, in_spec)):
        _container_leaves(spec, argument, active, leaf_names, groups)
    _report(ctx, "input", groups)
    user = {s.arg.name for s in program.graph_signature.input_specs
            if s.kind == gs.InputKind.USER_INPUT and hasattr(s.arg, "name")}
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name in user]
    if not any(leaf_names) or len(leaf_names) != len(placeholders):
        return None
    return [name for name, node in zip(leaf_names, placeholders) if isinstance(node.meta.get("val"), torch.Tensor)]


def _output_names(program: Any, active: dict[type, Container], ctx: DiagnosticContext) -> list[str | None] | None:
    from torch.export import graph_signature as gs

    out_spec = program.call_spec.out_spec
    if out_spec is None:
        return None
    leaf_names: list[str | None] = []
    groups: Groups = []
    _structure_leaves(out_spec, (), active, leaf_names, groups)
    _report(ctx, "output", groups)
    specs = [s for s in program.graph_signature.output_specs if s.kind == gs.OutputKind.USER_OUTPUT]
    if not any(leaf_names) or len(leaf_names) != len(specs):
        return None
    return [name for name, spec in zip(leaf_names, specs) if isinstance(spec.arg, gs.TensorArgument)]


def _container_leaves(spec: Any, prefix: str, active: dict[type, Container], names: list[str | None],
                      groups: Groups) -> None:
    """One name per leaf of an input's ``spec``: ``prefix.{leaf}`` under a container, None elsewhere."""
    if spec.is_leaf():
        names.append(None)
        return
    container = active.get(spec.type)
    if container is not None:
        names.extend(_in_container(container, spec, prefix, groups))
        return
    for child in spec.children():
        _container_leaves(child, prefix, active, names, groups)


def _structure_leaves(spec: Any, path: tuple[str | int, ...], active: dict[type, Container],
                      names: list[str | None], groups: Groups) -> None:
    """One name per leaf of the output ``spec``: its keys joined (``logits``), ``present.*`` in a cache."""
    if spec.is_leaf():
        names.append(".".join(map(str, path)) if any(isinstance(part, str) for part in path) else None)
        return
    container = active.get(spec.type)
    if container is not None:
        names.extend(_in_container(container, spec, PRESENT, groups))
        return
    for key, child in zip(_child_keys(spec), spec.children()):
        _structure_leaves(child, (*path, key), active, names, groups)


def _in_container(container: Container, spec: Any, prefix: str, groups: Groups) -> list[str]:
    prefix = dict(container.renames).get(prefix, prefix)
    leaves = [f"{prefix}.{leaf}" for leaf in container.leaf_names(spec.context)]
    groups.append((prefix, container.name, leaves))
    return leaves


def _child_keys(spec: Any) -> list[str | int]:
    """A node's children's names: a dict's (ModelOutput's) keys, a namedtuple's fields, else their indices."""
    count = spec.num_children
    kind = spec.type
    keys: Any = None
    if isinstance(kind, type) and issubclass(kind, dict):
        context = spec.context
        keys = context[1] if kind.__name__ == "defaultdict" and isinstance(context, (list, tuple)) and \
            len(context) == 2 else context   # defaultdict: (default_factory, keys)
    elif isinstance(spec.context, type) and pytree.is_namedtuple_class(spec.context):  # pytree: type namedtuple
        keys = spec.context._fields
    if isinstance(keys, (list, tuple)) and len(keys) == count and all(isinstance(k, str) for k in keys):
        return list(keys)
    return list(range(count))


def _report(ctx: DiagnosticContext, kind: str, groups: Groups) -> None:
    for argument, container, leaves in groups:
        if leaves:
            layers = len({leaf[len(argument) + 1:].split(".")[0] for leaf in leaves})
            ctx.emit(rules.LIBRARY_CONTAINER_FLATTENED, kind=kind, argument=argument, container=container,
                     layers=layers, count=len(leaves), first=leaves[0], last=leaves[-1])


def _argument_names(model: Any, in_spec: Any) -> list[str]:
    """forward()'s names of the positional arguments in ``in_spec``, then the keywords'."""
    args_spec, kwargs_spec = in_spec.children()
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    positional = [params[i].name if i < len(params) else f"arg{i}" for i in range(args_spec.num_children)]
    return positional + [str(key) for key in (kwargs_spec.context or [])]
