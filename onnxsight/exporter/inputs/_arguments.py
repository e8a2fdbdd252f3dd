"""Checking export() arguments before any work is done, and dynamic_axes -> dynamic_shapes.

Every check here runs before capture: a wrong argument is reported in a second
with an ARG rule naming the argument, instead of after minutes of tracing (or
never: several of these mistakes used to be accepted and silently ignored).
"""

from __future__ import annotations

import inspect
import io
import os
from typing import Any, Mapping

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.inputs._dim_names import symbol_names  # noqa: F401  (export() imports it from here)
from onnxsight.exporter.inputs._nested_axes import leaves_text, nested_spec, resolve_leaf

SUPPORTED_OPSETS = range(15, 26)
TRANSLATED_OPSETS = range(17, 26)  # translations target these; 15 and 16 by conversion (translate/_downgrade.py)
DEFAULT_OPSET = 18
FILE_OBJECT_LIMIT = 2 * 1024**3  # protobuf's limit on one message: above it weights need a file of their own


def check_arguments(ctx: DiagnosticContext, model: Any, args: Any, kwargs: Any, opset: Any,
                    dynamic_shapes: Any, dynamic_axes: Any, *, f: Any = None, input_names: Any = None,
                    output_names: Any = None, custom_translations: Any = None,
                    external_data: bool | None = None) -> tuple[tuple, dict]:
    """Normalise args/kwargs and emit ARG* errors for anything wrong; returns (args, kwargs)."""
    if not isinstance(model, torch.nn.Module):
        ctx.emit(rules.INVALID_MODEL, type=type(model).__name__)
        return (), {}
    check_opset(ctx, opset)
    if isinstance(args, torch.Tensor) or not isinstance(args, (tuple, list)):
        args = (args,)
    args = tuple(args)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        ctx.emit(rules.INVALID_ARGUMENT, argument="kwargs", error=f"expected a dict, got {type(kwargs).__name__}")
        kwargs = {}
    kwargs = dict(kwargs or {})
    for argument, names in (("input_names", input_names), ("output_names", output_names)):
        check_names(ctx, argument, names)
    check_output_file(ctx, f, model=model, external_data=external_data)
    check_custom_translations(ctx, custom_translations)
    signature = inspect.signature(model.forward)
    try:
        bound = dict(signature.bind(*args, **kwargs).arguments)
    except TypeError as exc:
        ctx.emit(rules.ARGS_MISMATCH, model=type(model).__name__, signature=str(signature), error=str(exc))
        return args, kwargs
    if dynamic_shapes is not None and dynamic_axes is not None:
        ctx.emit(rules.INVALID_ARGUMENT, argument="dynamic_axes",
                 error="give either dynamic_shapes (torch.export style) or dynamic_axes (torch.onnx style), not both")
    elif dynamic_shapes is not None:
        _check_dynamic_shapes(ctx, bound, dynamic_shapes)
    elif dynamic_axes is not None:
        _check_dynamic_axes(ctx, bound, dynamic_axes, input_names, output_names)
    return args, kwargs


def check_opset(ctx: DiagnosticContext, opset: Any) -> None:
    """ARG006 for a value that is not an int (``"18"``), ARG004 for an int outside 15..25."""
    if isinstance(opset, bool) or not isinstance(opset, int):
        ctx.emit(rules.OPSET_NOT_AN_INTEGER, type=type(opset).__name__, value=repr(opset))
    elif opset not in SUPPORTED_OPSETS:
        ctx.emit(rules.UNSUPPORTED_OPSET, opset=opset,
                 supported=f"{SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}")


def check_names(ctx: DiagnosticContext, argument: str, names: Any) -> None:
    """ARG007: input_names/output_names must be a list of distinct non-empty strings (a str is not)."""
    if names is None:
        return
    if isinstance(names, str):
        ctx.emit(rules.NAMES_NOT_A_LIST, argument=argument,
                 given=f"the string {names!r}, which would be read letter by letter as {len(names)} names; "
                       f"write {argument}=[{names!r}]")
        return
    if not isinstance(names, (list, tuple)):
        ctx.emit(rules.NAMES_NOT_A_LIST, argument=argument, given=f"a {type(names).__name__}")
        return
    for index, name in enumerate(names):
        if not isinstance(name, str) or not name:
            ctx.emit(rules.NAMES_NOT_A_LIST, argument=argument,
                     given=f"entry {index} is {type(name).__name__} {name!r}")
            return
    duplicates = sorted({name for name in names if list(names).count(name) > 1})
    if duplicates:
        ctx.emit(rules.NAMES_NOT_A_LIST, argument=argument,
                 given=f"{list(names)}, which names {', '.join(map(repr, duplicates))} more than once")


