"""Zoo comparison: onnxsight vs torch.onnx.export(dynamo=True) on every model of the zoo suites, static and dynamic.

Per model and export, in a process of its own (``nice``): build it (the suite's random weights; vision models with
BatchNorm calibrated), run it eagerly at the example and at a second size (every dynamic dim one
larger, inputs grown by repeating their own slices), then export it with each exporter twice:
static (the example's shapes) and with the spec's dynamic dims (``ModelSpec.dynamic``), the same
``Dim``s for both. Each export runs in ONNX Runtime and is compared with eager by the same code and
tolerance (onnxsight's per-dtype default, or the spec's): static at the example, dynamic at both
sizes. A model whose eager outputs are too small to compare is marked ZOO005 and not exported.
``--per-node`` also verifies onnxsight's dynamic program per node at several sizes.

The torchvision and timm suites need ``.venv-vision`` (``make test-vision`` sets it up); without
torchvision they are listed as skipped. ``make bench-zoo`` runs every suite:

    python bench/zoo_compare.py [--suite transformers,tricky,torchvision,timm] [--filter hf_bert] \\
        [--raw raw.json] [--out docs/zoo-compare.md] [--from-raw a.json,b.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

TOOLS = ("onnxsight", "torch.onnx")
MODES = ("static", "dynamic")
COLUMNS = tuple(f"{tool} {mode}" for tool in TOOLS for mode in MODES)
SUITES = "transformers,tricky,torchvision,timm"


def _within(expected: list[Any], actual: Any, tolerance: Any) -> tuple[bool, float]:
    """(every output within tolerance, max abs diff) of ONNX Runtime's outputs against eager's tensors."""
    import torch

    from onnxsight.verification import Tolerance, compare

    tolerance = tolerance if tolerance is not None else Tolerance()
    actual = list(actual)
    if len(expected) != len(actual):
        return False, float("inf")
    ok, worst = True, 0.0
    for index, (ref, got) in enumerate(zip(expected, actual)):
        ref = torch.view_as_real(ref) if ref.is_complex() else ref
        got = got if isinstance(got, torch.Tensor) else torch.as_tensor(got)
        ref_np = ref.detach().float().numpy() if ref.dtype == torch.bfloat16 else ref.detach().numpy()
        metrics = compare(ref_np, got.detach().numpy(), tolerance.for_value(f"output {index}", ref.dtype),
                          expected_dtype=ref.dtype)
        ok = ok and bool(metrics.passed)
        diff = float("inf") if metrics.shape_mismatch else float(metrics.max_abs_diff)
        worst = max(worst, diff if diff == diff else float("inf"))
    return ok, worst


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def _export(tool: str, spec: Any, model: Any, args: tuple, kwargs: dict, sizes: list[tuple[tuple, dict, Any]]
            ) -> dict[str, Any]:
    """Export with one tool (fresh Dims), then run at every size; the first error line on failure."""
    import torch

    row: dict[str, Any] = {}
    shapes = spec.dynamic_shapes_for(model, args, kwargs)
    start = time.perf_counter()
    try:
        if tool == "onnxsight":
            import onnxsight
            program = onnxsight.export(model, args, kwargs=kwargs, dynamic_shapes=shapes, opset_version=spec.opset,
                                       custom_translations=spec.custom_translations)
        else:
            program = torch.onnx.export(model, args, kwargs=kwargs, dynamic_shapes=shapes, dynamo=True,
                                        verbose=False, opset_version=spec.opset or 18)
    except Exception as exc:  # noqa: BLE001  (a failed export is a row of the table)
        row.update(exported=False, error=_first_line(exc))
        return row
    row.update(exported=True, seconds=time.perf_counter() - start, runs=[])
    for size_args, size_kwargs, expected in sizes:
        try:
            ok, diff = _within(expected, program(*size_args, **size_kwargs), spec.tolerance)
        except Exception as exc:  # noqa: BLE001
            ok, diff = False, float("inf")
            row.setdefault("error", "run: " + _first_line(exc))
        row["runs"].append({"ok": ok, "max_abs_diff": diff})
    return row


def _per_node(spec: Any, model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """onnxsight's dynamic program verified per node, at the example and other sizes."""
    import onnxsight
    from onnxsight.verification import verify

    start = time.perf_counter()
    try:
        prog = onnxsight.export(model, args, kwargs=kwargs, dynamic_shapes=spec.dynamic_shapes_for(model, args, kwargs),
                                opset_version=spec.opset, custom_translations=spec.custom_translations)
        outcome = verify(prog, args, kwargs, per_node=True, other_sizes=True)
    except Exception as exc:  # noqa: BLE001  (recorded, as every failure here)
        return {"passed": False, "error": _first_line(exc)}
    return {"passed": bool(outcome.passed), "sizes": len(outcome.to_dict().get("sizes_checked") or []),
            "seconds": time.perf_counter() - start,
            "root": next((d.message for d in outcome.diagnostics if d.rule.code == "ACC002"), None)}


