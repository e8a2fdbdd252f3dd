"""The keyword arguments of ``torch.onnx.export``, given to ``onnxsight.export`` (issue 25).

A call written for torch.onnx should keep working when ``torch.onnx.export`` becomes
``onnxsight.export``. Each of torch.onnx's arguments that onnxsight does not share by name is
judged here, once, before any work:

- means the same here: accepted (``export_modules_as_functions`` is ``module_functions``, ``training=TRAINING``
  or ``PRESERVE`` is ``modes="train"``/``"preserve"`` (refused where batch norm would train),
  ``custom_translation_table`` is ``custom_translations`` with its ONNX Script functions run into the
  builder, ``training=TrainingMode.EVAL`` of a model in eval mode, ``export_params=True``);
- cannot change the result: ignored, with an ARG019 note (``dynamo=True``; ``optimize=`` is onnxsight's own keyword, the optimize stage);
- asks for what onnxsight does not do: refused with ARG018, naming what to write instead.

A keyword that neither exporter takes is ARG005 with the closest names, not a TypeError.
``verbose`` is onnxsight's own argument (the console shows torch's log), as torch.onnx means it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, caller_location

_NO_TORCHSCRIPT = "onnxsight has no TorchScript exporter: it always captures with torch.export"


@dataclass
class TorchOnnxOptions:
    """What the torch.onnx arguments amount to here: onnxsight arguments, notes."""

    core: dict[str, Any] = field(default_factory=dict)   # onnxsight.export arguments they stand for
    notes: list[Any] = field(default_factory=list)         # ARG019 diagnostics, for the program's list


def torch_onnx_options(model: Any, given: Mapping[str, Any], known: Iterable[str]) -> TorchOnnxOptions:
    """Judge each torch.onnx keyword in ``given``; raise InvalidArgumentError (ARG018/ARG005) on a refusal.

    ``known``: onnxsight.export's own parameters, offered for a keyword neither exporter takes.
    """
    ctx = DiagnosticContext(fallback_location=caller_location())
    options = TorchOnnxOptions()
    for argument, value in given.items():
        judge = _JUDGES.get(argument)
        if judge is None:
            close = difflib.get_close_matches(argument, [*known, *_JUDGES], n=3)
            ctx.emit(rules.INVALID_ARGUMENT, argument=argument,
                     error="export() has no such argument, nor does torch.onnx.export" +
                           (f"; did you mean {', '.join(close)}?" if close else ""))
            continue
        judge(ctx, options, model, value)
    if ctx.errors:
        from onnxsight.exporter import refuse_arguments

        refuse_arguments(model, ctx)
    options.notes = ctx.diagnostics
    return options


def _refuse(ctx: DiagnosticContext, argument: str, value: Any, reason: str, instead: str) -> None:
    ctx.emit(rules.TORCH_ONNX_ARGUMENT_REFUSED, argument=argument, value=_show(value), reason=reason,
             instead=instead)


def _ignore(ctx: DiagnosticContext, argument: str, value: Any, reason: str) -> None:
    ctx.emit(rules.TORCH_ONNX_ARGUMENT_IGNORED, argument=argument, value=_show(value), reason=reason)


def _show(value: Any) -> str:
    name = getattr(value, "name", None)
    if isinstance(name, str) and type(value).__name__ in ("TrainingMode", "OperatorExportTypes"):
        return f"{type(value).__name__}.{name}"
    if isinstance(value, Mapping) and not all(isinstance(v, (int, str)) for v in value.values()):
        return "{" + ", ".join(f"{key}: ..." for key in value) + "}"  # the ops, not the functions' reprs
    return repr(value)


def _dynamo(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if value is False:
        _refuse(ctx, "dynamo", value, "it asks for torch.onnx's TorchScript exporter, and " + _NO_TORCHSCRIPT,
                "drop dynamo=False (or keep torch.onnx.export for the TorchScript export)")
    else:
        _ignore(ctx, "dynamo", value, "onnxsight always captures with torch.export")


def _fallback(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if value:
        _refuse(ctx, "fallback", value, _NO_TORCHSCRIPT + " to fall back to (torch.onnx removed fallback in 2.11)",
                "drop fallback=True: a capture that fails is reported with its rule and your line")
    else:
        _ignore(ctx, "fallback", value, "onnxsight never falls back to another exporter")


def _profile(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if value:
        _refuse(ctx, "profile", value, "onnxsight does not run pyinstrument",
                "pass report=True: the report times each stage of the export")


def _dump_exported_program(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if value:
        _refuse(ctx, "dump_exported_program", value, "onnxsight does not write the ExportedProgram",
                "save it yourself: torch.export.save(program.exported_program, 'model.pt2')")


def _export_params(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if not value:
        _refuse(ctx, "export_params", value, "onnxsight always writes the weights into the file it saves",
                "pass external_data=True and leave the .data file out where you want the graph alone, "
                "or export under onnxsight.fake_mode() to export without real weights")


def _keep_initializers(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if value:
        _refuse(ctx, "keep_initializers_as_inputs", value,
                "onnxsight writes weights as initializers only, as ONNX IR 4 and later read them",
                "make a weight you want to feed at run time an argument of forward()")


def _custom_translation_table(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    """ONNX Script translations, run into onnxsight's builder (``translate/_onnxscript.py``)."""
    if not value:
        return
    if not isinstance(value, Mapping):
        ctx.emit(rules.INVALID_ARGUMENT, argument="custom_translation_table",
                 error=f"expected a dict {{op: ONNX Script function}}, got {type(value).__name__}")
        return
    from onnxsight.exporter import onnxscript_translation

    table = {}
    for target, fn in value.items():
        if isinstance(fn, (list, tuple)) and len(fn) == 1:
            fn = fn[0]
        if not callable(fn):
            _refuse(ctx, "custom_translation_table", value, f"the entry for {target} is not one function "
                    "(torch.onnx's lists of overloads chosen by dtype are not supported)",
                    "give one ONNX Script function per op, or custom_translations= with onnxsight's GraphBuilder")
            return
        table[target] = onnxscript_translation(fn)
    options.core["custom_translations"] = table


