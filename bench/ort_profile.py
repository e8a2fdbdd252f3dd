"""Where ONNX Runtime spends its CPU time: per-op kernel times of a model as exported and after ORT's transformer
optimizer, from ORT's own profiler (``SessionOptions.enable_profiling``).

For one of ``bench/ort_fusion.py``'s models (``transformers`` configs, 4 layers, hidden 256, 4 heads, sequence
16, random weights) at ``--batch``, exported by onnxsight (``optimize="ort-fusion"`` for the models whose
attention fuses only with it) and optimised with ``optimize_model`` as ``bench/ort_fusion.py`` does
(``opt_level=0`` for the decoders), and once more with the optimizer's ``SkipLayerNormalization`` fusion off
(``FusionOptions.enable_skip_layer_norm = False``). Each graph runs in a session of one intra-op thread, ORT's
default session optimisations; after an untimed warm-up, ``--rounds`` rounds each run every graph ``--calls``
times in turn, profiled; each node's kernel time (the profiler's ``*_kernel_time`` events) is its median over
a round's calls (a call preempted on a busy machine charges its pause to one node), summed per op type, and
reported as the median over rounds, with the spread (max - min) / median. Each round also times every graph's
end-to-end call (wall clock around ``run``) in a session without the profiler, reported the same way. Last,
one residual layer norm with a bias, alone, of the model's activations (batch, 16, 256) and of
``--norm-shapes`` (BERT-small at sequence 128 and batch 8, BERT-base's at batch 1 by default): ORT's
``SkipLayerNormalization`` against ``Add``, ``Add``, ``LayerNormalization`` (no graph optimisation, so each
runs as written; the same outputs checked first), ``--rounds`` interleaved rounds of ``10 * --calls`` calls.

    python bench/ort_profile.py [--model gpt2] [--batch 8] [--rounds 5] [--calls 20]
                                [--norm-shapes 8x128x256,1x128x768] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import ort_fusion  # noqa: E402
import ort_latency  # noqa: E402

# the optimised graph twice: as optimize_model writes it, and with its SkipLayerNormalization fusion off
GRAPHS = ("exported", "ORT-optimized", "ORT-optimized, no SkipLN")


def prepare(name: str, batch: int, tmp: str) -> tuple[dict[str, str], list[Any], dict[str, str]]:
    """The three graphs' paths, the feeds (in the inputs' order), and what the optimizer fused in each optimised
    graph."""
    from onnxruntime.transformers.fusion_options import FusionOptions

    model, args = ort_fusion.build(name, batch)
    path = os.path.join(tmp, f"{name}-{batch}.onnx")
    tool = "onnxsight ort-fusion" if name in ort_fusion.ORT_FUSION else "onnxsight"
    ort_fusion.export(tool, model, args, path, 18)
    paths, fusions = {"exported": path}, {}
    no_skip = FusionOptions(ort_fusion.MODEL_TYPES[name])
    no_skip.enable_skip_layer_norm = False
    for graph, extra in ((GRAPHS[1], {}), (GRAPHS[2], {"optimization_options": no_skip})):
        paths[graph] = path.replace(".onnx", f"-{len(paths)}.onnx")
        fused, optimized = ort_fusion.optimize(path, ort_fusion.MODEL_TYPES[name], paths[graph],
                                               **ort_fusion.OPTIONS.get(name, {}), **extra)
        if optimized is None:
            raise RuntimeError(f"ORT's optimizer failed on {name}: {fused}")
        fusions[graph] = ort_fusion.fused_text(fused)
    return paths, [a.numpy() for a in args], fusions


def _residual_norm(kind: str, shape: tuple[int, ...]) -> bytes:
    """One residual layer norm with a bias, (x + bias) + skip, as one SkipLayerNormalization or as ONNX ops."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    width = shape[-1]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("x", "skip")]
    weights = [numpy_helper.from_array(np.linspace(0.5, 1.5, width, dtype=np.float32), n)
               for n in ("gamma", "beta", "bias")]
    if kind == "SkipLayerNormalization":
        nodes = [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                                  ["y", "", "", "sum"], domain="com.microsoft", epsilon=1e-5)]
    else:
        nodes = [helper.make_node("Add", ["x", "bias"], ["biased"]),
                 helper.make_node("Add", ["biased", "skip"], ["sum"]),
                 helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5)]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in ("y", "sum")]
    graph = helper.make_graph(nodes, kind, inputs, outputs, weights)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def residual_norms(shape: tuple[int, ...], rounds: int, calls: int) -> dict[str, list[float]]:
    """Microseconds per call of one residual layer norm in each form, ``rounds`` interleaved rounds."""
    import numpy as np
    import onnxruntime as ort

    sessions = {}
    for kind in ("SkipLayerNormalization", "Add + Add + LayerNormalization"):
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # each form as written
        sessions[kind] = ort.InferenceSession(_residual_norm(kind, shape), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape, dtype=np.float32) for n in ("x", "skip")}
    first = {kind: session.run(None, feeds) for kind, session in sessions.items()}   # warm-up, untimed
    np.testing.assert_allclose(*(f[0] for f in first.values()), rtol=1e-4, atol=1e-4)
    times: dict[str, list[float]] = {kind: [] for kind in sessions}
    for _ in range(rounds):
        for kind, session in sessions.items():
            start = time.perf_counter()
            for _ in range(calls):
                session.run(None, feeds)
            times[kind].append((time.perf_counter() - start) / calls * 1e6)
    return times