def _eager_sizes(spec: Any, model: Any, args: tuple, kwargs: dict) -> list[tuple[tuple, dict, list[Any]]]:
    """(args, kwargs, eager output tensors) at the example and at the second size. A KV cache object
    (DynamicCache) is flattened as onnxsight flattens it; torch.onnx gets the model as a user calls it."""
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.exporter import library_pytrees
    from onnxsight.zoo._spec import grown_inputs

    sizes = []
    with library_pytrees():
        for size_args, size_kwargs in ((args, kwargs), grown_inputs(spec.dynamic or {}, model, args, kwargs)[:2]):
            clone = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t,
                                    (size_args, size_kwargs))
            with torch.no_grad():
                expected = model(*clone[0], **clone[1])
            sizes.append((size_args, size_kwargs,
                          [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]))
    return sizes


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for package in ("torch", "onnx", "onnxruntime", "onnxscript", "transformers", "torchvision", "timm"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    return found


def _child(suite_name: str, model_name: str, out_path: str, job: str) -> None:
    """One export (``job``: a column, or ``per_node``) of one model, in a process of its own.

    NOTE: one process per export, not per model: torch keeps state between exports in a process
    (torch.onnx's dynamic export of an LSTM comes out static after its static export of it), and a
    comparison must not charge one exporter with what another export left behind.
    """
    import torch
    from torch.utils import _pytree as pytree

    import torch.export._trace  # noqa: F401  (both exporters load these lazily: not part of the timing)
    import torch.onnx._internal.exporter._core  # noqa: F401

    import onnxsight  # noqa: F401
    from onnxsight.zoo import ModelSpec
    from onnxsight.zoo._spec import load_suite
    from onnxsight.zoo._worker import _normalize, degenerate_scale

    spec = load_suite(suite_name).spec(model_name)
    result: dict[str, Any] = {"model": model_name, "suite": suite_name, "dynamic": spec.dynamic,
                              "versions": _versions()}
    model, args, kwargs = _normalize(spec.build())
    sizes = _eager_sizes(spec, model, args, kwargs)
    result["shapes"] = [[tuple(t.shape) for t in pytree.tree_leaves(s[:2]) if isinstance(t, torch.Tensor)][:1]
                        for s in sizes]
    floats = [t for t in sizes[0][2] if t.is_floating_point() and t.numel()]
    result["scale"] = max((float(t.abs().max()) for t in floats), default=0.0)
    degenerate = degenerate_scale(sizes[0][2], spec.tolerance)
    if degenerate:
        result["degenerate"] = f"ZOO005: {degenerate[0]}"
    elif job == "per_node":
        result["per_node"] = _per_node(spec, model, args, kwargs)
    else:
        tool, mode = job.rsplit(" ", 1)
        which = spec if mode == "dynamic" else ModelSpec(spec.name, spec.build, tolerance=spec.tolerance,
                                                         opset=spec.opset, custom_translations=spec.custom_translations)
        result[job] = _export(tool, which, model, args, kwargs, sizes if mode == "dynamic" else sizes[:1])
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)


