"""What torch's fully-masked-row guard costs on a whole model: ONNX Runtime CPU latency of BERT with an
``attention_mask`` input, as onnxsight exports it (the guard's row maximum a ``TopK``), against the same graph
with the row maximum a ``ReduceMax`` and with no guard at all.

``scaled_dot_product_attention`` with a bool mask gives zeros for a query row whose every key is masked; the
translation guards ``Softmax`` for it, ``Where(TopK(scores, k=1) == -inf, 0, Softmax(scores))``. Where the
mask comes from a model input (BERT's ``attention_mask``), ``optimize=False`` keeps the guard (the default writes
the mask with a finite fill instead, without it: the note ONX008). The model: the small BERT of
``bench/ort_fusion.py`` (``transformers`` config, 4 layers, hidden 256, 4 heads, intermediate 1024, random
weights), called with ``input_ids`` and an ``attention_mask`` whose last eighth is padding, exported by onnxsight
with ``optimize=False`` (opset 18, static shapes) at each batch and sequence length.
The other two variants are that exported file edited: every guard's ``TopK`` replaced by
``ReduceMax(scores, axes=[-1], keepdims=1)`` (what the guard was before, and what half precision keeps), or
every guard removed (``Softmax`` read directly: not the model's numbers for a sequence of padding only, a
yardstick). Each session runs with one intra-op thread and ORT's default session optimisations. First one
call of each variant, whose outputs must agree across the variants (no row of these masks is fully masked);
then ``bench/ort_latency.py``'s timing: after one untimed warm-up, each of ``--runs`` rounds times every
variant of a setting once, in turn, a round keeping the mean of its calls (``--calls``, or as many as take
about ``--seconds`` by that first call); reported: the median over rounds and the spread (max - min) /
median. Besides, as a measure the machine's load disturbs less, the guards' share of the kernel
time: ``--profile-calls`` calls of the two variants with a guard under ORT's profiler
(``SessionOptions.enable_profiling``), the kernel time of the guards' nodes (row maximum, ``Equal``,
``Where``) over that of every node, each node's time its median over the calls.

    python bench/mask_guard.py [--batches 1,8] [--seqs 128,512] [--runs 5] [--calls 0] [--seconds 1]
                               [--profile-calls 10] [--md out.md] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ort_fusion  # noqa: E402
import ort_latency  # noqa: E402
import ort_profile  # noqa: E402

VARIANTS = ("TopK guard", "ReduceMax guard", "no guard")


def guards(model: Any) -> list[tuple[Any, Any, Any]]:
    """(Where, Equal, row maximum) of every ``Where(RowMax(S) == -inf, 0, Softmax(S))`` in ``model``."""
    producer = {out: node for node in model.graph.node for out in node.output}
    found = []
    for where in model.graph.node:
        if where.op_type != "Where" or len(where.input) != 3:
            continue
        equal, softmax = producer.get(where.input[0]), producer.get(where.input[2])
        if equal is None or equal.op_type != "Equal" or softmax is None or softmax.op_type != "Softmax":
            continue
        row_max = producer.get(equal.input[0])
        if row_max is not None and row_max.op_type in ("TopK", "ReduceMax") and row_max.input[0] == softmax.input[0]:
            found.append((where, equal, row_max))
    return found


def variant(model: Any, name: str) -> Any:
    """A copy of ``model`` with every guard's row maximum a ReduceMax, or with no guard ("no guard")."""
    import numpy as np
    import onnx

    edited = onnx.ModelProto()
    edited.CopyFrom(model)
    graph = edited.graph
    found = guards(edited)
    if not found:
        raise ValueError("the exported model has no fully-masked-row guard to edit")
    if name == "TopK guard":
        return edited
    if name == "ReduceMax guard":
        axes = "mask_guard_bench_axes"
        graph.initializer.append(onnx.numpy_helper.from_array(np.array([-1], np.int64), axes))
        for _, _, row_max in found:
            row_max.CopyFrom(onnx.helper.make_node("ReduceMax", [row_max.input[0], axes], [row_max.output[0]],
                                                   name=row_max.name, keepdims=1))
        return edited
    dropped = {node.output[0] for guard in found for node in guard}
    softmax_of = {where.output[0]: where.input[2] for where, _, _ in found}
    kept = [node for node in graph.node if node.output[0] not in dropped]
    for node in kept:
        node.input[:] = [softmax_of.get(name, name) for name in node.input]
    del graph.node[:]
    graph.node.extend(kept)
    return edited


