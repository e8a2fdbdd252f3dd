"""The verifier measures itself: inject faults into exported dev-zoo models, count what verify names.

For every model of the dev-zoo suites (smoke, tricky, transformers with small
configs), the exported ONNX model gets one fault at a time, at many values
across the op families: a constant added to a value, the inputs of a
non-commutative node swapped, a Cast dropped, an attribute changed (axis,
perm, epsilon, alpha, transB, keepdims). Each faulty model is verified in
every mode; a fault counts as detected in a mode when the injected value is
the first root cause. A fault that leaves its own value unchanged (within
tolerance), or makes a model ONNX Runtime cannot run, is excluded and
counted by reason. Each clean model is verified too: the clean rate is the
share of (model, mode) runs reported clean, with no root cause.

    .venv/bin/python -m tests.verification.mutation --out docs/mutation.json     # make test-mutation
    .venv/bin/python -m tests.verification.mutation --suites smoke --per-kind 4  # a quick look
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import onnx

import onnxsight
from onnxsight.verification import Tolerance, compare
from onnxsight.verification._inputs import flat_user_inputs
from onnxsight.verification._metrics import to_numpy
from tests.verification import faults

MODES: dict[str, dict[str, Any]] = {
    "propagated": {"mode": "propagated"},
    "isolated": {"mode": "isolated"},
    "float64": {"mode": "propagated", "reference": "float64"},
}
SUITES = ("smoke", "tricky", "transformers")
# Non-commutative ops whose first two inputs can be swapped into a same-typed, usually runnable model.
SWAPPABLE = ("Sub", "Div", "MatMul", "Pow", "Concat", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Mod")


@dataclass
class Fault:
    """One injected fault."""

    model: str
    kind: str
    value: str
    onnx_op: str
    detail: str = ""
    # A fault changes a node: every output of that node is the injected place (TopK's values and
    # indices both change with its axis); add_constant changes one value only.
    node_outputs: tuple[str, ...] = ()
    outcome: dict[str, Any] = field(default_factory=dict)   # mode -> first root causes (or "detected")
    excluded: str | None = None


# -- models ---------------------------------------------------------------------------------------
def zoo_programs(suites: tuple[str, ...], name_filter: str | None) -> Iterator[tuple[str, Any, str | None]]:
    """(suite/model, ONNXProgram or None, reason it is skipped) for every model of ``suites``."""
    from onnxsight.zoo._spec import load_suite

    for suite in suites:
        loaded = load_suite(suite)
        if loaded.skipped:
            yield f"{suite}/*", None, f"suite unavailable: {loaded.skipped}"
            continue
        for spec in loaded.specs:
            name = f"{suite}/{spec.name}"
            if name_filter and name_filter not in name:
                continue
            try:
                built = spec.build()
                model, args, kwargs = (built + ({},))[:3]
                prog = onnxsight.export(model, args, kwargs=kwargs or None, dynamic_shapes=spec.dynamic_shapes,
                                        opset_version=spec.opset)
            except Exception as exc:  # noqa: BLE001 - a model that does not export is reported, not counted
                yield name, None, f"export failed: {type(exc).__name__}: {str(exc)[:120]}"
                continue
            yield name, prog, None


# -- running the ONNX model alone (is the fault a fault?) -----------------------------------------------
def run_values(model: onnx.ModelProto, feeds: dict[str, np.ndarray], values: list[str]) -> dict[str, np.ndarray]:
    """``values`` computed by ONNX Runtime on the whole model (exposed as extra outputs)."""
    import onnxruntime as ort

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.output[:]
    copy.graph.output.extend(onnx.ValueInfoProto(name=v) for v in values)
    session = ort.InferenceSession(copy.SerializeToString(), providers=["CPUExecutionProvider"])
    declared = {i.name: i.type for i in session.get_inputs()}
    cast = {k: v.astype(np.float32) if declared.get(k) == "tensor(float)" and v.dtype != np.float32 else v
            for k, v in feeds.items() if k in declared}
    return dict(zip(values, session.run(values, cast)))


def exclusion(faulty: onnx.ModelProto, feeds: dict[str, np.ndarray], value: str, clean: np.ndarray) -> str | None:
    """Why this fault is not counted (None: it changes its value beyond tolerance)."""
    try:
        changed = run_values(faulty, feeds, [value])[value]
    except Exception as exc:  # noqa: BLE001
        return f"the faulty model does not run in ONNX Runtime ({type(exc).__name__})"
    if changed.shape != clean.shape or changed.dtype != clean.dtype:
        return None
    bounds = Tolerance().for_value(value, str(clean.dtype))
    if compare(clean, changed, bounds).passed:
        return "the injected value is unchanged (within tolerance): a no-op here"
    return None


# -- candidate faults -----------------------------------------------------------------------------------
def spread(items: list[Any], count: int) -> list[Any]:
    """Up to ``count`` items evenly spread over ``items`` (first and last included)."""
    if len(items) <= count:
        return items
    step = (len(items) - 1) / max(count - 1, 1)
    return [items[round(i * step)] for i in range(count)]


def by_family(rows: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """Up to ``count`` rows, round-robin over ONNX op types so every family gets some."""
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for row in rows:
        groups[row["onnx_op"]].append(row)
    picked: list[dict[str, Any]] = []
    queues = {op: spread(group, count) for op, group in groups.items()}
    while len(picked) < count and any(queues.values()):
        for op in list(queues):
            if queues[op] and len(picked) < count:
                picked.append(queues[op].pop(0))
    return picked


def candidates(name: str, prog: Any, rows: list[dict[str, Any]], clean: dict[str, np.ndarray],
               per_kind: int) -> Iterator[tuple[Fault, Callable[[], onnx.ModelProto]]]:
    """(fault, faulty-model builder) for each kind of fault, at up to ``per_kind`` values."""
    model = prog.model_proto
    producer = {o: n for n in model.graph.node for o in n.output}

    def outputs_of(value: str) -> tuple[str, ...]:
        return tuple(o for o in producer[value].output if o)
    floats = [r for r in rows if str(r["dtype"]).startswith(("float", "bfloat")) and r["value"] in clean]
    for row in by_family(floats, per_kind):
        value = row["value"]
        magnitude = float(np.max(np.abs(clean[value]))) if clean[value].size else 1.0
        constant = 0.01 * max(1.0, magnitude if np.isfinite(magnitude) else 1.0)
        yield (Fault(name, "add_constant", value, row["onnx_op"], f"+{constant:.3g}"),
               lambda v=value, c=constant: faults.add_constant(model, v, c))
    swaps = [r for r in rows if r["onnx_op"] in SWAPPABLE and len(producer[r["value"]].input) >= 2
             and producer[r["value"]].input[0] != producer[r["value"]].input[1]]
    for row in by_family(swaps, per_kind):
        yield (Fault(name, "swap_inputs", row["value"], row["onnx_op"], node_outputs=outputs_of(row["value"])),
               lambda v=row["value"]: faults.swap_inputs(model, v))
    casts = [r for r in rows if r["onnx_op"] == "Cast"]
    for row in spread(casts, per_kind):
        yield (Fault(name, "drop_cast", row["value"], "Cast", node_outputs=outputs_of(row["value"])),
               lambda v=row["value"]: faults.drop_cast(model, v))
    attributed = []
    for row in rows:
        rank = clean[row["value"]].ndim if row["value"] in clean else len(row["shape"] or ())
        change = faults.attribute_mutation(producer[row["value"]], rank)
        if change is not None:
            attributed.append((row, change))
    for row, (attr, new) in by_family_pairs(attributed, per_kind):
        yield (Fault(name, "change_attribute", row["value"], row["onnx_op"], f"{attr}={new}",
                     node_outputs=outputs_of(row["value"])),
               lambda v=row["value"], a=attr, n=new: faults.change_attribute(model, v, a, n))


def by_family_pairs(pairs: list[tuple[dict[str, Any], Any]], count: int) -> list[tuple[dict[str, Any], Any]]:
    order = by_family([dict(row, _i=i) for i, (row, _) in enumerate(pairs)], count)
    return [pairs[row["_i"]] for row in order]


# -- the sweep ------------------------------------------------------------------------------------------
def sweep_model(name: str, prog: Any, modes: tuple[str, ...], per_kind: int) -> tuple[list[Fault], dict[str, bool]]:
    """All faults of one model, and whether its clean model was reported clean in each mode."""
    clean_ok: dict[str, bool] = {}
    rows: list[dict[str, Any]] = []
    for mode in modes:
        result = onnxsight.verify(prog, **MODES[mode])
        clean_ok[mode] = bool(result.passed and result.root_causes.empty)
        if mode == "propagated":
            rows = result.nodes.to_dict("records")
    user = flat_user_inputs(prog, None, None)
    feeds = {n: to_numpy(t) for n, t in zip(prog.input_names, user)}
    computed = [r["value"] for r in rows]
    clean = run_values(prog.model_proto, feeds, computed) if computed else {}
    found: list[Fault] = []
    for fault, build in candidates(name, prog, rows, clean, per_kind):
        try:
            faulty = build()
        except Exception as exc:  # noqa: BLE001
            fault.excluded = f"the fault cannot be injected here ({type(exc).__name__})"
            found.append(fault)
            continue
        fault.excluded = exclusion(faulty, feeds, fault.value, clean[fault.value])
        if fault.excluded is None:
            for mode in modes:
                result = onnxsight.verify(prog, onnx_model=faulty, **MODES[mode])
                roots = list(result.root_causes["value"])
                named = roots[:1] == [fault.value] or (roots[:1] and roots[0] in fault.node_outputs)
                fault.outcome[mode] = "detected" if named else (roots[:3] or "none")
        found.append(fault)
    return found, clean_ok


def summarise(all_faults: list[Fault], clean: dict[str, dict[str, bool]], skipped: dict[str, str],
              modes: tuple[str, ...], seconds: float) -> dict[str, Any]:
    """The rates (overall, per mode, per fault kind and op) and every miss, as JSON."""
    counted = [f for f in all_faults if f.excluded is None]
    rates: dict[str, Any] = {}
    for mode in modes:
        hits = sum(f.outcome.get(mode) == "detected" for f in counted)
        runs = [ok[mode] for ok in clean.values() if mode in ok]
        rates[mode] = {"detected": hits, "faults": len(counted), "detection_rate": _rate(hits, len(counted)),
                       "clean_reported_clean": sum(runs), "clean_models": len(runs),
                       "clean_rate": _rate(sum(runs), len(runs))}
    kinds: dict[str, Any] = {}
    for kind in sorted({f.kind for f in counted}):
        mine = [f for f in counted if f.kind == kind]
        kinds[kind] = {"faults": len(mine), **{m: _rate(sum(f.outcome.get(m) == "detected" for f in mine), len(mine))
                                               for m in modes}}
    excluded = collections.Counter(f.excluded for f in all_faults if f.excluded)
    misses = [asdict(f) for f in counted if any(v != "detected" for v in f.outcome.values())]
    false_clean = {m: [name for name, ok in clean.items() if not ok.get(m, True)] for m in modes}
    return {"how": "make test-mutation (python -m tests.verification.mutation --out docs/mutation.json)",
            "modes": rates, "by_kind": kinds, "ops": sorted({f.onnx_op for f in counted}),
            "models": sorted(clean), "skipped_models": skipped, "excluded": dict(excluded),
            "clean_models_not_clean": false_clean, "misses": misses, "seconds": round(seconds, 1)}


def _rate(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--models", default=None, help="only models whose suite/name contains this")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--per-kind", type=int, default=12, help="values per fault kind and model")
    parser.add_argument("--out", default=None)
    options = parser.parse_args(argv)
    modes = tuple(options.modes.split(","))
    start = time.perf_counter()
    all_faults: list[Fault] = []
    clean: dict[str, dict[str, bool]] = {}
    skipped: dict[str, str] = {}
    for name, prog, reason in zoo_programs(tuple(options.suites.split(",")), options.models):
        if prog is None:
            skipped[name] = reason or "skipped"
            print(f"{name}: {reason}", file=sys.stderr)
            continue
        try:
            found, clean[name] = sweep_model(name, prog, modes, options.per_kind)
        except Exception as exc:  # noqa: BLE001 - one model's failure is reported, the sweep goes on
            skipped[name] = f"sweep failed: {type(exc).__name__}: {str(exc)[:160]}"
            traceback.print_exc()
            continue
        all_faults.extend(found)
        counted = [f for f in found if f.excluded is None]
        print(f"{name}: {len(counted)} faults, " + ", ".join(
            f"{m} {sum(f.outcome.get(m) == 'detected' for f in counted)}" for m in modes)
            + f"; clean {clean[name]}", file=sys.stderr)
        report = summarise(all_faults, clean, skipped, modes, time.perf_counter() - start)
        _write(options.out, dict(report, partial=True))  # a long sweep leaves what it has so far
    report = summarise(all_faults, clean, skipped, modes, time.perf_counter() - start)
    _write(options.out, report)
    print(json.dumps(report["modes"], indent=1))
    return 0


def _write(path: str | None, report: dict[str, Any]) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(report, indent=1, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