def check_output_file(ctx: DiagnosticContext, f: Any, *, model: torch.nn.Module | None = None,
                      external_data: bool | None = None) -> None:
    """ARG008 for an ``f`` that cannot be written; ARG013 for a file object that cannot hold the model."""
    if f is None:
        return
    if isinstance(f, (str, os.PathLike)):
        reason = unwritable_reason(os.fsdecode(os.fspath(f)), folder=False)
        if reason:
            ctx.emit(rules.OUTPUT_FILE_NOT_WRITABLE, path=repr(os.fsdecode(os.fspath(f))), reason=reason)
        return
    if not callable(getattr(f, "write", None)):
        ctx.emit(rules.OUTPUT_FILE_NOT_WRITABLE, path=f"<{type(f).__name__}>",
                 reason="expected a path or a binary file object (io.BytesIO, open(path, 'wb'))")
        return
    if isinstance(f, io.TextIOBase):
        ctx.emit(rules.OUTPUT_FILE_NOT_WRITABLE, path=f"<{type(f).__name__}>",
                 reason="the file is open in text mode; an ONNX model is bytes: open it with 'wb'")
        return
    if external_data:
        ctx.emit(rules.FILE_OBJECT_TOO_LARGE, reason="external_data=True was asked for")
    elif model is not None and (size := weights_bytes(model)) > FILE_OBJECT_LIMIT:
        ctx.emit(rules.FILE_OBJECT_TOO_LARGE, reason=f"the weights are {size / 1024**3:.1f} GB (above 2 GB)")


def check_artifacts_dir(ctx: DiagnosticContext, artifacts_dir: Any) -> None:
    """ARG009: the folder ``report=True`` writes into must be creatable and writable."""
    if not isinstance(artifacts_dir, (str, os.PathLike)):
        ctx.emit(rules.ARTIFACTS_DIR_NOT_WRITABLE, path=repr(artifacts_dir),
                 reason=f"expected a folder path, got {type(artifacts_dir).__name__}")
        return
    path = os.fsdecode(os.fspath(artifacts_dir))
    reason = unwritable_reason(path, folder=True)
    if reason:
        ctx.emit(rules.ARTIFACTS_DIR_NOT_WRITABLE, path=repr(path), reason=reason)


def require_artifacts_dir(model: Any, artifacts_dir: Any) -> None:
    """``report=True``: raise ARG009 before any work when the reports could not be written at the end.

    The orchestration (``onnxsight.export``) calls this first: the exporter core has no reports to write.
    """
    from onnxsight.diagnostics import caller_location

    ctx = DiagnosticContext(fallback_location=caller_location())
    check_artifacts_dir(ctx, artifacts_dir)
    if ctx.errors:
        refuse_arguments(model, ctx)


def refuse_arguments(model: Any, ctx: DiagnosticContext) -> None:
    """Raise InvalidArgumentError with ``ctx``'s diagnostics and a record whose "arguments" stage failed.

    For checks the orchestration makes before the exporter core runs (ARG009, torch.onnx's keywords),
    so their refusal reads, and is reported, like the core's own argument checks.
    """
    from onnxsight.exporter._errors import InvalidArgumentError
    from onnxsight.exporter._record import ExportRecord

    record = ExportRecord(model_name=type(model).__name__)
    with record.stage("arguments") as stage:
        stage.status = "failed"
    raise InvalidArgumentError("export() was called with invalid arguments", diagnostics=ctx.diagnostics,
                               record=record)


