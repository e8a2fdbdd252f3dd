"""The deployed session: the whole model in one ONNX Runtime session, with the options it is deployed with.

The per-node engine runs the graph in chunks, every compared value an output of its chunk, and ONNX
Runtime fuses nothing across a graph output: a QuantizeLinear/DequantizeLinear pair around a MatMul
stays a pair in every chunk, while the session a user deploys (ONNX Runtime's default: every graph
optimisation) fuses it into an integer kernel (``MatMulNBits``, ``QLinearMatMul``, ``MatMulInteger``,
``QLinearConv``, ``DynamicQuantizeLinear``...) that rounds differently. So ``verify()`` also runs the
whole model once, as deployed, and compares every graph output with PyTorch: an output out of
tolerance there, while the per-node run matched, is ACC013, with the difference in steps of the
output's quantization grid and the kernels the optimised session runs that the model does not have.
The cost is one more session and one run.

NOTE: a model whose weights exceed ``memory_budget`` is not run whole: the engine holds its weights
once (``_weights.py``), and a session of the whole model would hold another copy of them;
``info["deployed"]`` says so with the reason.
"""

from __future__ import annotations

import collections
import os
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.verification._chunks import OrtFailure
from onnxsight.verification._engine import EngineOutput, report_ort_error
from onnxsight.verification._metrics import compare
from onnxsight.verification._runners import OrtRunner, VerificationError, with_provider_options
from onnxsight.verification._tolerance import Tolerance, dtype_name

_QDQ = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
# ONNX Runtime's integer kernels (contrib and standard) that its QDQ fusions produce
_INTEGER = ("QLinear", "QGemm", "QAttention", "QOrdered", "DynamicQuantize", "MatMulNBits", "MatMulInteger",
            "ConvInteger")


def check_deployed(model: onnx.ModelProto, weights: Any, feeds: Mapping[str, np.ndarray], out: EngineOutput,
                   providers: Sequence[str], session_options: Any, tolerance: Tolerance,
                   ctx: DiagnosticContext, *, fed: Sequence[str] = (), memory_budget: int | None = None
                   ) -> dict[str, Any]:
    """Run ``model`` whole in one session and compare its graph outputs with PyTorch's (``out.output_values``).

    ``fed``: values the per-node run took from PyTorch (random draws, tie orders); a whole-model run draws
    its own, so its outputs cannot be compared. Returns what ``info["deployed"]`` records: the session, and
    per output the differences (absolute and in steps) of the deployed and the per-node run.
    """
    level = _level_name(session_options)
    record: dict[str, Any] = {"compared": False, "optimization_level": level, "providers": list(providers)}
    total = weights.total if weights is not None else 0
    if memory_budget is not None and total > memory_budget:
        record["reason"] = (f"the weights ({total / 2**20:.0f} MiB) exceed memory_budget "
                            f"({memory_budget / 2**20:.0f} MiB): a session of the whole model would hold "
                            "another copy of them")
        return record
    if fed:
        record["reason"] = (f"{', '.join(fed[:4])}{' ...' if len(fed) > 4 else ''}: values the per-node run feeds "
                            "from PyTorch (random draws, tie orders), which a whole-model run computes its own way")
        return record
    full = _with_weights(model, weights)
    runner = OrtRunner(providers, ctx=ctx, session_options=session_options)
    runner.activate()
    try:
        try:
            runner.load(full)
        except VerificationError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported as ORT001
            record["reason"] = "the deployed session failed: " + report_ort_error(OrtFailure("session", exc),
                                                                                  runner, ctx)
            return record
        try:
            results = runner.infer(feeds)
        except Exception as exc:  # noqa: BLE001 - reported as ORT002
            record["reason"] = "the deployed session failed: " + report_ort_error(OrtFailure("run", exc), runner, ctx)
            return record
        types = dict(runner.output_types)
    finally:
        runner.deactivate()
    record["compared"] = True
    record["outputs"] = rows = []
    failed = []
    for output, (expected, per_node) in out.output_values.items():
        actual = results.get(output)
        if actual is None:
            continue
        expected_dtype, actual_dtype = dtype_name(expected.dtype), types.get(output, dtype_name(actual.dtype))
        bounds = tolerance.loosest(output, expected_dtype, actual_dtype)
        metrics = compare(expected, actual, bounds, expected_dtype=expected_dtype, actual_dtype=actual_dtype)
        step, grid = out.output_steps.get(output, (None, None))
        row = {"output": output, "passed": metrics.passed, "max_abs_diff": metrics.max_abs_diff,
               "max_diff_steps": _in_steps(metrics.max_abs_diff, step), "step": step, "grid": grid,
               "per_node_max_abs_diff": _max_abs(expected, per_node)}
        rows.append(row)
        if not metrics.passed and compare(expected, per_node, bounds, expected_dtype=expected_dtype,
                                          actual_dtype=actual_dtype).passed:  # else ACC001 says it already
            failed.append((row, expected, actual, bounds))
    if failed:
        _judge(failed, full, feeds, out, providers, session_options, record, tolerance, ctx)
    return record


