"""Dynamic zoo: onnxsight vs torch.onnx.export(dynamo=True), same models, same dynamic dims, same two sizes.

Each zoo model is exported by both exporters with the dims its spec names dynamic (batch, and
sequence/height/width where the spec gives them: ``ModelSpec.dynamic``), then run in ONNX Runtime
at the example's sizes and at a second size (every dynamic dim one larger, inputs grown by
repeating their own slices) and compared with the model's eager output at both. The same
tolerance (onnxsight's per-dtype default, or the spec's) decides "ok" for both exporters. One
fresh process per model. With ``--zoo-run DIR`` the table also shows that zoo run's verdict and
the sizes its verification checked (``onnxsight zoo run --suite transformers,tricky --out DIR``).

    python bench/zoo_dynamic.py [--suite transformers,tricky] [--filter hf_bert] [--zoo-run DIR] [--out table.md]
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

HERE = os.path.dirname(os.path.abspath(__file__))


def _within(expected: Any, actual: Any, tolerance: Any) -> tuple[bool, float]:
    """(every output within tolerance, max abs diff) of ONNX Runtime's outputs against eager's."""
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.verification import Tolerance, compare

    tolerance = tolerance if tolerance is not None else Tolerance()
    reference = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    actual = list(actual)
    if len(reference) != len(actual):
        return False, float("inf")
    ok, worst = True, 0.0
    for index, (ref, got) in enumerate(zip(reference, actual)):
        ref = torch.view_as_real(ref) if ref.is_complex() else ref
        got = got if isinstance(got, torch.Tensor) else torch.as_tensor(got)
        ref_np = ref.detach().float().numpy() if ref.dtype == torch.bfloat16 else ref.detach().numpy()
        metrics = compare(ref_np, got.detach().numpy(), tolerance.for_value(f"output {index}", ref.dtype),
                          expected_dtype=ref.dtype)
        ok = ok and bool(metrics.passed)
        diff = float("inf") if metrics.shape_mismatch else float(metrics.max_abs_diff)
        worst = max(worst, diff if diff == diff else float("inf"))
    return ok, worst


def _export(tool: str, spec: Any, model: Any, args: tuple, kwargs: dict, sizes: list[tuple[tuple, dict, Any]]
            ) -> dict[str, Any]:
    """Export with one tool (fresh Dims), then run at every size; first error line on failure."""
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
        row.update(exported=False, error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
        return row
    row.update(exported=True, seconds=time.perf_counter() - start, runs=[])
    for size_args, size_kwargs, expected in sizes:
        try:
            actual = program(*size_args, **size_kwargs)
            ok, diff = _within(expected, actual, spec.tolerance)
        except Exception as exc:  # noqa: BLE001
            ok, diff = False, float("inf")
            row.setdefault("error", f"run: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
        row["runs"].append({"ok": ok, "max_abs_diff": diff})
    return row


def _child(suite_name: str, model_name: str, out_path: str) -> None:
    import torch
    from torch.utils import _pytree as pytree

    import torch.export._trace  # noqa: F401  (both exporters load these lazily: not part of the timing)
    import torch.onnx._internal.exporter._core  # noqa: F401

    import onnxsight  # noqa: F401
    from onnxsight.zoo._spec import grown_inputs, load_suite
    from onnxsight.zoo._worker import _normalize

    from onnxsight.exporter import library_pytrees

    spec = load_suite(suite_name).spec(model_name)
    model, args, kwargs = _normalize(spec.build())
    second = grown_inputs(spec.dynamic or {}, model, args, kwargs)[:2]
    sizes = []
    # A KV cache object (DynamicCache) is copied and its outputs flattened as onnxsight flattens it;
    # torch.onnx gets the model as a user would call it, without that registration.
    with library_pytrees():
        for size_args, size_kwargs in ((args, kwargs), second):
            clone = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t,
                                    (size_args, size_kwargs))
            with torch.no_grad():
                expected = model(*clone[0], **clone[1])
            sizes.append((size_args, size_kwargs, [t for t in pytree.tree_leaves(expected)
                                                   if isinstance(t, torch.Tensor)]))
    shapes = [[tuple(t.shape) for t in pytree.tree_leaves(s[:2]) if isinstance(t, torch.Tensor)] for s in sizes]
    result = {"model": model_name, "suite": suite_name, "dynamic": spec.dynamic, "shapes": shapes}
    for tool in ("onnxsight", "torch.onnx"):
        result[tool] = _export(tool, spec, model, args, kwargs, sizes)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)


def _zoo_results(run_dirs: str | None) -> dict[str, dict[str, Any]]:
    """model name -> the zoo run's result.json (status, verification.sizes_checked); comma-separated run
    folders, a later one's result replacing an earlier one's (a re-run of some models)."""
    found: dict[str, dict[str, Any]] = {}
    for root, _, files in (w for run_dir in (run_dirs or "").split(",") if run_dir for w in os.walk(run_dir)):
        if "result.json" in files:
            with open(os.path.join(root, "result.json"), encoding="utf-8") as handle:
                data = json.load(handle)
            found[data.get("name", os.path.basename(root))] = data
    return found


def _sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items())


def _cell(row: dict[str, Any]) -> str:
    if not row.get("exported"):
        error = re.sub(r"\x1b\[[0-9;]*m", "", row.get("error", "?")).split(". ")[0]  # torch.onnx's colours
        return f"export failed: {error}".replace("|", "\\|")
    runs = row.get("runs", [])
    diffs = " / ".join(f"{r['max_abs_diff']:.1e}" + ("" if r["ok"] else " ✗") for r in runs)
    verdict = "ok" if runs and all(r["ok"] for r in runs) else "wrong"
    extra = f" ({row['error']})".replace("|", "\\|") if row.get("error") else ""
    return f"{verdict}: {diffs}{extra}"


def _ok(row: dict[str, Any]) -> bool:
    return bool(row.get("exported") and row.get("runs") and all(r["ok"] for r in row["runs"]))


def table(results: list[dict[str, Any]], zoo: dict[str, dict[str, Any]]) -> str:
    lines = ["| model | dynamic dims | sizes (example / second) | onnxsight zoo: status, sizes verified "
             "| onnxsight vs eager: max abs diff | torch.onnx vs eager: max abs diff | export s: onnxsight / torch.onnx |",
             "|---|---|---|---|---|---|---|"]
    counts = {"onnxsight": 0, "torch.onnx": 0, "zoo": 0}
    for res in results:
        name = res["model"]
        dims = sorted({d.split("+")[0] for axes in (res.get("dynamic") or {}).values() for d in axes.values()})
        zoo_row = zoo.get(name)
        if zoo_row:
            verification = zoo_row.get("verification") or {}
            checked = verification.get("sizes_checked") or []
            second = verification.get("second_size") or {}
            eager = f"; vs eager at {_sizes(second['sizes'])}: {'ok' if second.get('passed') else 'wrong'}" \
                if second.get("sizes") and second.get("passed") is not None else ""
            zoo_cell = f"{zoo_row['status']}, ONNX vs program at {len(checked)} size(s){eager}"
            counts["zoo"] += zoo_row["status"] == "passed"
        else:
            zoo_cell = "-"
        ours, theirs = res.get("onnxsight", {}), res.get("torch.onnx", {})
        counts["onnxsight"] += _ok(ours)
        counts["torch.onnx"] += _ok(theirs)
        shapes = res.get("shapes") or [[], []]
        size_cell = " / ".join(str(s[0]) if s else "-" for s in shapes)
        seconds = " / ".join(f"{r['seconds']:.1f}" if r.get("exported") else "-" for r in (ours, theirs))
        lines.append(f"| {name} | {', '.join(dims) or 'static'} | {size_cell} (first input) | {zoo_cell} "
                     f"| {_cell(ours)} | {_cell(theirs)} | {seconds} |")
        if res.get("crash"):
            lines[-1] = f"| {name} | {', '.join(dims)} | - | {zoo_cell} | {res['crash']} | {res['crash']} | - |"
    lines.append(f"\nOK at both sizes: onnxsight {counts['onnxsight']}, torch.onnx {counts['torch.onnx']} "
                 f"of {len(results)}" + (f"; zoo run passed {counts['zoo']}" if zoo else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="transformers,tricky")
    parser.add_argument("--filter", default=None)
    parser.add_argument("--zoo-run", default=None, help="a zoo run folder to take the zoo verdicts from")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--out", default=None, help="write the markdown table here too")
    parser.add_argument("--raw", default=None, help="keep the per-model results (JSON) here")
    parser.add_argument("--from-raw", default=None, help="render the table from a --raw file, exporting nothing")
    parser.add_argument("--child", nargs=3, metavar=("SUITE", "MODEL", "OUT"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        _child(*opts.child)
        return 0
    if opts.from_raw:
        results = load_raw(opts.from_raw)
    else:
        results = _run_all(opts)
    text = table(results, _zoo_results(opts.zoo_run))
    print(text)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


def load_raw(paths: str) -> list[dict[str, Any]]:
    """The rows of ``--raw`` files, comma-separated: a later file's row replaces an earlier one's (a re-run)."""
    rows: dict[str, dict[str, Any]] = {}
    for path in paths.split(","):
        with open(path, encoding="utf-8") as handle:
            rows.update({row["model"]: row for row in json.load(handle)})
    return list(rows.values())


def _run_all(opts: argparse.Namespace) -> list[dict[str, Any]]:
    """Every selected model in its own process; crashes and timeouts become rows."""
    from onnxsight.zoo._spec import load_suites

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for suite in load_suites(opts.suite):
            for spec in suite.specs:
                if not spec.matches(opts.filter):
                    continue
                out = os.path.join(tmp, f"{suite.name}-{spec.name}.json")
                try:
                    proc = subprocess.run([sys.executable, __file__, "--child", suite.ref, spec.name, out],
                                          capture_output=True, text=True, timeout=opts.timeout)
                    crash = None if os.path.exists(out) else f"crashed (exit {proc.returncode}): " \
                        f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}"
                except subprocess.TimeoutExpired:
                    crash = f"timeout after {opts.timeout} s"
                if crash:
                    results.append({"model": spec.name, "dynamic": spec.dynamic, "crash": crash})
                else:
                    with open(out, encoding="utf-8") as handle:
                        results.append(json.load(handle))
                print(f"{spec.name}: done", file=sys.stderr, flush=True)
                if opts.raw:
                    with open(opts.raw, "w", encoding="utf-8") as handle:
                        json.dump(results, handle)
    return results


if __name__ == "__main__":
    sys.exit(main())