def unwritable_reason(path: str, *, folder: bool) -> str | None:
    """Why ``path`` (a file, or a folder with ``folder=True``) cannot be written; None when it can."""
    if not path:
        return "the path is empty"
    absolute = os.path.abspath(path)
    if os.path.isdir(absolute) and not folder:
        return f"it is a folder; name the file inside it, e.g. {os.path.join(path, 'model.onnx')!r}"
    if os.path.exists(absolute) and not os.path.isdir(absolute):
        if folder:
            return "it is a file, not a folder"
        return None if os.access(absolute, os.W_OK) else "permission denied (the file is read-only)"
    if folder and os.path.isdir(absolute):
        return None if os.access(absolute, os.W_OK | os.X_OK) else "permission denied"
    parent = os.path.dirname(absolute)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent!r} is a file, so no folder can be created inside it"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"permission denied: the folder {parent!r} is not writable"
    return None


def weights_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters and buffers (each shared tensor once): what the ONNX file will hold."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())


def check_custom_translations(ctx: DiagnosticContext, custom_translations: Any) -> None:
    """ARG005/ARG010/ARG011: a mapping whose keys name operators that exist (a bare name never matches)."""
    if custom_translations is None:
        return
    if not isinstance(custom_translations, Mapping):
        ctx.emit(rules.INVALID_ARGUMENT, argument="custom_translations",
                 error=f"expected a dict {{op: translation}}, got {type(custom_translations).__name__}")
        return
    for key in custom_translations:
        if isinstance(key, str):
            _check_op_name(ctx, key)
        elif isinstance(key, torch._ops.OpOverloadPacket):  # stands for its .default overload, if it has one
            namespace, _, name = key._qualified_op_name.partition("::")
            reason = _unknown_op_reason(namespace, name, "default")
            if reason:
                ctx.emit(rules.TRANSLATION_FOR_UNKNOWN_OP, key=f"torch.ops.{namespace}.{name}", reason=reason)
        elif not callable(key):
            ctx.emit(rules.INVALID_ARGUMENT, argument="custom_translations",
                     error=f"key {key!r} is not an operator: use torch.ops.ns.op.overload or 'ns::op'")


def _check_op_name(ctx: DiagnosticContext, key: str) -> None:
    from onnxsight.exporter._registry import target_key

    text = key.strip()
    if "::" not in text and "." not in text:
        suggestion = f"did you mean 'aten::{text}'?" if hasattr(torch.ops.aten, text) else f"e.g. 'mylib::{text}'"
        ctx.emit(rules.TRANSLATION_KEY_WITHOUT_NAMESPACE, key=repr(key), suggestion=suggestion)
        return
    canonical = target_key(text)
    if "::" not in canonical:
        return  # a Python function's dotted path (``_operator.getitem``), matched by name
    namespace, _, rest = canonical.partition("::")
    name, _, overload = rest.partition(".")
    reason = _unknown_op_reason(namespace, name, overload or "default")
    if reason:
        ctx.emit(rules.TRANSLATION_FOR_UNKNOWN_OP, key=repr(key), reason=reason)


def _unknown_op_reason(namespace: str, name: str, overload: str) -> str | None:
    """Why ``namespace::name.overload`` is not an operator torch knows, with the closest names; None if it is."""
    import difflib

    try:
        packet = getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        known = sorted({op.split("::", 1)[1].split(".")[0] for op in torch._C._dispatch_get_all_op_names()
                        if op.startswith(namespace + "::")})
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {', '.join(f'{namespace}::{c}' for c in close)}?" if close else \
            ("" if known else f"; no operator is registered in namespace {namespace!r} (is the module that "
                              "defines it imported?)")
        return f"torch.ops.{namespace} has no operator {name!r}{hint}"
    if namespace == "higher_order" or not hasattr(packet, "overloads"):
        return None
    overloads = list(packet.overloads())
    if overload in overloads:
        return None
    return (f"{namespace}::{name} has no overload {overload!r}; its overloads are "
            f"{', '.join(overloads) or 'none'} (write '{namespace}::{name}.<overload>')")