def _judge(failed: Sequence[tuple[dict, np.ndarray, np.ndarray, Any]], model: onnx.ModelProto,
           feeds: Mapping[str, np.ndarray], out: EngineOutput, providers: Sequence[str], session_options: Any,
           record: dict[str, Any], tolerance: Tolerance, ctx: DiagnosticContext) -> None:
    """ACC013 for each output the deployed session gets wrong, judged against the same graph run whole unoptimised.

    Where the unoptimised graph gives what the deployed session gives, the optimisations changed nothing
    and the per-node run has judged the graph: a quantize node that rounds a half step the other way
    (ACC012) moves the outputs after it in any whole-model run, while the per-node run goes on from
    PyTorch's integers; in isolated mode, or against float64 (``reference=``), drift accumulated over the
    whole graph is not what the per-node judgement measures. A quantized output is judged in steps of its
    grid: integer kernels requantize with their own rounding, one step at a half step as a QuantizeLinear
    can, and such flips spread to the output as the graph's own do; where the deployed session adds at most
    ``tolerance.quantization_steps`` to the unoptimised graph's difference from PyTorch, ACC013 is a note,
    beyond it an error.
    """
    import onnxruntime as ort

    from onnxsight.rules import Level

    plain = ort.SessionOptions()
    plain.log_severity_level = 4
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    unoptimised = _run_whole(model, feeds, providers, plain)
    kernels: list[str] | None = None
    session = f"{record['optimization_level']}, {', '.join(providers)}"
    for row, expected, actual, bounds in failed:
        base = unoptimised.get(row["output"])
        comparable = base is not None and np.shape(base) == np.shape(actual)
        if comparable and compare(base, actual, bounds).passed:
            row["passed"] = True
            row["explained_by"] = ("the graph run whole without optimisations gives the same"
                                   + (": quantize rounding (ACC012)" if out.rounding else ""))
            continue
        if kernels is None:
            record["fused_kernels"] = kernels = fused_kernels(model, providers, session_options)
        baseline = _max_abs(expected, base) if comparable else row["per_node_max_abs_diff"]
        row["baseline_max_abs_diff"] = baseline
        # what the optimisations add to the graph's own rounding, in steps of the output's grid
        added = row["max_diff_steps"] - _in_steps(baseline, row["step"]) if comparable and row["step"] else None
        row["added_steps"] = added
        # a float output: what they add to the graph's own drift, element by element, under the bounds
        excess = _float_excess(expected, base, actual, bounds) if comparable and not row["step"] else None
        row["added_beyond_bounds"] = excess
        within = (added is not None and added <= tolerance.quantization_steps) or excess == 0
        row["passed"] = within
        if added is not None:
            verdict = (f"{added:.2g} quantization steps more, {'within' if within else 'beyond'} the tolerance "
                       f"of {tolerance.quantization_steps:g}")
        elif excess is not None:
            verdict = (f"{'no element' if within else f'{excess} elements'} further from PyTorch than there by "
                       f"more than the tolerance (atol={bounds.atol:g}, rtol={bounds.rtol:g}): "
                       + ("float rounding of fused kernels, as the graph's own" if within else "beyond it"))
        else:
            verdict = f"beyond the tolerance (atol={bounds.atol:g}, rtol={bounds.rtol:g})"
        ctx.emit(rules.DEPLOYED_SESSION_DIFFERS, node=out.nodes.get(row["output"]),
                 level=Level.NOTE if within else None,
                 properties={"onnx_value": row["output"], "fused_kernels": kernels,
                             **{k: row[k] for k in ("max_abs_diff", "max_diff_steps", "step", "per_node_max_abs_diff",
                                                    "baseline_max_abs_diff", "added_steps")}},
                 output=row["output"], session=session, reference="PyTorch",
                 max_abs_diff=f"{row['max_abs_diff']:.3g}",
                 steps=_steps_text(row["max_diff_steps"], row["grid"], row["step"]),
                 baseline="the same graph without optimisations (ORT_DISABLE_ALL)" if base is not None
                 else "the per-node run", baseline_diff=f"{baseline:.3g}",
                 baseline_steps=_steps_text(_in_steps(baseline, row["step"]), None, None), verdict=verdict,
                 cause=_cause(model, kernels, record["optimization_level"]))


def _run_whole(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], providers: Sequence[str],
               options: Any) -> dict[str, np.ndarray]:
    """The graph outputs of ``model`` run whole with ``options``; empty when ONNX Runtime fails."""
    runner = OrtRunner(providers, session_options=options)
    runner.activate()
    try:
        runner.load(model)
        return runner.infer(feeds)
    except Exception:  # noqa: BLE001 - no baseline: the per-node run's difference is reported instead
        return {}
    finally:
        runner.deactivate()


