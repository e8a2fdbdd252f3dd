"""onnxsight.verify: compare an exported program with ONNX Runtime, per node."""

from __future__ import annotations

import os
import re
import time
from typing import Any, Mapping, Sequence

import onnx

from onnxsight.diagnostics import DiagnosticContext
from onnxsight.verification._diagnose import emit_diagnostics
from onnxsight.verification._fused import Fusions, replaced_nodes
from onnxsight.verification._checks import MODES, check_model_inputs, check_options, check_program
from onnxsight.verification._deployed import check_deployed
from onnxsight.verification._coverage import NOT_REACHED, emit_coverage, frame, summary
from onnxsight.verification._float_model import feeds_for, layer_errors
from onnxsight.verification._engine import EngineConfig, EngineOutput, Plan, plan_values, run_engine
from onnxsight.verification._graph import GraphIndex
from onnxsight.verification._inputs import bind_sizes, flat_user_inputs
from onnxsight.verification._inputs import user_inputs as checked_inputs
from onnxsight.verification._metrics import real_view, to_numpy
from onnxsight.verification._reduce import reduce_repros
from onnxsight.verification._reference import make_reference
from onnxsight.verification._result import VerificationResult
from onnxsight.verification._runners import OrtRunner, TorchRunner, VerificationError
from onnxsight.verification._sizes import dim_names, named, other_sizes as other_size_plans, resize_inputs
from onnxsight.verification._tolerance import Tolerance
from onnxsight.verification._weights import model_and_weights

# NOTE: values waiting for comparison (each held once by PyTorch and once by ONNX Runtime)
# are flushed to one ONNX Runtime session when they reach this many bytes.
DEFAULT_MEMORY_BUDGET = 256 * 1024**2
DEFAULT_MAX_REPROS = 8


