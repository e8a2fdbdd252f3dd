"""Export time against its floor: onnxsight and torch.onnx against ``torch.export.export`` alone, per stage.

torch.export's capture is what every exporter pays; what onnxsight adds on top of it (decompose, translate,
optimize, check, and the capture's own bookkeeping) is what this measures. Per model, in one process, after an
untimed round of every side, ``--runs`` rounds each time, in an order rotated every round:

- ``torch.export``: ``torch.export.export(model, args, strict=False)``, the call onnxsight's first capture
  strategy makes (the floor);
- ``onnxsight``: ``onnxsight.export(model, args)`` (optimize on, its default), with the seconds of each
  stage from the program's export record;
- ``onnxsight optimize=False``;
- ``torch.onnx``: ``torch.onnx.export(model, args, dynamo=True)`` with its default ``optimize=True``, and
  ``torch.onnx optimize=False``.

Every side at the same opset, no file written (each exporter's program held in memory), garbage collected
before each call. The ratios are taken per round (each side against the floor measured in the same round), and
reported as their median and range. Each model runs in its own process.

``hiera`` (transformers' Hiera image classifier, a small local config) is the capture-strategy case: called
with one image and a dynamic batch, which torch.export specialises (and its size-oblivious capture cannot keep
dynamic: the pooler guards ``batch <= 1``), onnxsight captures the example grown to two images and checks the
graph at the one image; its floor is the one torch.export call that captures it (``torch.export.export`` of the
grown example, batch dynamic), without that check.

    python bench/export_floor.py [--models cnn16,transformer8,llama4,resnet50,hiera] [--runs 7] [--opset 18]
                                 [--sides ...] [--threads N] [--json docs/export-floor.json] [--md docs/export-floor.md]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = "cnn16,transformer8,llama4,resnet50,hiera"
SIDES = ("torch.export", "onnxsight", "onnxsight optimize=False", "torch.onnx", "torch.onnx optimize=False")
FLOOR = "torch.export"
STAGES = ("arguments", "capture", "decompose", "translate", "optimize", "check")
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
DESCRIPTION = {
    "cnn16": "16-block residual CNN, 33 batch norms, 1x3x64x64",
    "cnn64": "64-block residual CNN, 129 batch norms, 1x3x64x64 (the optimize stage's scaling)",
    "transformer8": "8-block transformer encoder, width 256, 128 tokens",
    "llama4": "LLaMA causal LM (transformers), 4 layers, width 256, 64 tokens",
    "resnet50": "ResNet-50-shaped CNN, 1x3x224x224",
    "hiera": "Hiera classifier (transformers), one image, batch dynamic",
}


def _case(name: str) -> tuple[Any, tuple, Any, tuple]:
    """(model, args, dynamic_shapes, the floor's args)."""
    import torch

    sys.path.insert(0, HERE)
    from models import MODELS as BUILDERS

    torch.manual_seed(0)
    model, args = BUILDERS[name]()
    if name == "hiera":
        batch = torch.export.Dim("batch")
        grown = tuple(torch.cat([a, a]) for a in args)
        return model, args, ({0: batch},), grown
    return model, args, None, args


def _sides(model: Any, args: tuple, shapes: Any, floor_args: tuple, opset: int) -> dict[str, Callable[[], Any]]:
    import torch

    import onnxsight

    def torch_onnx(optimize: bool) -> Callable[[], Any]:
        def run() -> Any:
            with contextlib.redirect_stdout(io.StringIO()):  # its progress lines
                return torch.onnx.export(model, args, dynamic_shapes=shapes, dynamo=True, opset_version=opset,
                                         optimize=optimize, verbose=False)
        return run

    return {
        "torch.export": lambda: torch.export.export(model, floor_args, dynamic_shapes=shapes, strict=False),
        "onnxsight": lambda: onnxsight.export(model, args, dynamic_shapes=shapes, opset_version=opset),
        "onnxsight optimize=False": lambda: onnxsight.export(model, args, dynamic_shapes=shapes, opset_version=opset,
                                                             optimize=False),
        "torch.onnx": torch_onnx(True),
        "torch.onnx optimize=False": torch_onnx(False),
    }


def _child(name: str, runs: int, opset: int, sides: list[str]) -> dict:
    """Every side of one model, interleaved: an untimed round, then ``runs`` rounds in rotated order."""
    import warnings

    warnings.filterwarnings("ignore")
    model, args, shapes, floor_args = _case(name)
    calls = {k: v for k, v in _sides(model, args, shapes, floor_args, opset).items() if k in sides}
    times: dict[str, list[float]] = {side: [] for side in calls}
    stages: dict[str, list[dict[str, float]]] = {side: [] for side in calls if side.startswith("onnxsight")}
    attempts: list[dict] = []
    nodes: dict[str, int] = {}
    errors: dict[str, str] = {}
    order = list(calls)
    for round_ in range(runs + 1):
        shift = round_ % len(order)
        for side in order[shift:] + order[:shift]:
            if side in errors:
                continue
            gc.collect()
            start = time.perf_counter()
            try:
                result = calls[side]()
            except Exception as exc:  # noqa: BLE001 - a side that fails is reported, the others still run
                errors[side] = _error(exc)
                continue
            seconds = time.perf_counter() - start
            if round_ == 0:
                if side == "onnxsight":
                    attempts = [{"strategy": a.strategy, "success": a.success, "seconds": round(a.seconds, 3),
                                 "rule": a.rule} for a in result.record.attempts]
                    nodes = {"translated": result.record.facts.get("nodes_translated", 0),
                             "optimized": result.record.facts.get("nodes", 0)}
                continue
            times[side].append(seconds)
            if side in stages:
                stages[side].append({s.name: s.seconds for s in result.record.stages})
            del result
    return {"model": name, "description": DESCRIPTION.get(name, name), "runs": runs, "opset": opset,
            "seconds": times, "stages": stages, "attempts": attempts, "nodes": nodes, "errors": errors}


def _error(exc: BaseException) -> str:
    """The exception's type and first line, without terminal colours."""
    first = _COLOURS.sub("", (str(exc).strip().splitlines() or [""])[0])
    return f"{type(exc).__name__}: {first[:200]}"


def _ratios(row: dict, side: str, against: str = FLOOR) -> list[float]:
    ours, theirs = row["seconds"].get(side, []), row["seconds"].get(against, [])
    return [a / b for a, b in zip(ours, theirs)] if len(ours) == len(theirs) else []


def spread(values: list[float], digits: int = 2) -> str:
    """``median (min-max)`` of ``values`` to ``digits`` decimals; ``-`` for none."""
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(rows: list[dict]) -> str:
    """The markdown page: ratios to the floor per round, then onnxsight's stages against the floor."""
    lines = ["| model | torch.export s | onnxsight / torch.export | onnxsight optimize=False / torch.export "
             "| torch.onnx / torch.export | torch.onnx optimize=False / torch.export | onnxsight / torch.onnx |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if FLOOR in row["errors"] or not row["seconds"].get(FLOOR):
            lines.append(f"| {row['model']} | {row['errors'].get(FLOOR, 'not run')} | | | | | |")
            continue
        cells = [spread(_ratios(row, side)) if side not in row["errors"] else
                 "fails: " + row["errors"][side].split(":")[0] for side in SIDES[1:]]
        lines.append(f"| {row['model']} | {spread(row['seconds'][FLOOR])} | " + " | ".join(cells) + " | "
                     + spread(_ratios(row, "onnxsight", "torch.onnx")) + " |")
    lines += ["", "onnxsight's stages (optimize on), median seconds of the rounds and, in parentheses, the median "
              "per round of the stage's seconds over that round's torch.export seconds:", "",
              "| model | nodes translated -> optimized | " + " | ".join(STAGES) + " | capture - torch.export |",
              "|---" * (len(STAGES) + 3) + "|"]
    for row in rows:
        per_round = row["stages"].get("onnxsight") or []
        floor = row["seconds"].get(FLOOR, [])
        if not per_round or len(floor) != len(per_round):
            continue
        cells = []
        for stage in STAGES:
            values = [r.get(stage, 0.0) for r in per_round]
            share = statistics.median(v / f for v, f in zip(values, floor))
            cells.append(f"{statistics.median(values):.3f} ({share:.2f})")
        extra = [r.get("capture", 0.0) - f for r, f in zip(per_round, floor)]
        cells.append(f"{statistics.median(extra):+.3f}")
        nodes = row.get("nodes") or {}
        lines.append(f"| {row['model']} | {nodes.get('translated', '?')} -> {nodes.get('optimized', '?')} | "
                     + " | ".join(cells) + " |")
    attempts = [(row["model"], a) for row in rows for a in row.get("attempts", [])]
    if any(len([a for m, a in attempts if m == row["model"]]) > 1 for row in rows):
        lines += ["", "Capture attempts (the untimed round):", "", "| model | attempt | captured | s |",
                  "|---|---|---|---|"]
        lines += [f"| {m} | {a['strategy']} | {'yes' if a['success'] else 'no (' + str(a['rule']) + ')'} | "
                  f"{a['seconds']:.2f} |" for m, a in attempts
                  if len([x for n, x in attempts if n == m]) > 1]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--runs", type=int, default=7, help="timed rounds per model after an untimed one")
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--sides", default=",".join(SIDES), help=f"a subset of: {', '.join(SIDES)}")
    parser.add_argument("--json", help="write every round's seconds here")
    parser.add_argument("--md", help="write the tables here")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch's intra-op threads in each model's process (0: torch's default)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    sides = [s for s in options.sides.split(",") if s]
    if FLOOR not in sides:
        sides.insert(0, FLOOR)
    if options.child:
        if options.threads:
            import torch

            torch.set_num_threads(options.threads)
        print(json.dumps(_child(options.child, options.runs, options.opset, sides)))
        return 0
    rows = []
    for name in options.models.split(","):
        proc = subprocess.run([sys.executable, __file__, "--child", name, "--runs", str(options.runs),
                               "--opset", str(options.opset), "--sides", ",".join(sides),
                               "--threads", str(options.threads)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
            rows.append({"model": name, "seconds": {}, "stages": {}, "errors": {FLOOR: tail}})
        else:
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(json.dumps({k: rows[-1].get(k) for k in ("model", "errors")}), file=sys.stderr, flush=True)
    import torch

    threads = options.threads or torch.get_num_threads()
    header = (f"opset {options.opset}, torch {torch.__version__}, {os.cpu_count()} CPUs, {threads} intra-op "
              f"thread{'s' if threads > 1 else ''}{'' if options.threads else ' (torch default)'}; per model one "
              f"process, an untimed round then {options.runs} rounds of every side in rotated order; ratios per round, "
              "median (min-max).")
    text = header + "\n\n" + table(rows)
    print(text)
    if options.md:
        with open(options.md, "w") as handle:
            handle.write("# Export time against torch.export (generated)\n\n"
                         "Written by `make bench-export-floor` (`bench/export_floor.py`); how it is measured: "
                         "[Performance](performance.md#export-time-against-torchexport).\n\n" + text + "\n")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"header": header, "rows": rows}, handle, indent=1)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
