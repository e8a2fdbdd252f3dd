"""The first real divergence of a generation, compared per node: that step replayed through the one-call
engine (:func:`onnxsight.verify`) with PyTorch's own cache fed to both sides.

The engine names the first value that diverges and the user's line (GEN001 is located there). When
every value agrees, the ONNX model computes what the exported program computes on this step's inputs;
the exported program is then run itself against the eager model's output of the step: a difference
there is the capture's (GEN008, a branch specialised on the export's example), none means the
difference built up in the cache ONNX Runtime returned over the earlier steps.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, module_path, node_location
from onnxsight.verification._generation_sides import StepModel
from onnxsight.verification._inputs import sizes_outside_ranges
from onnxsight.verification._metrics import compare, to_numpy
from onnxsight.verification._runners import VerificationError
from onnxsight.verification._tolerance import Tolerance


def call_of(program: Any, feeds: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The (args, kwargs) of ``program``'s forward() whose tensors are ``feeds`` (by ONNX input name): the
    example inputs' structure (a transformers cache rebuilt around the tensors, Python values kept)."""
    import torch
    from torch.export._tree_utils import reorder_kwargs
    from torch.utils import _pytree as pytree

    from onnxsight.exporter import library_pytrees

    example = program.exported_program.example_inputs
    if example is None:
        raise LookupError("the program kept no example inputs to take the structure of its call from")
    args, kwargs = example
    in_spec = getattr(getattr(program.exported_program, "call_spec", None), "in_spec", None)
    kwargs = reorder_kwargs(dict(kwargs or {}), in_spec) if kwargs and in_spec is not None else dict(kwargs or {})
    tensors = iter([torch.as_tensor(feeds[name]) for name in program.input_names])
    with library_pytrees():
        leaves, spec = pytree.tree_flatten((tuple(args), kwargs))
        leaves = [next(tensors) if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        return pytree.tree_unflatten(leaves, spec)


def compare_per_node(model: StepModel, feeds: Mapping[str, Any], eager: Any, first: Mapping[str, Any], result: Any,
                     ctx: DiagnosticContext, *, providers: Sequence[str], tolerance: Tolerance,
                     logits: str | None) -> Any:
    """Compare the diverging step per node; emit GEN001 (or GEN008) and return the VerificationResult."""
    from onnxsight.verification._api import verify

    step, what = first["step"], describe(first, result)
    phase = first["phase"]
    if model.program is None:
        _unavailable(ctx, step, phase, what, model.which,
                     "the program was given as an ONNX file or model without its ONNXProgram")
        return None
    try:
        args, kwargs = call_of(model.program, feeds)
        with sizes_outside_ranges():  # ONNX Runtime ran the step: a range the export narrowed is said after
            verification = verify(model.program, args, kwargs, providers=providers, tolerance=tolerance,
                                  onnx_model=model.model if model.replaced else None)
            if verification.info.get("error"):
                # NOTE: ONNX Runtime failed running the step (a node fed a wrongly shaped value): in isolated
                # mode each node is fed PyTorch's inputs, so the failing reader runs and the value that is
                # wrong is compared.
                verification = verify(model.program, args, kwargs, providers=providers, tolerance=tolerance,
                                      onnx_model=model.model if model.replaced else None, mode="isolated")
    except VerificationError as exc:
        if exc.rule == rules.VERIFY_INPUT_SHAPE.code:  # a static axis of another size: the export's example
            _outside_export(ctx, step, phase, what, model.which, _message(exc))
        else:
            _unavailable(ctx, step, phase, what, model.which, f"{type(exc).__name__}: {exc}"[:400])
        return None
    except Exception as exc:  # noqa: BLE001 - the step's divergence stands; why it has no node is said
        _unavailable(ctx, step, phase, what, model.which, f"{type(exc).__name__}: {exc}"[:400])
        return None
    roots = verification.root_causes
    if len(roots):
        row = roots.iloc[0]
        node = next((n for n in model.program.exported_program.graph.nodes if n.name == row["fx_node"]), None)
        stack = node_location(node)[1] if node is not None else ()
        location = _line_of(row, stack)
        where = f", at {location}" if location is not None else ""
        detail = "its shape differs" if row.get("shape_mismatch") else f"max abs diff {row['max_abs_diff']:.3g}"
        isolated = verification.info.get("mode") == "isolated"
        how = " in isolated mode (each node fed PyTorch's inputs)" if isolated else ""
        cause = (f"the per-node comparison of that step{how}, fed PyTorch's cache, names {row['value']} "
                 f"({row['target']} -> {row['onnx_op']}) as the first value to diverge ({detail}){where}")
        ctx.emit(rules.GENERATION_DIVERGED, location=location, stack=stack,
                 module=module_path(node) if node is not None else None,
                 step=step, phase=phase, what=what, cause=cause,
                 properties={"step": step, "program": model.which, "onnx_value": row["value"],
                             "onnx_node": row.get("onnx_op"), "fx_node": row.get("fx_node")})
    elif verification.info.get("error") or not verification.passed:
        ctx.emit(rules.GENERATION_DIVERGED, step=step, phase=phase, what=what,
                 cause=f"the per-node comparison of that step fails without a single first value "
                       f"({verification.info.get('error') or 'see result.verification'})",
                 properties={"step": step, "program": model.which})
    else:
        _capture_or_drift(model, feeds, eager, step, phase, what, ctx, tolerance, logits)
    return verification


def _line_of(row: Any, stack: Sequence[Any]) -> Any:
    """The line of the root cause: the user's (the row's ``file``/``line``), else the innermost frame of the
    model library whose code made it (a transformers model's modeling file: the model's own line)."""
    from onnxsight.diagnostics import Location

    file, line = row.get("file"), row.get("line")
    if isinstance(file, str) and line is not None and line == line:
        return Location(file=file, line=int(line))
    roots = _model_libraries()
    for frame in reversed(stack):
        if frame.file.startswith(roots):
            return frame
    return None


def _model_libraries() -> tuple[str, ...]:
    """The folders of the model libraries loaded (transformers, timm, torchvision): their code is the model's."""
    import os
    import sys

    roots = []
    for name in ("transformers", "timm", "torchvision", "diffusers"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            roots.append(os.path.dirname(os.path.abspath(module.__file__)) + os.sep)
    return tuple(roots) or ("\0",)


def describe(first: Mapping[str, Any], result: Any) -> str:
    """What differs at the first divergence, in words."""
    if first["kind"] == "encoder":
        encoder = result.encoder or {}
        if encoder.get("error"):
            return f"ONNX Runtime failed running the encoder: {encoder['error']}"
        return f"the encoder's {encoder.get('output')} differs by {_diff(encoder.get('max_abs_diff'))}"
    row = result.steps[result.steps["step"] == first["step"]].iloc[0]
    if first["kind"] == "error":
        return f"ONNX Runtime failed: {row['error']}"
    if first["kind"] == "cache":
        return f"{row['worst_cache']} differs by {_diff(row['max_cache_diff'])}"
    if first["kind"] == "logits":
        return f"the logits differ by {_diff(row['max_logit_diff'])}"
    return (f"ONNX Runtime picks tokens {row['onnx_tokens']} where PyTorch picks {row['torch_tokens']}, "
            f"and PyTorch's margin {row['margin']:.3g} is no near-tie")


def _diff(value: Any) -> str:
    return "its shape" if value is None or value == float("inf") else f"{float(value):.3g}"


def _unavailable(ctx: DiagnosticContext, step: int, phase: str, what: str, which: str, reason: str) -> None:
    ctx.emit(rules.GENERATION_PER_NODE_UNAVAILABLE, step=step, program=which, reason=reason,
             properties={"step": step, "program": which})
    ctx.emit(rules.GENERATION_DIVERGED, step=step, phase=phase, what=what,
             cause="no per-node comparison of that step ran (GEN009)", properties={"step": step, "program": which})


def _outside_export(ctx: DiagnosticContext, step: int, phase: str, what: str, which: str, detail: str) -> None:
    ctx.emit(rules.GENERATION_STEP_OUTSIDE_EXPORT, step=step, phase=phase, program=which, detail=detail, what=what,
             properties={"step": step, "program": which})


def _message(exc: VerificationError) -> str:
    """The refusal's message without its ``CODE [name]`` prefix."""
    return exc.diagnostics[0].message if exc.diagnostics else str(exc)


def _capture_or_drift(model: StepModel, feeds: Mapping[str, Any], eager: Any, step: int, phase: str, what: str,
                      ctx: DiagnosticContext, tolerance: Tolerance, output: str | None) -> None:
    """Every value agrees on PyTorch's inputs: the exported program against the eager model (GEN008), or the
    difference comes from ONNX Runtime's own cache of the earlier steps (GEN001 says so)."""
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.exporter import library_pytrees

    program = model.program
    name = output if output in program.output_names else program.output_names[0]
    args, kwargs = call_of(program, feeds)
    try:
        with torch.no_grad(), library_pytrees():
            leaves = [leaf for leaf in pytree.tree_leaves(program.exported_program.module()(*args, **kwargs))
                      if isinstance(leaf, torch.Tensor)]
    except Exception as exc:  # noqa: BLE001 - a guard of torch.export that fails on this step's sizes
        guard = isinstance(exc, AssertionError) and str(exc).startswith("Guard failed")
        detail = str(exc) if guard else f"{type(exc).__name__}: {exc}"
        _outside_export(ctx, step, phase, what, model.which, detail[:400])
        return
    captured = leaves[program.output_names.index(name)]
    metrics = compare(to_numpy(eager), to_numpy(captured), tolerance.for_value(name, captured.dtype))
    if not metrics.passed:
        detail = f"{name} differs by {_diff(float('inf') if metrics.shape_mismatch else metrics.max_abs_diff)}"
        ctx.emit(rules.GENERATION_CAPTURE_DIFFERS, step=step, detail=detail,
                 properties={"step": step, "program": model.which})
        return
    ctx.emit(rules.GENERATION_DIVERGED, step=step, phase=phase, what=what,
             cause="fed PyTorch's cache, the step agrees value by value: the difference built up in the cache "
                   "ONNX Runtime returned over the earlier steps, each within tolerance",
             properties={"step": step, "program": model.which})