def verify(prog: Any, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, *,
           per_node: bool = True, mode: str = "propagated",
           providers: Sequence[str] = ("CPUExecutionProvider",), tolerance: Tolerance | None = None,
           onnx_model: onnx.ModelProto | str | os.PathLike | None = None,
           random_inputs: bool = False, seed: int = 0, dim_sizes: Mapping[str, int] | None = None,
           memory_budget: int = DEFAULT_MEMORY_BUDGET, provider_fallback: bool = False,
           torch_device: str = "cpu", max_repros: int = DEFAULT_MAX_REPROS,
           reference: str | None = None, repro_dir: str | os.PathLike | None = None,
           other_sizes: bool = False, float_model: Any = None, session_options: Any = None) -> VerificationResult:
    """Compare ``prog`` (an :class:`onnxsight.ONNXProgram`) with PyTorch, value by value.

    ``args``/``kwargs`` default to the example inputs; ``random_inputs=True`` draws seeded
    random inputs from the input specs instead (dynamic dims at other sizes, or ``dim_sizes``).
    ``mode="isolated"`` feeds every ONNX node group PyTorch's own inputs. ``onnx_model``
    verifies another model (an optimised copy, say) against the same program, pairing values
    by name where they survive. ``reference="float64"`` also runs PyTorch in float64 and
    judges each value within ``max(tolerance, k * PyTorch's own rounding error)`` (see
    ``_reference.py``), so accumulated rounding is not a root cause. Each root cause's repro is
    reduced to the smallest subgraph that still diverges; ``repro_dir`` writes the first one's
    bundle there when verification fails (``result.repro_dir``). An unavailable provider raises
    :class:`~onnxsight.verification.VerificationError` (ORT003) unless
    ``provider_fallback=True``, which records ORT004 and runs on what is available.

    Inputs are checked against the program before any work (a static axis of another size, a
    dynamic one outside its range, another dtype or arity: :class:`VerificationError` with a VER
    rule). ``other_sizes=True`` also runs at other sizes of every dynamic dim (the example's + 1,
    and 1 where the range allows), so a dim the graph silently specialised fails with ACC010;
    ``result.sizes_checked`` lists the sizes. ``result.coverage`` says which values were compared
    and why each of the others was not.

    Weights are held once: when embedding them in every chunk session would not fit
    ``memory_budget`` (or they pass 2 GB), all chunk sessions are fed one copy, the program's own
    tensors or an ``onnx_model`` file's external data mapped in place (VER016/VER017 when that
    file is missing or short), so a model above 2 GB verifies in about its own size of memory.

    The whole model also runs once in one session as it will be deployed (``session_options``, an
    ``onnxruntime.SessionOptions``; default ONNX Runtime's own, every graph optimisation), and every
    graph output is compared with PyTorch: the chunked per-node run cannot see the fusions such a
    session makes (Q/DQ into integer kernels), so an output that differs only there fails with ACC013,
    in quantization steps, naming the fused kernels (``result.info["deployed"]``, ``_deployed.py``).

    ``float_model``: for a quantized program, the float model it was quantized from; every layer's
    output in the ONNX model is also compared with the float model's (``_float_model.py``), worst
    SQNR first, in ``result.quantization_layers`` (and ``result.info["quantization_layers"]``).
    """
    start = time.perf_counter()
    check_program(prog)
    check_options(mode=mode, providers=providers, tolerance=tolerance, torch_device=torch_device,
                  memory_budget=memory_budget, max_repros=max_repros, per_node=per_node,
                  random_inputs=random_inputs, other_sizes=other_sizes, onnx_model=onnx_model)
    ctx = DiagnosticContext()
    tolerance = (tolerance or Tolerance()).for_outputs(list(prog.output_names))
    model, weights = model_and_weights(prog if onnx_model is None else onnx_model, memory_budget=memory_budget)
    index = GraphIndex.build(model, weights)
    check_model_inputs(prog, index.graph_inputs)
    if random_inputs:
        user_inputs = flat_user_inputs(prog, args, kwargs, random=True, seed=seed, dim_sizes=dim_sizes)
        sizes = bind_sizes(prog, user_inputs, device=torch_device)
    else:
        user_inputs, sizes = checked_inputs(prog, args, kwargs, device=torch_device)
    config = EngineConfig(mode=mode, tolerance=tolerance, memory_budget=memory_budget, max_repros=max_repros,
                          fused_op=None if onnx_model is None else Fusions(prog, index).op)
    run = _Run(prog, index, providers, provider_fallback, torch_device, per_node, config, reference)
    out, plan, feeds, torch_name, used = run(user_inputs, ctx)
    pairs = plan.pairs
    if out.repros and out.error is None:  # the smallest subgraph that still diverges, per root cause
        out.repros.update(reduce_repros(prog, index, pairs, list(out.repros), user_inputs, feeds, tolerance,
                                        used, device=torch_device))
    fused = {} if onnx_model is None else replaced_nodes(prog, index, [r["value"] for r in out.rows
                                                                       if r["root_cause"]])
    emit_diagnostics(out.rows, out.nodes, index.graph_outputs, ctx, borderline=out.borderline, amplified=out.amplified,
                     rounding=out.rounding, fused=fused)
    deployed = None if out.error else check_deployed(model, weights, feeds, out, used, session_options, tolerance,
                                                     ctx, fed=[p.value for p in plan.fed], memory_budget=memory_budget)
    coverage = _coverage(plan, out, index, ctx)
    names = dim_names(prog)
    sizes_checked, skipped, rounding = [named(sizes, names)], [], []
    if other_sizes:
        sizes_checked += _check_other_sizes(run, user_inputs, sizes, names, ctx, skipped, rounding)
    info = {"mode": mode, "per_node": per_node, "reference": torch_name, "providers": used,
            "requested_providers": list(providers), "compared": len(out.rows), "paired": len(pairs),
            "sessions": out.sessions, "noise_floor": reference, "chunks": out.chunks, "error": out.error,
            "inputs": "random" if random_inputs else "example", "seed": seed,
            "tolerance": tolerance.to_dict(), "coverage": summary(coverage), "sizes_checked": sizes_checked,
            "sizes_skipped": skipped, "sizes_within_noise_floor": rounding,
            "deployed": deployed, "seconds": time.perf_counter() - start}
    if float_model is not None:
        call = (tuple(user_inputs), {}) if args is None and not kwargs or random_inputs else (
            tuple(args) if isinstance(args, (tuple, list)) else (args,), dict(kwargs or {}))
        info["quantization_layers"] = layer_errors(prog, float_model, call, index,
                                                   feeds_for(prog, index, user_inputs), used)
    result = VerificationResult(out.rows, index.graph_outputs, ctx.diagnostics, repros=out.repros, info=info,
                                graph_name=model.graph.name, coverage=coverage, sizes_checked=sizes_checked)
    if repro_dir is not None and result.repros and not result.passed:
        result.write_repro(repro_dir)
        result.repro_dir = result.info["repro_dir"] = os.fspath(repro_dir)
    return result


