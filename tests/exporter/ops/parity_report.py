"""docs/op-parity.md from the sweep's JSON: `python -m tests.exporter.ops.parity_report IN.json OUT.md`.

The page says how the numbers were obtained (settings, tolerances, overrides with their reasons),
gives both exporters' figures per dtype side by side, and lists the ops only one exporter passes,
each with the other's failure, so every difference can be looked up.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PASSING = "passed"


def _cell(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= width else text[:width - 1] + "…"


def _pct(counts: dict[str, Any]) -> str:
    return f"{counts['passed']} / {counts['attempted']} ({counts['coverage']:.1%})"


def _samples_per_dtype(settings: dict[str, Any]) -> dict[str, int]:
    per = settings["samples_per_op"]
    return dict(per) if isinstance(per, dict) else {dtype: per for dtype in settings["dtypes"]}


def settings_section(result: dict[str, Any]) -> list[str]:
    s = result["settings"]
    versions = ", ".join(f"{k} {v}" for k, v in s["versions"].items())
    lines = [
        "- Samples: up to " + ", ".join(f"{n} ({d})" for d, n in _samples_per_dtype(s).items()) +
        " OpInfo samples per op and dtype "
        "(`torch.testing._internal.common_methods_invocations.op_db`, seeded so both exporters get the same "
        "tensors), each wrapped in a tiny module whose inputs are the sample's tensors.",
        f"- onnxsight: `onnxsight.export(module, tensors, opset_version={s['opset']})`.",
        f"- torch.onnx: `{s['torch_onnx']}`.",
        f"- Both run in {s['runtime']}, compared with eager by the same code "
        "(`tests/exporter/ops/opinfo_harness.py: compare`).",
        f"- Versions: {versions}.",
        "",
        "| dtype | rtol | atol |", "|---|---|---|",
    ]
    lines += [f"| {d} | {t['rtol']:g} | {t['atol']:g} |" for d, t in s["tolerances"].items()]
    lines += ["| integers, bool | exact | exact |", "",
              "Tolerances are torch.testing's defaults (`torch.testing.assert_close`); elementwise "
              "`|got - want| <= atol + rtol * |want|`, NaN equal to NaN.", ""]
    if s["overrides"]:
        lines += ["Per-op overrides (`tests/exporter/ops/op_tolerances.py`), applied to both exporters:", "",
                  "| op | rtol | atol | dtypes | reason |", "|---|---|---|---|---|"]
        lines += [f"| `{op}` | {o['rtol']:g} | {o['atol']:g} | {', '.join(o['dtypes']) or 'all floating'} | "
                  f"{_cell(o['reason'], 400)} |" for op, o in s["overrides"].items()]
    else:
        lines += ["No per-op overrides: every op is held to the defaults above."]
    return lines + [""]


def common_ops(result: dict[str, Any]) -> dict[str, dict[str, dict[str, dict]]]:
    """The records of ops every exporter ran at that dtype (a stopped sweep leaves some `not-run`)."""
    exporters = result["settings"]["exporters"]
    common: dict[str, dict[str, dict[str, dict]]] = {}
    for op, per_dtype in result["ops"].items():
        for dtype, per in per_dtype.items():
            if all(e in per and per[e]["status"] != "not-run" for e in exporters):
                common.setdefault(op, {})[dtype] = per
    return common


def not_run(result: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per dtype and exporter, how many ops the sweep did not reach."""
    counts: dict[str, dict[str, int]] = {}
    for per_dtype in result["ops"].values():
        for dtype, per in per_dtype.items():
            for exporter, record in per.items():
                if record["status"] == "not-run":
                    counts.setdefault(dtype, {}).setdefault(exporter, 0)
                    counts[dtype][exporter] += 1
    return counts