def _check_dynamic_shapes(ctx: DiagnosticContext, bound: Mapping[str, Any], dynamic_shapes: Any) -> None:
    names = list(bound)
    if isinstance(dynamic_shapes, Mapping):
        unknown = [k for k in dynamic_shapes if k not in names]
        if unknown:
            error = f"keys {unknown} are not arguments of forward(); arguments given are {names}"
            # A keyword forward() only takes through **kwargs: transformers 5.24 still accepts the deprecated
            # past_key_values= there and renames it to cache= at run time, out of dynamic_shapes' reach.
            hidden = [key for key in unknown for value in bound.values() if isinstance(value, dict) and key in value]
            if hidden:
                error += (f"; {hidden} reach forward() only through its **kwargs: pass them by the name forward() "
                          "declares" + (" (transformers 5.24 calls the KV cache `cache`)"
                                        if "past_key_values" in hidden else ""))
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=error)
            return
        specs = dict(dynamic_shapes)
    elif isinstance(dynamic_shapes, (tuple, list)):
        # torch.export matches a tuple against the bound arguments: `*tensors` is one entry holding a tuple.
        if len(dynamic_shapes) != len(names):
            ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                     error=f"{len(dynamic_shapes)} entries for {len(names)} inputs ({', '.join(names)})")
            return
        specs = dict(zip(names, dynamic_shapes))
    else:
        ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                 error=f"expected a dict keyed by argument name or a tuple, got {type(dynamic_shapes).__name__}")
        return
    for name, spec in specs.items():
        _check_spec(ctx, name, bound[name], spec)


def _check_spec(ctx: DiagnosticContext, where: str, value: Any, spec: Any) -> None:
    """One input's dynamic_shapes entry against its value: axes that exist, one entry per axis."""
    if spec is None:
        return
    if isinstance(value, torch.Tensor):
        if isinstance(spec, Mapping):
            _check_axes(ctx, where, value, list(spec))
        elif isinstance(spec, (list, tuple)) and len(spec) != value.dim():
            ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                     error=f"input {where} has rank {value.dim()} but its entry lists {len(spec)} axes")
        return
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)) and len(value) == len(spec):
        for index, (item, item_spec) in enumerate(zip(value, spec)):
            _check_spec(ctx, f"{where}[{index}]", item, item_spec)
    elif isinstance(value, Mapping) and isinstance(spec, Mapping):
        for key, item_spec in spec.items():
            if key in value:
                _check_spec(ctx, f"{where}[{key!r}]", value[key], item_spec)


def _check_axes(ctx: DiagnosticContext, where: str, value: torch.Tensor, axes: list[Any]) -> None:
    rank = value.dim()
    for axis in axes:
        if isinstance(axis, bool) or not isinstance(axis, int):
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"axis {axis!r} of input {where} is not an int")
        elif not 0 <= axis < rank:
            valid = f"axes 0..{rank - 1}" if rank else "no axes: it is a scalar"
            ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                     error=f"axis {axis} of input {where} does not exist: {where} has rank {rank} ({valid})")


class RequiredAxes(dict):
    """``dynamic_axes`` whose every key must name an input: a key naming nothing is ARG003, not ARG016.

    NOTE: export() only warns (ARG016) about a legacy ``dynamic_axes`` key that names nothing, as
    torch.onnx did for code written for it. A caller of its own (the command line's ``--dynamic``,
    named by ``source``) asks for dims that must be dynamic; one that names no input would export
    static, so it is refused, by the same name resolution export() uses.
    """

    def __init__(self, axes: Mapping[str, Any], *, source: str) -> None:
        super().__init__(axes)
        self.source = source


def _check_dynamic_axes(ctx: DiagnosticContext, bound: Mapping[str, Any], dynamic_axes: Any,
                        input_names: Any, output_names: Any) -> None:
    """torch.onnx-style ``{input: {axis: name}}``: every key an input (or output) name, every axis real."""
    if not isinstance(dynamic_axes, Mapping):
        ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                 error=f"dynamic_axes must be a dict {{input: {{axis: name}}}}, got {type(dynamic_axes).__name__}")
        return
    names = list(bound)
    given_names = list(input_names) if isinstance(input_names, (list, tuple)) else []
    outputs = set(output_names) if isinstance(output_names, (list, tuple)) else set()
    for key, axes in dynamic_axes.items():
        leaf = resolve_leaf(key, bound, given_names)  # input_names name the flattened tensors (torch.onnx)
        if leaf is None:
            if key in bound and key not in given_names:
                ctx.emit(rules.BAD_DYNAMIC_SHAPES,
                         error=f"input {key} is a {type(bound[key]).__name__}, not a tensor: name the tensors in "
                               f"it ({leaves_text(bound, key)}) in input_names, one name per tensor input in "
                               "order, as torch.onnx reads them, and key dynamic_axes by those names")
            elif isinstance(dynamic_axes, RequiredAxes):
                given = f"; input names are {given_names}" if given_names else ""
                ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"{dynamic_axes.source} names {key!r}, which is not an "
                                                         f"input: forward()'s arguments are {names}{given}")
            elif key not in outputs:  # torch.onnx warned and went on: the key changes nothing in the graph
                given = f"; input_names are {given_names}" if given_names else ""
                ctx.emit(rules.DYNAMIC_AXES_KEY_NAMES_NOTHING, key=repr(key),
                         valid=f"forward()'s arguments are {names}{given}"
                               + (f", output_names are {sorted(outputs)}" if outputs else ""))
            continue
        arg = leaf.path
        where = arg if arg == key else f"{arg} (input_names: {key!r})"
        if isinstance(axes, Mapping):
            listed = list(axes)
        elif isinstance(axes, (list, tuple)):
            listed = list(axes)
        else:
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"dynamic_axes[{key!r}] must be a dict or a list of axes")
            continue
        _check_axes(ctx, where, leaf.value, listed)