class _Run:
    """One pass of the engine over the program with given inputs (the example's, or another size's)."""

    def __init__(self, prog: Any, index: GraphIndex, providers: Sequence[str], fallback: bool, device: str,
                 per_node: bool, config: EngineConfig, reference: str | None) -> None:
        self.prog, self.index, self.providers, self.fallback = prog, index, providers, fallback
        self.device, self.config, self.reference = device, config, reference
        graph = prog.exported_program.graph
        self.plan = plan_values(graph, prog.value_names, index, per_node=per_node,
                                signature=prog.exported_program.graph_signature)
        by_name = set(index.graph_inputs) == set(prog.input_names)
        self.input_names = prog.input_names if by_name else index.graph_inputs

    def __call__(self, user_inputs: Sequence[Any], ctx: DiagnosticContext, *, max_repros: int | None = None,
                 reference: str | None = None) -> tuple[EngineOutput, Plan, dict[str, Any], str, list[str]]:
        # complex inputs are fed as the graph takes them: real pairs [..., 2] (IO007)
        feeds = {name: real_view(to_numpy(t)) for name, t in zip(self.input_names, user_inputs)}
        torch_runner = TorchRunner(self.prog.exported_program, device=self.device)
        noise_floor = make_reference(reference or self.reference, torch_runner)
        torch_runner = noise_floor or torch_runner
        ort_runner = OrtRunner(self.providers, ctx=ctx, fallback=self.fallback)
        ort_runner.activate()
        torch_runner.activate()
        config = EngineConfig(mode=self.config.mode, tolerance=self.config.tolerance,
                              memory_budget=self.config.memory_budget,
                              max_repros=self.config.max_repros if max_repros is None else max_repros,
                              reference=noise_floor, fused_op=self.config.fused_op)
        try:
            out = run_engine(torch_runner, ort_runner, self.index, self.plan.pairs, user_inputs, feeds, config, ctx,
                             fed=self.plan.fed)
        finally:
            torch_runner.deactivate()
            ort_runner.deactivate()
        return out, self.plan, feeds, torch_runner.name, list(ort_runner.providers)


def _coverage(plan: Plan, out: EngineOutput, index: GraphIndex, ctx: DiagnosticContext) -> Any:
    """The coverage table of one run, with ACC009 for values that had to be compared, and ACC008."""
    compared = {row["value"] for row in out.rows}
    unreached = {p.value: NOT_REACHED for p in plan.pairs if out.error and p.value not in compared}
    table = frame(plan.entries, compared, {**unreached, **out.other_layout})
    emit_coverage(table, index.graph_outputs, compared, ctx, {e.value: e.node for e in plan.entries})
    return table


