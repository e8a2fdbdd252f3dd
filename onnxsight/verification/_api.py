"""onnxsight.verify: compare an exported program with ONNX Runtime, per node."""

from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

import onnx

from onnxsight.diagnostics import DiagnosticContext
from onnxsight.verification._diagnose import emit_diagnostics
from onnxsight.verification._engine import EngineConfig, plan_pairs, run_engine
from onnxsight.verification._graph import GraphIndex
from onnxsight.verification._inputs import flat_user_inputs
from onnxsight.verification._metrics import to_numpy
from onnxsight.verification._reduce import reduce_repros
from onnxsight.verification._reference import make_reference
from onnxsight.verification._result import VerificationResult
from onnxsight.verification._runners import OrtRunner, TorchRunner
from onnxsight.verification._tolerance import Tolerance

MODES = ("propagated", "isolated")
# NOTE: values waiting for comparison (each held once by PyTorch and once by ONNX Runtime)
# are flushed to one ONNX Runtime session when they reach this many bytes.
DEFAULT_MEMORY_BUDGET = 256 * 1024**2
DEFAULT_MAX_REPROS = 8


def load_model(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    """A ModelProto from a proto or a path (external data loaded from next to it)."""
    if isinstance(model, onnx.ModelProto):
        return model
    return onnx.load(os.fspath(model))


def verify(prog: Any, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None, *,
           per_node: bool = True, mode: str = "propagated",
           providers: Sequence[str] = ("CPUExecutionProvider",), tolerance: Tolerance | None = None,
           onnx_model: onnx.ModelProto | str | os.PathLike | None = None,
           random_inputs: bool = False, seed: int = 0, dim_sizes: Mapping[str, int] | None = None,
           memory_budget: int = DEFAULT_MEMORY_BUDGET, provider_fallback: bool = False,
           torch_device: str = "cpu", max_repros: int = DEFAULT_MAX_REPROS,
           reference: str | None = None, repro_dir: str | os.PathLike | None = None) -> VerificationResult:
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
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    start = time.perf_counter()
    ctx = DiagnosticContext()
    tolerance = tolerance or Tolerance()
    model = prog.model_proto if onnx_model is None else load_model(onnx_model)
    index = GraphIndex.build(model)
    user_inputs = flat_user_inputs(prog, args, kwargs, random=random_inputs, seed=seed, dim_sizes=dim_sizes)
    if len(index.graph_inputs) != len(user_inputs):
        raise ValueError(f"the ONNX model takes {len(index.graph_inputs)} inputs "
                         f"({', '.join(index.graph_inputs)}), the program {len(user_inputs)}")
    by_name = set(index.graph_inputs) == set(prog.input_names)
    names = prog.input_names if by_name else index.graph_inputs
    feeds = {name: to_numpy(t) for name, t in zip(names, user_inputs)}
    pairs = plan_pairs(prog.exported_program.graph, prog.value_names, index, per_node=per_node)
    torch_runner = TorchRunner(prog.exported_program, device=torch_device)
    noise_floor = make_reference(reference, torch_runner)
    torch_runner = noise_floor or torch_runner
    ort_runner = OrtRunner(providers, ctx=ctx, fallback=provider_fallback)
    ort_runner.activate()
    torch_runner.activate()
    config = EngineConfig(mode=mode, tolerance=tolerance, memory_budget=memory_budget, max_repros=max_repros,
                          reference=noise_floor)
    try:
        out = run_engine(torch_runner, ort_runner, index, pairs, user_inputs, feeds, config, ctx)
    finally:
        torch_runner.deactivate()
        ort_runner.deactivate()
    if out.repros and out.error is None:  # the smallest subgraph that still diverges, per root cause
        out.repros.update(reduce_repros(prog, index, pairs, list(out.repros), user_inputs, feeds, tolerance,
                                        ort_runner.providers, device=torch_device))
    emit_diagnostics(out.rows, out.nodes, index.graph_outputs, ctx)
    info = {"mode": mode, "per_node": per_node, "reference": torch_runner.name, "providers": ort_runner.providers,
            "requested_providers": list(providers), "compared": len(out.rows), "paired": len(pairs),
            "sessions": out.sessions, "noise_floor": reference, "chunks": out.chunks, "error": out.error,
            "inputs": "random" if random_inputs else "example", "seed": seed,
            "tolerance": tolerance.to_dict(), "seconds": time.perf_counter() - start}
    result = VerificationResult(out.rows, index.graph_outputs, ctx.diagnostics, repros=out.repros, info=info,
                                graph_name=model.graph.name)
    if repro_dir is not None and result.repros and not result.passed:
        result.write_repro(repro_dir)
        result.repro_dir = result.info["repro_dir"] = os.fspath(repro_dir)
    return result
