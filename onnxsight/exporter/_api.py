"""onnxsight.export: capture -> decompose -> translate -> check, with diagnostics at every stage."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping, Sequence

import onnx
import torch
from torch.export import graph_signature as gs
from torch.utils import _pytree as pytree

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter import _errors as errors
from onnxsight.exporter.translate._analysis import analyze_program
from onnxsight.exporter.capture._export_flag import onnx_exporting
from onnxsight.exporter.capture._modes import eval_semantics, training_dependent
from onnxsight.exporter.capture._program import adopt_program
from onnxsight.exporter.capture._quantized import refuse_eager_quantized
from onnxsight.exporter.capture._strategies import capture
from onnxsight.exporter.decompose._core_aten import (decompose, functionalize_inplace, needs_decomposition,
                                                     storage_swaps)
from onnxsight.exporter.inputs._aliases import Aliased, check_writes, separate
from onnxsight.exporter.inputs._dim_strings import dims_from_names, split_by_size
from onnxsight.exporter.inputs._fake import materialise_buffers, real_mode, refuse_fake_file
from onnxsight.exporter.translate._downgrade import convert_opset
from onnxsight.exporter.translate._dtype_opsets import choose_opset
from onnxsight.exporter.translate._functions import invalid_selection
from onnxsight.exporter.inputs._arguments import (DEFAULT_OPSET, TRANSLATED_OPSETS, check_arguments,
                                                  convert_dynamic_axes, named_dims, symbol_names)
from onnxsight.exporter._builder import Value, value_info
from onnxsight.exporter.inputs._cache_shapes import cache_shapes
from onnxsight.exporter.inputs._io_names import io_names
from onnxsight.exporter.inputs._pytree_libs import library_pytrees
from onnxsight.exporter.inputs._torch_onnx_inputs import collected_shapes, keyword_dict
from onnxsight.exporter.program._onnx_program import ONNXProgram, assemble
from onnxsight.exporter._record import ExportRecord
from onnxsight.exporter._registry import Registry, default_registry, target_key
from onnxsight.exporter.check._type_constraints import check_type_constraints, require_outputs
from onnxsight.exporter.translate._graph import names_read, translate_program
from onnxsight.exporter.translate._ort_forms import ORT_FUSION_TRANSLATIONS
from onnxsight.exporter.optimize import ORT_FUSION, optimize_translated


def export(model: torch.nn.Module, args: Any = (), f: str | os.PathLike | None = None, *,
           kwargs: Mapping[str, Any] | None = None,
           input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
           opset_version: int | None = None, dynamic_shapes: Any = None,
           dynamic_axes: Mapping[str, Any] | None = None, external_data: bool | None = None,
           custom_translations: Mapping[Any, Callable[..., Any]] | None = None,
           module_functions: bool | Iterable[type] = False, optimize: bool | str = True,
           registry: Registry | None = None, verbose: bool | None = None, modes: str = "eval") -> ONNXProgram:
    """The exporter core: arguments -> capture -> decompose -> translate -> check -> save.

    Users call :func:`onnxsight.export` (``onnxsight.pipeline``), which runs this
    and then verification and the reports. This core knows nothing of either:
    the exporter sits below them (DESIGN.md, "Packages"). ``registry`` is the
    extension point for a whole translation table of one's own (tests, other
    backends); ``custom_translations`` is the documented way to add a few.

    Raises :class:`onnxsight.ExportError` (a subclass per stage) naming each
    problem's rule code, operator and source line, with ``.diagnostics`` and
    ``.record`` set.

    ``module_functions=True`` (or a set of nn.Module classes) makes each module call an
    ONNX local function named after its class, the call node named after the module path
    (``_functions.py``); ``program.save(path, inline_functions=True)`` writes it flat again.

    ``verbose=True`` shows torch's own log output while capturing (None: only with ``TORCH_LOGS``);
    it is kept in the record either way. Diagnostics are logged once each, with a count, when the
    export ends.

    ``optimize=False`` skips the optimize stage: the graph as translated, every FX value under its own name.
    ``optimize="ort-fusion"`` also writes the forms ONNX Runtime's legacy Python transformer optimizer needs where
    they are not free (GPT-2's and LLaMA's attention for its decoder fusers at ``opt_level=0``, a pre-LN block's
    projection biases as rows: docs/optimization.md), and at opset 23 attention and RMS norms without the
    standard's Attention and RMSNormalization, which that optimizer does not know.

    ``modes="train"`` captures every module in training mode, ``"preserve"`` each in its own (torch.onnx's
    ``training=TrainingMode.TRAINING``/``PRESERVE``; the default ``"eval"``: every module in eval mode, the
    user's modes restored after): dropout then draws, and verification lists what it feeds as not compared.
    """
    opset = DEFAULT_OPSET if opset_version is None else opset_version
    ctx = DiagnosticContext(fallback_location=caller_location(), verbose=verbose)
    record = ExportRecord(model_name=type(model).__name__, opset=opset)
    try:
        # caches flattened (CAP012); constants real under fake_mode(); torch.onnx.is_in_onnx_export() True
        with ctx.logging_once(), library_pytrees(), real_mode(), onnx_exporting():
            program = _export(model, args, kwargs, ctx, record, opset=opset, input_names=input_names,
                              output_names=output_names, dynamic_shapes=dynamic_shapes, dynamic_axes=dynamic_axes,
                              custom_translations=custom_translations, registry=registry, f=f,
                              external_data=external_data, module_functions=module_functions,
                              opset_chosen=opset_version is not None, optimize=optimize, modes=modes)
            if f is not None:
                with record.stage("save"):
                    files = program.save(f, external_data=external_data)
                    if len(files) > 1:
                        ctx.emit(rules.EXTERNAL_DATA_WRITTEN, count=len(program.initializers),
                                 size=f"{program.weights_size / 1024**2:.1f} MB", location=files[1], data_file=files[1])
    except errors.ExportError as exc:
        exc.diagnostics = ctx.diagnostics
        exc.record = record
        raise
    except Exception as exc:
        ctx.emit(rules.INTERNAL_ERROR, stage=record.stages[-1].name if record.stages else "export",
                 error_type=type(exc).__name__, error=str(exc)[:500])
        raise errors.ExportError(f"onnxsight failed internally: {type(exc).__name__}: {exc}",
                                 diagnostics=ctx.diagnostics, record=record) from exc
    program.diagnostics = ctx.diagnostics
    return program


def _fail(cls: type[errors.ExportError], summary: str, ctx: DiagnosticContext, record: ExportRecord) -> None:
    raise cls(summary, diagnostics=ctx.diagnostics, record=record)


def _export(model: Any, args: Any, kwargs: Any, ctx: DiagnosticContext, record: ExportRecord, *, opset: int,
            input_names: Sequence[str] | None, output_names: Sequence[str] | None, dynamic_shapes: Any,
            dynamic_axes: Any, custom_translations: Mapping[Any, Callable] | None,
            registry: Registry | None, f: Any = None, external_data: bool | None = None,
            module_functions: Any = False, opset_chosen: bool = True, optimize: bool | str = True,
            modes: str = "eval") -> ONNXProgram:
    captured = None
    with record.stage("arguments") as stage:
        if isinstance(model, torch.export.ExportedProgram):  # already captured: torch.onnx takes it too
            captured, model, args, kwargs = adopt_program(ctx, model, args, kwargs, dynamic_shapes, dynamic_axes)
        else:
            args, kwargs = keyword_dict(model, args, kwargs)  # torch.onnx's (x, {"mask": m})
            dynamic_shapes = collected_shapes(ctx, dynamic_shapes, model, args, kwargs)
        if captured is None:  # one name on axes of different sizes: a dim per size (ARG023)
            dynamic_shapes = split_by_size(ctx, dynamic_shapes, model, args, kwargs)
        dynamic_shapes, spelled = dims_from_names(dynamic_shapes)  # {0: "batch"}: torch.onnx's named dims
        args, kwargs = check_arguments(ctx, model, args, kwargs, opset, dynamic_shapes, dynamic_axes, f=f,
                                       input_names=input_names, output_names=output_names,
                                       custom_translations=custom_translations, external_data=external_data)
        if captured is None and dynamic_shapes is not None and not ctx.errors:
            dynamic_shapes = cache_shapes(ctx, model, args, kwargs, dynamic_shapes)  # cache layouts (ARG027), list/tuple
        aliased: list[Aliased] = []
        if captured is None and not ctx.errors:
            args, kwargs, aliased = separate(model, args, kwargs)  # (x, x): a copy for y (ARG021/ARG012)
        if not any(d.code in ("ARG008", "ARG013") for d in ctx.diagnostics):  # f itself already refused
            refuse_fake_file(ctx, model, f)  # VAL007: fake weights cannot be written to f
        invalid = invalid_selection(module_functions)
        if invalid is not None:
            ctx.emit(rules.MODULE_FUNCTIONS_INVALID, given=invalid)
        if modes not in ("eval", "train", "preserve"):
            ctx.emit(rules.INVALID_ARGUMENT, argument="modes",
                     error=f"expected 'eval', 'train' or 'preserve', got {modes!r}")
        if not isinstance(optimize, bool) and optimize != ORT_FUSION:
            ctx.emit(rules.INVALID_ARGUMENT, argument="optimize",
                     error=f"expected True, False or {ORT_FUSION!r}, got {optimize!r}")
        registry = registry.copy() if registry is not None else default_registry()  # a copy either way
        for target, fn in ORT_FUSION_TRANSLATIONS.items() if optimize == ORT_FUSION else ():
            registry.register(target, fn, custom=True)   # what ORT's optimizer fuses, not opset 23's ops
        keep: list[Any] = []
        for target, fn in (custom_translations if isinstance(custom_translations, Mapping) else {}).items():
            if not callable(fn):
                ctx.emit(rules.INVALID_ARGUMENT, argument="custom_translations",
                         error=f"the translation for {target_key(target)} is not callable")
                continue
            registry.register(target, fn, custom=True)
            overload = _resolve_overload(target)
            if overload is not None:
                keep.append(overload)
        wanted_names: dict[tuple[str, int], str] = {}
        if dynamic_axes is not None and not ctx.errors:
            dynamic_shapes, wanted_names = convert_dynamic_axes(ctx, model, args, kwargs, dynamic_axes,
                                                                list(input_names or []))
        elif dynamic_shapes is not None and not ctx.errors:
            wanted_names = named_dims(dynamic_shapes, args, kwargs, model)
        if ctx.errors:
            stage.status = "failed"
            _fail(errors.InvalidArgumentError, "export() was called with invalid arguments", ctx, record)
    target, opset = opset, max(opset, TRANSLATED_OPSETS.start)  # 15, 16: translated at 17, then converted
    training = training_dependent(model) if captured is None and modes == "eval" else []
    if training:  # torch.onnx would export the training graph: said, as the graph here is eval()'s
        ctx.emit(rules.TRAINING_MODE_EXPORTED_AS_EVAL, model=type(model).__name__, modules=", ".join(training))
    with eval_semantics(model, modes), record.stage("capture") as stage:  # the user's modes are restored exactly
        if captured is not None:  # an ExportedProgram: captured as it is (its module() is never switched)
            exported, stage.status, stage.detail = captured, "skipped", "the model is an ExportedProgram"
        else:
            if refuse_eager_quantized(ctx, model, input_leaves(model, args, kwargs)):  # QNT001: torch.export traces none of it
                stage.status = "failed"
                _fail(errors.CaptureError, f"{type(model).__name__} uses eager-mode quantization", ctx, record)
            exported = capture(model, args, kwargs, dynamic_shapes, ctx, record.attempts, record.facts)
        if exported is None:
            stage.status = "failed"
            _fail(errors.CaptureError, f"torch.export could not capture {type(model).__name__}", ctx, record)
        record.exported_program = exported
        check_writes(ctx, exported, aliased)
        if ctx.errors:
            stage.status = "failed"
            _fail(errors.InvalidArgumentError, "export() was called with invalid arguments", ctx, record)
        materialise_buffers(model, exported.constants)  # fake mode: inv_freq & co. computed for real
    needed = choose_opset(exported, target, ctx, chosen=opset_chosen, default=DEFAULT_OPSET)  # float8: 19
    if needed is None:
        _fail(errors.TranslationError, f"{type(model).__name__} computes with a dtype opset {target} lacks", ctx,
              record)
    target = record.opset = needed
    opset = max(target, TRANSLATED_OPSETS.start)
    with record.stage("decompose") as stage:
        rewritten = functionalize_inplace(exported, registry, opset)
        reason = needs_decomposition(exported, registry, opset)
        if reason is None:
            stage.status, stage.detail = "skipped", "every captured op is functional and has a translation" + (
                f" ({rewritten} in-place op(s) rewritten as their functional forms)" if rewritten else "")
        else:
            stage.detail = f"decomposed: {reason}"
        try:
            decomposed = exported if reason is None else decompose(exported, tuple(keep))
        except Exception as exc:  # noqa: BLE001
            swaps = storage_swaps(exported)
            for node in swaps:   # x.set_(y) on an input: DEC003 at the line, not torch's assertion
                ctx.emit(rules.STORAGE_SWAP_ON_INPUT, node=node, input=node.args[0].name)
            if not swaps:
                ctx.emit(rules.DECOMPOSITION_FAILED, error_type=type(exc).__name__, error=str(exc)[:500])
            _fail(errors.DecompositionError, "decomposition to core ATen failed", ctx, record)
        record.exported_program = decomposed
    with record.stage("translate") as stage:
        analyze_program(decomposed, ctx, inputs=input_leaves(model, args, kwargs))
        library_inputs, structure_outputs = io_names(decomposed, model, ctx)  # past_key_values.0.key, logits
        translated = translate_program(decomposed, registry, opset, ctx, input_names=input_names or library_inputs,
                                       output_names=output_names, structure_names=structure_outputs,
                                       dim_names=symbol_names(decomposed, wanted_names, input_names or library_inputs,
                                                              spelled),
                                       module_functions=module_functions)
        if translated is not None and target < opset:
            translated = convert_opset(translated, target, decomposed, ctx)
        if translated is None:
            stage.status = "failed"
            _fail(errors.TranslationError, f"{type(model).__name__} could not be translated to ONNX", ctx, record)
    with record.stage("optimize") as stage:
        if optimize:
            optimized = optimize_translated(translated, opset, ort_fusion=optimize == ORT_FUSION)
            stage.detail = optimized.summary()
            for (name, dtype), count in optimized.padding_masks.items():
                ctx.emit(rules.FULLY_MASKED_ROWS_AVERAGE, input=name, count=count, dtype=dtype,
                         lowest=f"{torch.finfo(getattr(torch, dtype)).min:.8g}")
            record.facts.update(nodes_translated=optimized.nodes_before)
        else:
            stage.status, stage.detail = "skipped", "optimize=False"
    program = ONNXProgram(translated, decomposed, ctx.diagnostics, record)
    with record.stage("check") as stage:
        _report_io(ctx, model, program, args, kwargs, input_names, output_names)
        if not require_outputs(ctx, translated.graph, decomposed):
            stage.status = "failed"
            _fail(errors.TranslationError, f"{type(model).__name__} returns no tensor to export", ctx, record)
        structure = _structure(program)   # weights as typed inputs: no copy of them (issue 11)
        try:
            onnx.checker.check_model(structure)
        except onnx.checker.ValidationError as exc:
            ctx.emit(rules.CHECKER_FAILED, error=str(exc)[:800])
            stage.status = "failed"
            _fail(errors.CheckerError, "the exported model is not valid ONNX", ctx, record)
        if check_type_constraints(ctx, _infer_shapes(ctx, structure)):
            stage.status = "failed"
            _fail(errors.CheckerError, "the exported model breaks ONNX operator type constraints", ctx, record)
        if ctx.errors:
            stage.status = "failed"
            _fail(errors.TranslationError, "the exported model does not match the requested inputs/outputs",
                  ctx, record)
    record.facts.update(nodes=len(translated.graph.node), initializers=len(translated.initializers),
                        weights_bytes=program.weights_size)
    return program


def _structure(program: ONNXProgram) -> onnx.ModelProto:
    """The graph with each initializer declared as a typed graph input instead: no weight bytes.

    What the checker and shape inference see, at every size: the embedded model would copy
    every weight into protobuf (and the checker serialises it once more) just to be checked.
    The checker validates the structure the same way; the weights' own bytes come from torch
    tensors of the declared dtype and shape, and the saved file is written from those.
    """
    model = assemble(program._translated, with_data=False)
    for name, tensor in program.initializers.items():
        model.graph.input.append(value_info(Value(name, tensor.dtype, tuple(tensor.shape))))
    return model


def _infer_shapes(ctx: DiagnosticContext, structure: onnx.ModelProto) -> onnx.ModelProto:
    """ONX002: ONNX's strict shape inference over the structure (cheap: no weights are copied).

    Returns the structure with the inferred types (lenient inference where strict fails), for ONX004.
    """
    try:
        return onnx.shape_inference.infer_shapes(structure, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        ctx.emit(rules.SHAPE_INFERENCE_FAILED, error=str(exc).strip()[:800])
    try:
        return onnx.shape_inference.infer_shapes(structure)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        return structure  # ONX004 then judges what is typed without inference (inputs, weights, outputs)


def _resolve_overload(target: Any) -> Any:
    """The OpOverload for a custom translation's key, to keep it out of decomposition."""
    if hasattr(target, "_schema"):
        return target
    if hasattr(target, "default") and hasattr(target, "_qualified_op_name"):
        return target.default
    if isinstance(target, str):
        key = target_key(target)
        namespace, _, rest = key.partition("::")
        name, _, overload = rest.partition(".")
        try:
            return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
        except (AttributeError, RuntimeError):
            return None
    return None


def _report_io(ctx: DiagnosticContext, model: torch.nn.Module, program: ONNXProgram, args: tuple, kwargs: dict,
               input_names: Sequence[str] | None, output_names: Sequence[str] | None) -> None:
    """Diagnostics about inputs and outputs: unused inputs, flattened/dropped outputs (baked scalars: _analysis)."""
    graph = program._translated.graph
    used = names_read(graph.node) | {o.name for o in graph.output}
    for value in graph.input:
        if value.name not in used:
            ctx.emit(rules.UNUSED_INPUT, input=value.name)
    for kind, names, values in (("input", input_names, graph.input), ("output", output_names, graph.output)):
        if names is not None and len(names) > len(values):
            ctx.emit(rules.NAMES_MISMATCH, kind=kind, names=list(names), given=len(names), actual=len(values))
        elif names and len(names) < len(values):  # torch.onnx names the first ones, in order
            ctx.emit(rules.NAMES_FOR_FIRST_VALUES, kind=kind, given=len(names), actual=len(values),
                     rest=", ".join(v.name for v in values[len(names):]))
    out_spec = getattr(program.exported_program.call_spec, "out_spec", None)
    user_outputs = [s for s in program.exported_program.graph_signature.output_specs if s.kind.name == "USER_OUTPUT"]
    paths = output_paths(out_spec, len(user_outputs))
    onnx_names = iter(o.name for o in graph.output)
    mapping = []
    for path, spec in zip(paths, user_outputs):
        if isinstance(spec.arg, gs.ConstantArgument) and spec.arg.value is None:
            ctx.emit(rules.NONE_OUTPUT_DROPPED, path=path or "output")
        elif isinstance(spec.arg, gs.ConstantArgument):   # a number the model returned, fixed at trace time
            ctx.emit(rules.PYTHON_OUTPUT_DROPPED, path=path or "output", value=repr(spec.arg.value))
        elif isinstance(spec.arg, gs.TensorArgument):
            mapping.append(f"{path or 'output'} -> {next(onnx_names, '?')}")
    if _has_dict(out_spec):
        ctx.emit(rules.OUTPUT_STRUCTURE_FLATTENED, structure=out_spec.type.__name__, count=len(graph.output),
                 names=", ".join(mapping))


def input_leaves(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(readable path, leaf) of every input leaf, named by forward()'s arguments: ``scale``, ``inputs['pair'][0]``."""
    import inspect

    bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    leaves: list[tuple[str, Any]] = []
    for name, arg in bound.items():
        for path, leaf in pytree.tree_flatten_with_path(arg)[0]:
            leaves.append((f"{name}{pytree.keystr(path)}", leaf))
    return leaves


def output_paths(out_spec: Any, count: int) -> list[str]:
    """Readable path of each flattened output (``['logits']``, ``[1]``), from the output TreeSpec."""
    if out_spec is None:
        return [f"[{i}]" for i in range(count)]
    try:
        tree = pytree.tree_unflatten(list(range(out_spec.num_leaves)), out_spec)
        flat = pytree.tree_flatten_with_path(tree)[0]
    except Exception:  # noqa: BLE001 - an unusual spec only costs readable names
        return [f"[{i}]" for i in range(count)]
    return [pytree.keystr(path) for path, _ in flat]


def _has_dict(spec: Any) -> bool:
    if spec is None:
        return False
    if spec.type is dict or (spec.type is not None and issubclass(spec.type, dict)):
        return True
    return any(_has_dict(child) for child in spec.children())