def _check_other_sizes(run: _Run, user_inputs: Sequence[Any], sizes: Mapping[Any, int], names: Mapping[Any, str],
                       ctx: DiagnosticContext, skipped: list[dict[str, Any]],
                       rounding: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Run at other sizes of every dynamic dim; ACC010 names a dim whose other size fails.

    A size PyTorch itself cannot run is not the ONNX model's fault: it goes to ``skipped`` with the error.
    A size whose only failures are value (and shape) differences is judged again against the float64
    noise floor before it is blamed on the dim: kernels pick other algorithms at other sizes (a batch of 2
    is a GEMM where a batch of 1 was a GEMV), so a deep model's float32 rounding moves with the size
    while a specialised dim still fails there (a wrong shape, a wrong value, a run that breaks).
    Such a size goes to ``rounding`` with the difference that was forgiven. So does a size whose only
    failures are graph outputs that differ because of a borderline decision (ACC011: a box corner within
    rounding of an integer, cast to int, pastes a mask one pixel over), with those decisions.
    """
    from onnxsight import rules

    checked: list[dict[str, int]] = []
    padding_masks = {d.fields.get("input") for d in getattr(run.prog, "diagnostics", ())
                     if d.code == rules.FULLY_MASKED_ROWS_AVERAGE.code}
    for symbol, other in other_size_plans(run.prog, sizes):
        inputs = resize_inputs(run.prog, user_inputs, other, padding_masks)
        sub = DiagnosticContext()
        try:
            out, _, _, _, _ = run(inputs, sub, max_repros=0)
        except VerificationError:
            raise
        except Exception as exc:  # noqa: BLE001 - PyTorch itself rejects this size: not the ONNX model's fault
            skipped.append({"sizes": named(other, names), "reason": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        checked.append(named(other, names))
        detail = _failure(out)
        forgiven = out if detail is not None and _borderline_only(out) else None
        if detail is not None and forgiven is None and _ran_and_kept_dtypes(out) and run.reference is None:
            floor = _against_float64(run, inputs)
            if floor is not None and (_failure(floor) is None or _borderline_only(floor)):
                forgiven = floor
        if forgiven is not None:
            entry = {"sizes": named(other, names), "float32": detail}
            rounding.append({**entry, "decisions": dict(forgiven.borderline)} if forgiven.borderline else entry)
            detail = None
        if detail is not None:
            node, location, stack = _failure_site(out, run.index)
            ctx.emit(rules.DIM_SPECIALISED, node=node, location=location, stack=stack,
                     dim=names.get(symbol, str(symbol)), size=other[symbol], example=sizes[symbol], detail=detail,
                     properties={"sizes": named(other, names), "example_sizes": named(sizes, names)})
    return checked


def _failing(out: EngineOutput) -> list[dict[str, Any]]:
    """The rows of a run that failed: out of tolerance, or another dtype (ACC005). A value that differs
    only because of a borderline threshold decision (ACC011) does not fail a run unless it is a graph output."""
    return [row for row in out.rows if row.get("dtype_mismatch") or (
        not row["passed"] and not (row.get("borderline") and row["value"] not in out.outputs))]


def _ran_and_kept_dtypes(out: EngineOutput) -> bool:
    """The run broke nothing but values and shapes: no runtime error, no dtype disagreement. Shapes are
    left to the float64 run to judge: a value off by rounding before an nms changes the number of boxes
    after it, while a specialised dim's wrong shape stays wrong against float64 too."""
    failing = _failing(out)
    return not out.error and bool(failing) and not any(row.get("dtype_mismatch") for row in failing)


def _borderline_only(out: EngineOutput) -> bool:
    """The run's only failures are graph outputs that differ because of borderline decisions (ACC011):
    float32 rounding at a threshold or an integer boundary, which says nothing about the dim."""
    failing = _failing(out)
    return not out.error and bool(failing) and all(
        row.get("borderline") and not row.get("dtype_mismatch") for row in failing)


def _against_float64(run: _Run, inputs: Sequence[Any]) -> EngineOutput | None:
    """The same run judged against PyTorch's own float32 error (``reference="float64"``).

    None for a model the float64 twin cannot run (an op without a float64 kernel): its failure stands.
    """
    try:
        out, _, _, _, _ = run(inputs, DiagnosticContext(), max_repros=0, reference="float64")
    except Exception:  # noqa: BLE001 - no float64 verdict: the float32 failure stands
        return None
    return out


_ORT_NODE = re.compile(r"running (\w+) node\. Name:'([^']*)'")


def _failure_site(out: EngineOutput, index: GraphIndex) -> tuple[Any, Any, tuple[Any, ...]]:
    """Where a run at another size failed: the root cause's FX node, or the user's line of the ONNX
    node ONNX Runtime named (from its stack-trace metadata)."""
    from onnxsight.diagnostics import parse_stack_trace, user_frame

    failing = _failing(out)
    if failing:
        row = next((r for r in failing if r["root_cause"]), failing[0])
        return out.nodes.get(row["value"]), None, ()
    match = _ORT_NODE.search(out.error or "")
    node = next((n for n in index.nodes if match and n.name == match.group(2)), None)
    meta = {p.key: p.value for p in node.metadata_props} if node is not None else {}
    stack = parse_stack_trace(meta.get("pkg.torch.onnx.stack_trace"))
    return None, user_frame(stack), stack


def _failure(out: EngineOutput) -> str | None:
    """What went wrong in a run at another size, in one line; None when it passed."""
    if out.error:
        return f"ONNX Runtime failed: {out.error}"
    failing = _failing(out)
    if not failing:
        return None
    row = next((r for r in failing if r["root_cause"]), failing[0])
    what = (f"shape {list(row['onnx_shape'])} instead of {list(row['shape'])}" if row.get("shape_mismatch")
            else f"max abs diff {row['max_abs_diff']:.3g}")
    return f"{row['value']} ({row['target']} -> {row['onnx_op']}) is the first value to diverge: {what}"