def convert_dynamic_axes(ctx: DiagnosticContext, model: torch.nn.Module, args: tuple, kwargs: dict,
                         dynamic_axes: Mapping[str, Any], input_names: list[str] | None
                         ) -> tuple[dict[str, Any] | None, dict[tuple[str, int], str]]:
    """torch.onnx's ``{input: {axis: name}}`` -> torch.export dynamic_shapes, plus the dim names wanted.

    Input names may be forward()'s argument names or the ``input_names`` given (which name the
    flattened tensor inputs, a dict's or list's tensors included: ``_nested_axes``). Output axes are ignored (ONNX output shapes follow from the inputs).
    """
    arguments = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    bound = list(arguments)
    shapes: dict[str, Any] = {}
    nested: dict[str, dict[tuple[Any, ...], Any]] = {}
    names: dict[tuple[str, int], str] = {}
    for key, axes in dynamic_axes.items():
        leaf = resolve_leaf(key, arguments, input_names)
        if leaf is None:
            continue  # an output name, or an unknown name (reported below if it names nothing)
        arg = leaf.argument
        if isinstance(axes, Mapping):
            items = {int(a): str(n) for a, n in axes.items()}
        elif isinstance(axes, (list, tuple)):  # named after their input unless a named axis is the same dim
            items = {int(a): "" for a in axes}
        else:
            ctx.emit(rules.BAD_DYNAMIC_SHAPES, error=f"dynamic_axes[{key!r}] must be a dict or a list of axes")
            continue
        spec = {axis: torch.export.Dim.DYNAMIC for axis in items}
        if leaf.keys:  # a tensor inside a dict/list argument: named by its input_names entry (the ONNX name)
            nested.setdefault(arg, {})[leaf.keys] = spec
        else:
            shapes[arg] = spec
        names.update({(key if leaf.keys else arg, axis): name for axis, name in items.items() if name})
    shapes.update({arg: nested_spec(arguments[arg], specs) for arg, specs in nested.items()})
    if not shapes:
        return None, names
    # An argument without dynamic axes is static: None for each of its tensors, in its own structure
    # (torch.export refuses a bare None for a tuple such as an LSTM's (h0, c0)).
    return {name: shapes[name] if name in shapes else torch.utils._pytree.tree_map(lambda _: None, arguments[name])
            for name in bound}, names


def named_dims(dynamic_shapes: Any, args: tuple, kwargs: dict, model: torch.nn.Module) -> dict[tuple[str, int], str]:
    """(argument, axis) -> the name of the torch.export Dim given there."""
    bound = list(inspect.signature(model.forward).bind(*args, **kwargs).arguments)
    if isinstance(dynamic_shapes, (tuple, list)):
        dynamic_shapes = dict(zip(bound, dynamic_shapes))
    names: dict[tuple[str, int], str] = {}
    for arg, spec in (dynamic_shapes or {}).items():
        items = spec.items() if isinstance(spec, Mapping) else enumerate(spec) if isinstance(spec, (list, tuple)) else ()
        for axis, dim in items:
            name = getattr(dim, "__name__", None)
            if isinstance(name, str) and isinstance(axis, int):
                names[(arg, axis)] = name
    return names