def summary_section(result: dict[str, Any]) -> list[str]:
    from tests.exporter.ops.coverage import summarize

    exporters = result["settings"]["exporters"]
    missing = not_run(result)
    if missing:
        result = dict(result, summary=summarize(common_ops(result), exporters, result["settings"]["dtypes"]))
    head = "| dtype | " + " | ".join(f"{e} passes" for e in exporters) + " | " + \
        " | ".join(f"{e}: no ORT kernel" for e in exporters) + " | " + \
        " | ".join(f"{e}: not attempted" for e in exporters) + " |"
    lines = [head, "|" + "---|" * (1 + 3 * len(exporters))]
    for dtype, per in result["summary"].items():
        lines.append(f"| {dtype} | " + " | ".join(_pct(per[e]) for e in exporters) + " | " +
                     " | ".join(str(per[e]["no_kernel"]) for e in exporters) + " | " +
                     " | ".join(str(per[e]["not_attempted"]) for e in exporters) + " |")
    if missing:
        lines += ["", "**The sweep was stopped before every op ran** (" + "; ".join(
            f"{dtype}: " + ", ".join(f"{e} {n} ops not run" for e, n in per.items())
            for dtype, per in missing.items()) + "): the table counts only the ops that every exporter ran. "
            "Each exporter's figures over all the ops it ran are under *Each exporter alone*."]
    return lines + [
        "",
        "*passes*: every sample torch.export could capture exported, ran and matched; the denominator is the "
        "ops that passed or failed. *no ORT kernel*: nothing failed, but ONNX Runtime's CPU provider has no "
        "kernel for a node at that dtype (a runtime gap, counted for neither exporter). *not attempted*: no "
        "sample could be captured by torch.export, or none has a real, non-empty tensor input.", ""]


def only_one(result: dict[str, Any], winner: str, loser: str) -> list[tuple[str, str, dict]]:
    """(op, dtype, loser's record) where ``winner`` passes and ``loser`` ran and did not."""
    rows = []
    for op, per_dtype in sorted(common_ops(result).items()):
        for dtype, per in per_dtype.items():
            if winner in per and loser in per and per[winner]["status"] == PASSING \
                    and per[loser]["status"] != PASSING:
                rows.append((op, dtype, per[loser]))
    return rows


def differences_section(result: dict[str, Any]) -> list[str]:
    exporters = result["settings"]["exporters"]
    if len(exporters) != 2:
        return []
    lines: list[str] = []
    for winner, loser in (exporters, exporters[::-1]):
        rows = only_one(result, winner, loser)
        lines += [f"## Ops only {winner} passes ({len(rows)})", "",
                  f"| op | dtype | {loser} | why |", "|---|---|---|---|"]
        lines += [f"| `{op}` | {dtype} | {rec['status']} | {_cell(rec['detail'])} |" for op, dtype, rec in rows]
        lines.append("")
    return lines


def failures_section(result: dict[str, Any], exporter: str) -> list[str]:
    rows = [(op, dtype, per[exporter]) for op, per_dtype in sorted(result["ops"].items())
            for dtype, per in per_dtype.items()
            if exporter in per and per[exporter]["status"] in ("failed", "error")]
    lines = [f"## Every op {exporter} fails ({len(rows)})", "",
             "| op | dtype | samples | first failure |", "|---|---|---|---|"]
    for op, dtype, rec in rows:
        samples = ", ".join(f"{k} {v}" for k, v in sorted(rec["samples"].items()))
        lines.append(f"| `{op}` | {dtype} | {samples} | {_cell(rec['detail'])} |")
    return lines + [""]


def no_kernel_section(result: dict[str, Any]) -> list[str]:
    rows: dict[tuple[str, str], set[str]] = {}
    for op, per_dtype in sorted(result["ops"].items()):
        for dtype, per in per_dtype.items():
            for exporter, rec in per.items():
                if rec["status"] == "no-kernel":
                    rows.setdefault((dtype, rec["detail"]), set()).add(f"`{op}` ({exporter})")
    if not rows:
        return []
    lines = ["## ONNX Runtime CPU kernels missing at a dtype", "",
             "| dtype | node (since opset) | ops (exporter) |", "|---|---|---|"]
    lines += [f"| {dtype} | {node} | {', '.join(sorted(ops))} |" for (dtype, node), ops in sorted(rows.items())]
    return lines + [""]