def fused_kernels(model: onnx.ModelProto, providers: Sequence[str], session_options: Any = None) -> list[str]:
    """The node types ONNX Runtime's optimised graph of ``model`` runs that ``model`` has none of, with counts
    (``"MatMulNBits x4 (com.microsoft)"``), most frequent first; empty when it cannot say."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    if session_options is not None:
        options.graph_optimization_level = session_options.graph_optimization_level
    own = {(n.domain or "ai.onnx", n.op_type) for n in model.graph.node}
    own |= {(n.domain or "ai.onnx", n.op_type) for f in model.functions for n in f.node}
    with tempfile.TemporaryDirectory() as folder:
        options.optimized_model_filepath = os.path.join(folder, "optimized.onnx")
        try:
            ort.InferenceSession(model.SerializeToString(), options, providers=with_provider_options(providers))
            optimized = onnx.load(options.optimized_model_filepath)
        except Exception:  # noqa: BLE001 - a provider that cannot save its optimised graph: nothing to name
            return []
    counts = collections.Counter((n.domain or "ai.onnx", n.op_type) for n in optimized.graph.node)
    return [f"{op} x{count}" + ("" if domain == "ai.onnx" else f" ({domain})")
            for (domain, op), count in counts.most_common() if (domain, op) not in own]


def _cause(model: onnx.ModelProto, kernels: Sequence[str], level: str) -> str:
    integer = [k for k in kernels if k.startswith(_INTEGER)]
    if integer and any(n.op_type in _QDQ for n in model.graph.node):
        others = [k for k in kernels if k not in integer]
        # NOTE: measured with onnxruntime 1.32 (CPU): a DequantizeLinear(4-bit) + MatMul fused into MatMulNBits
        # quantizes its activations to int8 (accuracy level 4, the fusion's default); level 0 or 1 is float32.
        nbits = (" (MatMulNBits computes with its activations quantized to int8 at the fusion's default "
                 "accuracy level 4; the session config entry session.qdq_matmulnbits_accuracy_level=1 keeps "
                 "them float32)") if any(k.startswith("MatMulNBits") for k in integer) else ""
        return (f"ONNX Runtime fused the quantized graph into integer kernels that round differently from "
                f"the QuantizeLinear/DequantizeLinear it was given ({', '.join(integer)}){nbits}"
                + (f"; its other fused kernels: {', '.join(others)}" if others else ""))
    if kernels:
        return f"ONNX Runtime's optimised graph runs fused kernels the per-node run does not form ({', '.join(kernels)})"
    return f"ONNX Runtime's graph optimisations ({level}) change the result without new kernel types"


def _with_weights(model: onnx.ModelProto, weights: Any) -> onnx.ModelProto:
    """``model`` with every initializer's bytes (a program's detached tensors put back)."""
    detached = weights.detached if weights is not None else frozenset()
    if not detached:
        return model
    full = onnx.ModelProto()
    full.CopyFrom(model)
    for tensor in full.graph.initializer:
        if tensor.name in detached:
            tensor.CopyFrom(weights.proto(tensor.name))
    return full


def _level_name(session_options: Any) -> str:
    if session_options is None:
        return "ORT_ENABLE_ALL"  # ONNX Runtime's default
    return str(session_options.graph_optimization_level).rsplit(".", 1)[-1]


def _float_excess(expected: np.ndarray, base: np.ndarray, actual: np.ndarray, bounds: Any) -> int | None:
    """How many elements of ``actual`` (the deployed session's) are further from ``expected`` (PyTorch's) than
    ``base`` (the unoptimised graph's) by more than ``bounds`` allow: 0 where fused kernels only round as
    differently as the graph run whole already does (a deep CNN's float32 drift, MobileNetV2's 2e-4 at values
    up to 6, smaller than PyTorch's own float32 error against float64). None where the shapes differ."""
    if np.iscomplexobj(expected) or np.shape(expected) != np.shape(actual):
        return None
    want, have, plain = (np.asarray(a, dtype=np.float64) for a in (expected, actual, base))
    allowed = bounds.atol + bounds.rtol * np.abs(want)
    worse = np.abs(have - want) - np.abs(plain - want) > allowed
    return int(np.count_nonzero(worse | (np.isnan(have) & ~np.isnan(plain))))


def _max_abs(expected: np.ndarray, actual: np.ndarray) -> float:
    if np.shape(expected) != np.shape(actual) or not np.size(expected):
        return 0.0 if np.shape(expected) == np.shape(actual) else float("inf")
    return float(np.max(np.abs(np.asarray(expected, dtype=np.float64) - np.asarray(actual, dtype=np.float64))))


def _in_steps(diff: float | None, step: float | None) -> float | None:
    return None if not step or diff is None else float(diff) / step


def _steps_text(steps: float | None, grid: str | None, step: float | None) -> str:
    if steps is None:
        return ""
    where = f" of {grid}'s grid, step {step:.3g}" if grid else ""
    return f" ({steps:.2g} quantization steps{where})"