def _cell(row: dict[str, Any]) -> str:
    if not row.get("exported"):
        error = re.sub(r"\x1b\[[0-9;]*m", "", row.get("error", "?")).split(". ")[0][:120]  # torch.onnx's colours
        return f"✗ export: {error}".replace("|", "\\|")
    runs = row.get("runs", [])
    diffs = " / ".join(f"{r['max_abs_diff']:.1e}" + ("" if r["ok"] else " ✗") for r in runs)
    extra = f" ({row['error'][:120]})".replace("|", "\\|") if row.get("error") else ""
    return f"{'ok' if ok(row) else 'wrong'} {diffs}, {row['seconds']:.1f} s{extra}"


def ok(row: dict[str, Any] | None) -> bool:
    """Exported, and every size it ran at within tolerance of eager."""
    return bool(row and row.get("exported") and row.get("runs") and all(r["ok"] for r in row["runs"]))


def _per_node_cell(node: dict[str, Any] | None) -> str:
    if node is None:
        return "-"
    verdict = "ok" if node["passed"] else "✗ " + (node.get("root") or node.get("error") or "mismatch")[:120]
    sizes = f", {node['sizes']} sizes, {node['seconds']:.0f} s" if "sizes" in node else ""
    return (verdict + sizes).replace("|", "/")


def _dims(res: dict[str, Any]) -> str:
    names = sorted({d.split("+")[0] for axes in (res.get("dynamic") or {}).values() for d in axes.values()})
    return ", ".join(names) or "static"


def gaps(results: list[dict[str, Any]]) -> list[str]:
    """``model (mode)`` wherever torch.onnx is OK and onnxsight is not: the cases the issue forbids."""
    return [f"{res['model']} ({mode})" for res in results for mode in MODES
            if ok(res.get(f"torch.onnx {mode}")) and not ok(res.get(f"onnxsight {mode}"))]


def table(results: list[dict[str, Any]]) -> str:
    """Per model: each exporter, static and dynamic: verdict, max abs diff vs eager (example / second size),
    export seconds; then the OK counts and the models only torch.onnx passes."""
    node = any("per_node" in res for res in results)
    lines = ["| model | dynamic dims | " + " | ".join(COLUMNS) + (" | onnxsight per node |" if node else " |"),
             "|---|---|" + "---|" * (len(COLUMNS) + node)]
    for res in results:
        reason = (res.get("degenerate") or "not run").replace("|", "\\|")  # ZOO005: no export was tried
        cells = [_cell(res[c]) if c in res else reason for c in COLUMNS]
        lines.append(f"| {res['model']} | {_dims(res)} | " + " | ".join(cells)
                     + (f" | {_per_node_cell(res.get('per_node'))} |" if node else " |"))
    counts = ", ".join(f"{c} {sum(ok(r.get(c)) for r in results)}" for c in COLUMNS)
    missing = gaps(results)
    lines.append(f"\nOK (every size within tolerance), of {len(results)}: {counts}. "
                 + (f"torch.onnx OK where onnxsight is not: {', '.join(missing)}." if missing
                    else "onnxsight is OK wherever torch.onnx is."))
    return "\n".join(lines)


def summary(suites: dict[str, list[dict[str, Any]]]) -> str:
    """Per suite: models, how many each exporter gets right static and dynamic, and where only torch.onnx does."""
    lines = ["| suite | models | " + " | ".join(COLUMNS) + " | torch.onnx OK, onnxsight not |",
             "|---|---:|" + "---:|" * len(COLUMNS) + "---|"]
    for name, rows in [*suites.items(), ("all", [r for rows in suites.values() for r in rows])]:
        counts = " | ".join(str(sum(ok(r.get(c)) for r in rows)) for c in COLUMNS)
        lines.append(f"| {name} | {len(rows)} | {counts} | {', '.join(gaps(rows)) or 'none'} |")
    return "\n".join(lines)


def tables(results: list[dict[str, Any]]) -> str:
    """The summary, then one table per suite, in the order the suites were run."""
    suites: dict[str, list[dict[str, Any]]] = {}
    for res in results:
        suites.setdefault(os.path.basename(str(res.get("suite", "?"))), []).append(res)
    commits = ", ".join(sorted({str(res.get("commit", "not recorded")) for res in results}))
    versions = sorted({f"{k} {v}" for res in results for k, v in (res.get("versions") or {}).items()})
    header = (f"Generated by `bench/zoo_compare.py` (`make bench-zoo`). Measured at commit(s) {commits}"
              + (f"; {', '.join(versions)}" if versions else "") + ". Cells: verdict, max abs diff vs eager "
              "(static: at the example; dynamic: at the example / at the second size, every dynamic dim + 1; "
              "✗ = over tolerance), export seconds (one export, rough: read ratios within a row).")
    return header + "\n\n" + summary(suites) + "\n\n" + "\n\n".join(
        f"#### {name} ({len(rows)} models)\n\n{table(rows)}" for name, rows in suites.items())