# NOTE: on a loaded machine a single-threaded run is preempted now and then, and the kernel running then is
# charged the whole pause; a node's median over calls is not, so a graph's per-op times are sums of medians.
def kernel_times(profile: str, skip: int) -> dict[str, tuple[str, float]]:
    """Per node: (op type, its median kernel time in microseconds over the profile's runs after the first ``skip``)."""
    with open(profile) as handle:
        events = json.load(handle)
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    if len(runs) <= skip:
        return {}
    start = runs[skip]["ts"]
    per_node: dict[str, tuple[str, list[float]]] = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= start:
            per_node.setdefault(event["name"][: -len("_kernel_time")], (event["args"]["op_name"], []))[1].append(
                event["dur"])
    return {node: (op, statistics.median(times)) for node, (op, times) in per_node.items()}


def node_times(path: str, feeds: list[Any], calls: int, prefix: str) -> dict[str, tuple[str, float]]:
    """``kernel_times`` of ``calls`` calls of the model at ``path`` in a new session profiling to ``prefix``; the
    session's first run (allocations) is never counted."""
    session = ort_latency.session(path, profile_prefix=prefix)
    named = ort_latency.named_feeds(session, feeds)
    for _ in range(calls + 1):
        session.run(None, named)
    return kernel_times(session.end_profiling(), skip=1)


def _per_call_ms(session: Any, feeds: dict[str, Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        session.run(None, feeds)
    return (time.perf_counter() - start) / calls * 1000


def profile(paths: dict[str, str], feeds: list[Any], rounds: int, calls: int, tmp: str) -> dict[str, dict]:
    """Per graph: {"per_op": {op: [us per call, one per round]}, "wall": [ms per call, one per round]}, the
    wall-clock times from a session without the profiler, timed in the same rounds."""
    results: dict[str, dict] = {g: {"per_op": collections.defaultdict(list), "wall": []} for g in GRAPHS}
    plain = {graph: ort_latency.session(paths[graph]) for graph in GRAPHS}
    named = {graph: ort_latency.named_feeds(made, feeds) for graph, made in plain.items()}
    for index in range(rounds + 1):   # round 0: the untimed warm-up
        for graph in GRAPHS:
            wall = _per_call_ms(plain[graph], named[graph], calls)
            per_node = node_times(paths[graph], feeds, calls, os.path.join(tmp, f"{graph}-{index}"))
            if index == 0:
                continue
            results[graph]["wall"].append(wall)
            per_op: collections.Counter = collections.Counter()
            for op, us in per_node.values():
                per_op[op] += us
            for op in set(per_op) | set(results[graph]["per_op"]):
                results[graph]["per_op"][op].append(per_op.get(op, 0))
    return results


def _figure(values: list[float], digits: int = 0, scale: float = 1.0) -> str:
    """The median of ``values`` (times ``scale``) and half their spread, as the tables print them."""
    median, spread = ort_latency.median_spread(values)
    return f"{median * scale:.{digits}f} ±{spread * 50:.0f}%"


def table(results: dict[str, dict]) -> str:
    ops = sorted(set().union(*(r["per_op"] for r in results.values())),
                 key=lambda op: -max(statistics.median(r["per_op"][op]) if op in r["per_op"] else 0
                                     for r in results.values()))
    lines = ["| op | " + " | ".join(f"us per call, {g}" for g in GRAPHS) + " |", "|---|" + "---|" * len(GRAPHS)]
    for op in ops:
        cells = [_figure(results[g]["per_op"][op]) if results[g]["per_op"].get(op) else "-" for g in GRAPHS]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    totals = [_figure([sum(r) for r in zip(*results[g]["per_op"].values())]) for g in GRAPHS]
    lines.append("| all kernels | " + " | ".join(totals) + " |")
    walls = [_figure(results[g]["wall"], scale=1000) for g in GRAPHS]
    lines.append("| end to end, no profiler (wall) | " + " | ".join(walls) + " |")
    return "\n".join(lines)


def norms_table(norms: dict[str, dict[str, list[float]]]) -> str:
    kinds = list(next(iter(norms.values())))
    lines = ["| one residual layer norm, float32 | " + " | ".join(f"us per call, {k}" for k in kinds) + " |",
             "|---|" + "---|" * len(kinds)]
    for shape, times in norms.items():
        lines.append(f"| {shape} | " + " | ".join(_figure(times[k], digits=1) for k in kinds) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2", choices=sorted(ort_fusion.MODEL_TYPES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--norm-shapes", default="8x128x256,1x128x768",
                        help="more shapes to time one residual layer norm at (the model's is always timed)")
    parser.add_argument("--json", help="write the per-round times here")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        paths, feeds, fused = prepare(options.model, options.batch, tmp)
        results = profile(paths, feeds, options.rounds, options.calls, tmp)
    shapes = [(options.batch, ort_fusion.SEQ, ort_fusion.HIDDEN)]
    shapes += [tuple(int(d) for d in shape.split("x")) for shape in options.norm_shapes.split(",") if shape]
    norms = {"x".join(map(str, shape)): residual_norms(shape, options.rounds, options.calls * 10) for shape in shapes}
    print(f"{options.model}, batch {options.batch}; ORT's optimizer fused: "
          + "; ".join(f"{graph}: {ops}" for graph, ops in fused.items()))
    print(table(results))
    print(norms_table(norms))
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"model": options.model, "batch": options.batch, "fused": fused, "residual_norms_us": norms,
                       "results": {g: {"per_op_us": dict(r["per_op"]), "wall_ms": r["wall"]}
                                   for g, r in results.items()}}, handle, indent=1)


if __name__ == "__main__":
    main()
