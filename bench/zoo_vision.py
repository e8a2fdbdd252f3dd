"""Vision zoo: onnxsight vs torch.onnx.export(dynamo=True) on the torchvision and timm suites, static and dynamic.

Per model, in its own process: build it (random weights, BatchNorm calibrated), run it eagerly at
the example and at a second size (every dynamic dim one larger), then export it with each exporter
twice: static (the example's shapes) and with the spec's dynamic dims (``ModelSpec.dynamic``).
Each export runs in ONNX Runtime and is compared with eager under the same tolerance (onnxsight's
float32 default): static at the example, dynamic at both sizes. onnxsight's dynamic program is
also verified per node (``onnxsight.verify(per_node=True, other_sizes=True)``). A model whose eager
outputs are too small to compare is marked ZOO005 and not exported. Needs torchvision and timm
(``make test-vision`` sets up ``.venv-vision``):

    .venv-vision/bin/python bench/zoo_vision.py [--suite torchvision,timm] [--filter tv_resnet18] \\
        [--raw raw.json] [--out docs/zoo-vision.md]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("onnxsight", "torch.onnx")


def _dynamic_bench() -> Any:
    """bench/zoo_dynamic.py (not a package): its export-and-compare is the one used here."""
    spec = importlib.util.spec_from_file_location("zoo_dynamic", os.path.join(HERE, "zoo_dynamic.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _verify(row: dict[str, Any], spec: Any, model: Any, args: tuple, kwargs: dict) -> None:
    """onnxsight's dynamic program verified per node, at the example and other sizes."""
    import onnxsight
    from onnxsight.verification import verify

    start = time.perf_counter()
    try:
        prog = onnxsight.export(model, args, kwargs=kwargs, dynamic_shapes=spec.dynamic_shapes_for(model, args, kwargs))
        outcome = verify(prog, args, kwargs, per_node=True, other_sizes=True)
        summary = outcome.to_dict()
        row["per_node"] = {"passed": bool(outcome.passed), "sizes": len(summary.get("sizes_checked") or []),
                           "seconds": time.perf_counter() - start,
                           "root": next((d.message for d in outcome.diagnostics if d.rule.code == "ACC002"), None)}
    except Exception as exc:  # noqa: BLE001  (recorded, as every failure here)
        row["per_node"] = {"passed": False, "error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}


def _child(suite_name: str, model_name: str, out_path: str, per_node: bool) -> None:
    import torch
    from torch.utils import _pytree as pytree

    import torch.export._trace  # noqa: F401  (both exporters load these lazily: not part of the timing)
    import torch.onnx._internal.exporter._core  # noqa: F401

    import onnxsight  # noqa: F401
    from onnxsight.zoo import ModelSpec
    from onnxsight.zoo._spec import grown_inputs, load_suite
    from onnxsight.zoo._worker import _normalize, degenerate_scale

    bench = _dynamic_bench()
    spec = load_suite(suite_name).spec(model_name)
    static = ModelSpec(spec.name, spec.build, tolerance=spec.tolerance, opset=spec.opset,
                       custom_translations=spec.custom_translations)
    result: dict[str, Any] = {"model": model_name, "suite": suite_name, "dynamic": spec.dynamic}

    def save() -> None:  # after every step: a timeout still leaves what was measured
        with open(out_path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, default=str)

    model, args, kwargs = _normalize(spec.build())
    second = grown_inputs(spec.dynamic or {}, model, args, kwargs)[:2]
    sizes = []
    for size_args, size_kwargs in ((args, kwargs), second):
        clone = pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, (size_args, size_kwargs))
        with torch.no_grad():
            sizes.append((size_args, size_kwargs, model(*clone[0], **clone[1])))
    result["shapes"] = [[tuple(t.shape) for t in pytree.tree_leaves(s[:2]) if isinstance(t, torch.Tensor)][:1]
                        for s in sizes]
    leaves = [t for t in pytree.tree_leaves(sizes[0][2]) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    result["scale"] = max((float(t.abs().max()) for t in leaves if t.numel()), default=0.0)
    degenerate = degenerate_scale(sizes[0][2], spec.tolerance)
    if degenerate:
        result["degenerate"] = f"ZOO005: {degenerate[0]}"
        save()
        return
    for tool in TOOLS:
        for mode, which, at in (("static", static, sizes[:1]), ("dynamic", spec, sizes)):
            result[f"{tool} {mode}"] = bench._export(tool, which, model, args, kwargs, at)
            save()
    if per_node and result["onnxsight dynamic"].get("exported"):
        _verify(result, spec, model, args, kwargs)
        save()


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "not run (time)"
    if not row.get("exported"):
        error = row.get("error", "?").replace("\x1b", "").split(". ")[0][:120]
        return f"✗ export: {error}".replace("|", "\\|")
    runs = row.get("runs", [])
    diffs = " / ".join(f"{r['max_abs_diff']:.1e}" + ("" if r["ok"] else " ✗") for r in runs)
    verdict = "ok" if runs and all(r["ok"] for r in runs) else "wrong"
    extra = f" ({row['error'][:120]})".replace("|", "\\|") if row.get("error") else ""
    return f"{verdict} {diffs}, {row['seconds']:.1f} s{extra}"


def _ok(row: dict[str, Any] | None) -> bool:
    return bool(row and row.get("exported") and row.get("runs") and all(r["ok"] for r in row["runs"]))


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table: per model and exporter, static and dynamic: verdict, max abs diffs vs eager, export s."""
    columns = [f"{tool} {mode}" for tool in TOOLS for mode in ("static", "dynamic")]
    lines = ["| model | dynamic dims | " + " | ".join(columns) + " | onnxsight per node |",
             "|---|---|" + "---|" * len(columns) + "---|"]
    counts = dict.fromkeys(columns, 0)
    for res in results:
        dims = ", ".join(sorted({d for axes in (res.get("dynamic") or {}).values() for d in axes.values()}))
        if res.get("crash") or res.get("degenerate"):
            reason = (res.get("crash") or res["degenerate"]).replace("|", "\\|")
            if not any(c in res for c in columns):
                lines.append(f"| {res['model']} | {dims} | " + " | ".join([reason] * len(columns)) + " | - |")
                continue
        for column in columns:
            counts[column] += _ok(res.get(column))
        node = res.get("per_node")
        node_cell = "-" if node is None else ("ok" if node["passed"] else "✗ " + (node.get("root") or node.get(
            "error") or "mismatch")[:120]) + (f", {node['sizes']} sizes, {node['seconds']:.0f} s" if "sizes" in node
                                              else "")
        cells = [_cell(res.get(c)) if c in res or not res.get("crash") else res["crash"] for c in columns]
        lines.append(f"| {res['model']} | {dims} | " + " | ".join(cells) + f" | {node_cell.replace('|', '/')} |")
    lines.append("\nOK (every size within tolerance): " + ", ".join(f"{c} {n}" for c, n in counts.items())
                 + f" of {len(results)}")
    return "\n".join(lines)


def _run_all(opts: argparse.Namespace) -> list[dict[str, Any]]:
    """Every selected model in its own process (``nice``), partial results kept on a timeout or crash."""
    from onnxsight.zoo._spec import load_suites

    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for suite in load_suites(opts.suite):
            if suite.skipped:
                print(f"{suite.name}: skipped: {suite.skipped}", file=sys.stderr)
            for spec in (s for s in suite.specs if s.matches(opts.filter)):
                out = os.path.join(tmp, f"{suite.name}-{spec.name}.json")
                command = [sys.executable, __file__, "--child", suite.ref, spec.name, out] + \
                    (["--per-node"] if opts.per_node else [])
                start, crash = time.perf_counter(), None
                try:
                    proc = subprocess.run(command, capture_output=True, text=True, timeout=opts.timeout)
                    if proc.returncode:
                        crash = f"crashed (exit {proc.returncode}): " \
                                f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}"
                except subprocess.TimeoutExpired:
                    crash = f"timeout after {opts.timeout} s"
                row = {"model": spec.name, "dynamic": spec.dynamic}
                if os.path.exists(out):
                    with open(out, encoding="utf-8") as handle:
                        row = json.load(handle)
                if crash:
                    row["crash"] = crash
                row["wall"] = time.perf_counter() - start
                results.append(row)
                print(f"{spec.name}: {row['wall']:.0f} s {crash or ''}", file=sys.stderr, flush=True)
                if opts.raw:
                    with open(opts.raw, "w", encoding="utf-8") as handle:
                        json.dump(results, handle)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="torchvision,timm")
    parser.add_argument("--filter", default=None)
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--per-node", action="store_true", help="verify onnxsight's dynamic export per node too")
    parser.add_argument("--out", default=None, help="write the markdown table here too")
    parser.add_argument("--raw", default=None, help="keep the per-model results (JSON) here")
    parser.add_argument("--from-raw", default=None, help="render from --raw files (comma-separated; later wins)")
    parser.add_argument("--child", nargs=3, metavar=("SUITE", "MODEL", "OUT"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        _child(*opts.child, per_node=opts.per_node)
        return 0
    if opts.from_raw:
        results = _dynamic_bench().load_raw(opts.from_raw)
    else:
        results = _run_all(opts)
    text = table(results)
    print(text)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