def load_raw(paths: str) -> list[dict[str, Any]]:
    """The rows of ``--raw`` files, comma-separated: a later file's row replaces an earlier one's (a re-run)."""
    rows: dict[str, dict[str, Any]] = {}
    for path in paths.split(","):
        with open(path, encoding="utf-8") as handle:
            rows.update({row["model"]: row for row in json.load(handle)})
    return list(rows.values())


def _run_one(suite: Any, spec: Any, opts: argparse.Namespace, tmp: str) -> dict[str, Any]:
    """Each export of one model in its own process; a crash or timeout is that export's cell."""
    row: dict[str, Any] = {"model": spec.name, "suite": suite.ref, "dynamic": spec.dynamic}
    start = time.perf_counter()
    for job in (*COLUMNS, *(("per_node",) if opts.per_node else ())):
        out = os.path.join(tmp, f"{suite.name}-{spec.name}-{job.replace(' ', '-')}.json")
        command = ["nice", "-n", "10", sys.executable, __file__, "--child", suite.ref, spec.name, out, job]
        crash = None
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=opts.timeout)
            if proc.returncode:
                crash = f"crashed (exit {proc.returncode}): {(proc.stderr.strip().splitlines() or [''])[-1][:200]}"
        except subprocess.TimeoutExpired:
            crash = f"timeout after {opts.timeout} s"
        if os.path.exists(out):
            with open(out, encoding="utf-8") as handle:
                row.update(json.load(handle))
        if crash and job != "per_node":
            row[job] = {"exported": False, "error": crash}
        elif crash:
            row[job] = {"passed": False, "error": crash}
        if row.get("degenerate"):
            break
    row["wall"] = time.perf_counter() - start
    return row


def _commit() -> str:
    """The checkout's commit (``+`` when it has uncommitted changes): each row says what it measured."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def _run_all(opts: argparse.Namespace) -> list[dict[str, Any]]:
    """Every selected model; with ``--raw``, the file is a store: the rows of the models run here replace
    theirs, the others are kept (a re-run of some models), and it is rewritten after every model."""
    from onnxsight.zoo._spec import load_suites

    rows = {row["model"]: row for row in (load_raw(opts.raw) if opts.raw and os.path.exists(opts.raw) else [])}
    with tempfile.TemporaryDirectory() as tmp:
        for suite in load_suites(opts.suite):
            if suite.skipped:
                print(f"{suite.name}: skipped: {suite.skipped}", file=sys.stderr)
            for model, reason in suite.skipped_models:
                print(f"{suite.name}/{model}: skipped: {reason}", file=sys.stderr)
            for spec in (s for s in suite.specs if s.matches(opts.filter)):
                row = rows[spec.name] = {**_run_one(suite, spec, opts, tmp), "commit": _commit()}
                print(f"{spec.name}: {row['wall']:.0f} s", file=sys.stderr, flush=True)
                if opts.raw:
                    with open(opts.raw, "w", encoding="utf-8") as handle:
                        json.dump(list(rows.values()), handle, indent=0)
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=SUITES)
    parser.add_argument("--filter", default=None)
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--per-node", action="store_true", help="verify onnxsight's dynamic export per node too")
    parser.add_argument("--out", default=None, help="write the markdown tables here too")
    parser.add_argument("--raw", default=None, help="the per-model results (JSON): models run replace their rows")
    parser.add_argument("--from-raw", default=None, help="render from --raw files (comma-separated; later wins)")
    parser.add_argument("--child", nargs=4, metavar=("SUITE", "MODEL", "OUT", "JOB"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        _child(*opts.child)
        return 0
    text = tables(load_raw(opts.from_raw) if opts.from_raw else _run_all(opts))
    print(text)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