def export(batch: int, seq: int, tmp: str) -> tuple[dict[str, str], list[Any], int]:
    """Export once (opset 18, optimize=False: the export that keeps the guard), write the three variants; their
    paths, the feeds, the guards."""
    import onnx

    import onnxsight

    model, args = ort_latency.padded_bert(batch, seq, layers=ort_fusion.LAYERS, hidden=ort_fusion.HIDDEN,
                                          heads=ort_fusion.HEADS)
    path = os.path.join(tmp, f"bert-{batch}-{seq}.onnx")
    onnxsight.export(model, args, path, opset_version=18, optimize=False)
    exported = onnx.load(path)
    paths = {}
    for name in VARIANTS:
        paths[name] = path.replace(".onnx", f"-{name.replace(' ', '_')}.onnx")
        onnx.save(variant(exported, name), paths[name])
    return paths, [a.numpy() for a in args], len(guards(exported))   # the feeds: input_ids, attention_mask


def agree(rows: list[dict], calls: int, seconds: float) -> None:
    """One call of every row's model, untimed: their outputs must agree (no row of these masks is fully masked,
    so the guard changes no number). Sets each row's ``calls`` per round: ``calls``, or (0) as many as take
    about ``seconds`` by that call's time."""
    import numpy as np

    first = None
    for row in rows:
        made = ort_latency.session(row["path"])
        start = time.perf_counter()
        outputs = made.run(None, ort_latency.named_feeds(made, row["feeds"]))
        row["calls"] = calls or max(1, min(50, round(seconds / max(time.perf_counter() - start, 1e-6))))
        first = outputs if first is None else first
        if not all(np.allclose(a, b, atol=1e-5) for a, b in zip(first, outputs)):
            raise AssertionError(f"{row['variant']} computes other numbers than {rows[0]['variant']}")


def guard_share(path: str, feeds: list[Any], calls: int, tmp: str) -> tuple[float, float]:
    """(the guards' kernel time, every kernel's time) per call in microseconds: sums of each node's median."""
    import onnx

    names = {node.name for guard in guards(onnx.load(path, load_external_data=False)) for node in guard}
    per_node = ort_profile.node_times(path, feeds, calls, os.path.join(tmp, "guard"))
    missing = names - set(per_node)
    if missing:   # ORT fused or renamed a guard node: the share would be wrong
        raise RuntimeError(f"no kernel time for the guard nodes {sorted(missing)}")
    return sum(us for node, (_, us) in per_node.items() if node in names), sum(us for _, us in per_node.values())


def table(rows: list[dict]) -> str:
    lines = ["| batch | seq | guards | ms TopK guard | ms ReduceMax guard | ms no guard | TopK / none | "
             "ReduceMax / none | guard's share of kernel time, TopK / ReduceMax |", "|---" * 9 + "|"]
    by = {(r["batch"], r["seq"], r["variant"]): r for r in rows}
    for batch, seq in dict.fromkeys((r["batch"], r["seq"]) for r in rows):
        top, reduce, none = (by[(batch, seq, name)] for name in VARIANTS)
        ms = [f"{r['median_ms']:.2f} ±{r['spread'] * 50:.0f}%" for r in (top, reduce, none)]
        share = " / ".join(f"{r['guard_us'] / r['kernel_us'] * 100:.1f}%" if "guard_us" in r else "-"
                           for r in (top, reduce))
        lines.append(f"| {batch} | {seq} | {top['guards']} | {' | '.join(ms)} | "
                     f"{top['median_ms'] / none['median_ms']:.3f} | {reduce['median_ms'] / none['median_ms']:.3f} | "
                     f"{share} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--seqs", default="128,512")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=0, help="calls per round (0: about --seconds' worth)")
    parser.add_argument("--seconds", type=float, default=1.0, help="a round's time per variant, with --calls 0")
    parser.add_argument("--profile-calls", type=int, default=10,
                        help="profiled calls for the guard's share of kernel time (0: not profiled)")
    parser.add_argument("--md", help="write the table here too")
    parser.add_argument("--json", help="write every variant's times here")
    options = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seq in (int(s) for s in options.seqs.split(",")):
            for batch in (int(b) for b in options.batches.split(",")):
                paths, feeds, count = export(batch, seq, tmp)
                setting = [{"batch": batch, "seq": seq, "variant": name, "guards": count, "path": paths[name],
                            "feeds": feeds} for name in VARIANTS]
                for row in setting[:2] if options.profile_calls else ():   # the two variants with a guard
                    row["guard_us"], row["kernel_us"] = guard_share(row["path"], feeds, options.profile_calls, tmp)
                agree(setting, options.calls, options.seconds)
                ort_latency.measure(setting, options.runs, options.calls)   # one setting at a time, interleaved
                rows += setting
    text = table(rows)
    print(text)
    ort_latency.write(text, rows, options.md, options.json, omit=("feeds", "path"))


if __name__ == "__main__":
    main()