def _training(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    import torch

    from onnxsight.exporter import training_dependent

    mode = getattr(value, "name", str(value)).upper()
    if not isinstance(model, torch.nn.Module):   # an ExportedProgram: its modes are in its graph
        if mode == "TRAINING":
            _refuse(ctx, "training", value, f"a {type(model).__name__} has no training mode to export",
                    "drop the argument")
        return
    if mode == "EVAL" or (mode == "PRESERVE" and not any(module.training for module in model.modules())):
        return  # what onnxsight exports: eval semantics, the model's own modes left as they are (CAP015 says so)
    refused = training_dependent(model, in_any_mode=mode == "TRAINING", exported=False)
    if refused:
        _refuse(ctx, "training", value, f"{', '.join(refused)} would run in training mode, which onnxsight does "
                "not export (batch norm's batch statistics and running-statistics updates, a recurrent layer's "
                "dropout between layers); dropout and attention dropout it exports drawing",
                "call model.eval() before export and drop the argument")
        return
    options.core["modes"] = "train" if mode == "TRAINING" else "preserve"


def _operator_export_type(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if getattr(value, "name", value) != "ONNX":
        _refuse(ctx, "operator_export_type", value, "onnxsight exports standard ONNX operators only",
                "give each op without an ONNX form a translation in custom_translations=")


def _do_constant_folding(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    _ignore(ctx, "do_constant_folding", value, "torch.onnx deprecated it; folding constants changes the graph's "
            "form, never its outputs")


def _custom_opsets(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    if value:
        _refuse(ctx, "custom_opsets", value, "the opset of a custom domain is declared by the translation that "
                "emits its ops", "pass custom_translations= whose functions emit the custom domain's ops")


def _export_modules_as_functions(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any,
                                 value: Any) -> None:
    options.core["module_functions"] = value  # the same request, under onnxsight's name


def _autograd_inlining(ctx: DiagnosticContext, options: TorchOnnxOptions, model: Any, value: Any) -> None:
    _ignore(ctx, "autograd_inlining", value, "it configures the TorchScript exporter's tracing; " + _NO_TORCHSCRIPT)


_JUDGES: dict[str, Callable[[DiagnosticContext, TorchOnnxOptions, Any, Any], None]] = {
    "dynamo": _dynamo, "fallback": _fallback, "profile": _profile,
    "dump_exported_program": _dump_exported_program, "export_params": _export_params,
    "keep_initializers_as_inputs": _keep_initializers, "custom_translation_table": _custom_translation_table,
    "training": _training, "operator_export_type": _operator_export_type,
    "do_constant_folding": _do_constant_folding, "custom_opsets": _custom_opsets,
    "export_modules_as_functions": _export_modules_as_functions, "autograd_inlining": _autograd_inlining,
}