def render(result: dict[str, Any]) -> str:
    exporters = result["settings"]["exporters"]
    lines = ["# OpInfo op parity: " + " and ".join(exporters), "",
             "Generated by `make test-ops-parity` (`python -m tests.exporter.ops.coverage --exporter both`, "
             "`tests/exporter/ops/parity_report.py`); per-op records in [op-parity.json](op-parity.json).", "",
             "## Figures", ""]
    lines += summary_section(result)
    if not_run(result):
        lines += ["### Each exporter alone", "", "| dtype | exporter | passes | no ORT kernel | not attempted |",
                  "|---|---|---|---|---|"]
        lines += [f"| {dtype} | {e} | {_pct(c)} | {c['no_kernel']} | {c['not_attempted']} |"
                  for dtype, per in result["summary"].items() for e, c in per.items()]
        lines.append("")
    lines += ["## How they were obtained", ""] + settings_section(result)
    seconds = result.get("worker_seconds", {})
    if seconds:
        lines += ["Sweep time (worker wall seconds, on a shared 2-core machine): " +
                  "; ".join(f"{d}: " + ", ".join(f"{e} {s:.0f} s" for e, s in per.items())
                            for d, per in seconds.items()) + ".", ""]
    lines += differences_section(result)
    for exporter in exporters:
        lines += failures_section(result, exporter)
    lines += no_kernel_section(result)
    return "\n".join(lines).rstrip() + "\n"


def write_markdown(result: dict[str, Any], path: str) -> None:
    with open(path, "w") as handle:
        handle.write(render(result))


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from sweeps of other dtypes or exporters (run separately: float32 first, say).

    Later results win for the same op, dtype and exporter; the settings must agree but for the
    exporters and dtypes, which are united.
    """
    from tests.exporter.ops.coverage import summarize

    united = ("exporters", "dtypes", "samples_per_op")
    merged: dict[str, Any] = {"settings": dict(results[0]["settings"], exporters=[], dtypes=[], samples_per_op={}),
                              "ops": {}, "worker_seconds": {}}
    for result in results:
        theirs = {k: v for k, v in result["settings"].items() if k not in united}
        ours = {k: v for k, v in merged["settings"].items() if k not in united}
        if theirs != ours:
            raise ValueError(f"sweeps with different settings: {theirs} vs {ours}")
        for key in ("exporters", "dtypes"):
            merged["settings"][key] = list(dict.fromkeys(merged["settings"][key] + result["settings"][key]))
        merged["settings"]["samples_per_op"].update(_samples_per_dtype(result["settings"]))
        for op, per_dtype in result["ops"].items():
            for dtype, per in per_dtype.items():
                merged["ops"].setdefault(op, {}).setdefault(dtype, {}).update(per)
        for dtype, per in result.get("worker_seconds", {}).items():
            merged["worker_seconds"].setdefault(dtype, {}).update(per)
    merged["summary"] = summarize(merged["ops"], merged["settings"]["exporters"], merged["settings"]["dtypes"])
    return merged


def main(argv: list[str] | None = None) -> int:
    """`IN.json OUT.md`, or `--merge A.json B.json ... --out OUT.json --markdown OUT.md`."""
    args = list(argv if argv is not None else sys.argv[1:])
    if args[0] != "--merge":
        with open(args[0]) as handle:
            write_markdown(json.load(handle), args[1])
        return 0
    out, page = args[args.index("--out") + 1], args[args.index("--markdown") + 1]
    sources = [a for a in args[1:args.index("--out")] if not a.startswith("--")]
    results = []
    for source in sources:
        with open(source) as handle:
            results.append(json.load(handle))
    result = merge(results)
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write("\n")
    write_markdown(result, page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
