"""Op coverage over the whole OpInfo database, for onnxsight, torch.onnx or both.

    python -m tests.exporter.ops.coverage --exporter both --dtypes float32,float16 --out docs/op-parity.json

Per exporter and dtype, an op *passes* when at least one sample ran and every sample that
torch.export could capture exported, ran in ONNX Runtime and matched eager (opinfo_harness.py);
it *fails* when a sample did not; it is *no-kernel* when nothing failed but ONNX Runtime's CPU
provider has no kernel for some node at that dtype; *not-attempted* when no sample could be
captured or none has a tensor input. Coverage = passed / (passed + failed).

Ops run in worker processes (`--worker`), a batch of ops each, one exporter each, so a crash or
a hang costs one op (marked `error`) and memory is returned between batches. `--progress FILE`
keeps every finished record as it comes; `--stop-file FILE` stops a long sweep early (creating
the file marks the ops not yet begun `not-run`), and the report then compares only the ops that
every exporter ran.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

DTYPES = ("float32", "float16", "bfloat16", "int64")
EXPORTER_NAMES = ("onnxsight", "torch.onnx")


def run_op(name: str, exporter: str, dtype_name: str, *, limit: int, opset: int) -> dict[str, Any]:
    """One op's record for one exporter at one dtype (in a worker)."""
    import torch

    from tests.exporter.ops.opinfo_harness import FAILURES, check_exported, opinfo_table, prepare, samples

    dtype = getattr(torch, dtype_name)
    results = []
    info = opinfo_table()[name]
    try:
        for index, sample in enumerate(samples(info, limit, dtype)):
            prepared = prepare(info, sample)
            if isinstance(prepared, str):
                results.append(("skipped", prepared, 0.0))
                continue
            result = check_exported(name, index, prepared, exporter=exporter, opset=opset)
            results.append((result.status, result.detail, result.seconds))
    except Exception as exc:  # noqa: BLE001 - a harness failure is that op's failure
        return {"status": "error", "detail": f"{type(exc).__name__}: {exc}"[:300], "samples": {}, "seconds": 0.0}
    statuses = collections.Counter(status for status, _, _ in results)
    if any(statuses[s] for s in FAILURES):
        status = "failed"
    elif statuses["no-kernel"]:
        status = "no-kernel"
    elif statuses["passed"]:
        status = "passed"
    else:
        status = "not-attempted"
    first = next((r for r in results if r[0] in FAILURES), None) or next(
        (r for r in results if r[0] == "no-kernel"), None)
    return {"status": status, "samples": dict(statuses), "detail": first[1] if first else "",
            "seconds": round(sum(s for _, _, s in results), 3)}


def worker(options: argparse.Namespace) -> int:
    """Append one JSON line per op to ``--jsonl`` (the parent reads progress from it)."""
    import warnings

    warnings.simplefilter("ignore")
    with open(options.jsonl, "a") as handle:
        for name in options.ops.split(","):
            if options.stop_file and os.path.exists(options.stop_file):
                handle.write(json.dumps({"op": name, "status": "not-run", "detail": "sweep stopped", "samples": {},
                                         "seconds": 0.0}) + "\n")
                handle.flush()
                continue
            record = run_op(name, options.exporter, options.dtypes, limit=options.limit, opset=options.opset)
            handle.write(json.dumps({"op": name, **record}) + "\n")
            handle.flush()
    return 0


def _read_lines(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.endswith("\n")]


def run_batch(ops: list[str], exporter: str, dtype: str, options: argparse.Namespace) -> dict[str, dict]:
    """Run ``ops`` in worker processes until each has a record (a hang or crash marks that op `error`)."""
    records: dict[str, dict] = {}
    remaining = list(ops)
    while remaining:
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as tmp:
            path = tmp.name
        command = [sys.executable, "-m", "tests.exporter.ops.coverage", "--worker", "--exporter", exporter,
                   "--dtypes", dtype, "--ops", ",".join(remaining), "--jsonl", path,
                   "--limit", str(options.limit), "--opset", str(options.opset), "--stop-file", options.stop_file]
        with open(options.log, "a") as log:
            process = subprocess.Popen(command, stdout=log, stderr=log)
            seen, last = 0, time.monotonic()
            while process.poll() is None:
                time.sleep(0.5)
                done = len(_read_lines(path))
                if done != seen:
                    seen, last = done, time.monotonic()
                elif time.monotonic() - last > options.op_timeout:
                    process.kill()
                    process.wait()
        lines = _read_lines(path)
        os.unlink(path)
        for line in lines:
            records[line.pop("op")] = line
        remaining = remaining[len(lines):]
        if remaining and process.returncode is not None:
            stuck = remaining.pop(0)
            why = (f"timed out after {options.op_timeout:g} s" if process.returncode < 0
                   else f"worker exited with {process.returncode}")
            records[stuck] = {"status": "error", "detail": why, "samples": {}, "seconds": 0.0}
    return records


def summarize(ops: dict[str, dict[str, dict[str, dict]]], exporters: list[str], dtypes: list[str]) -> dict:
    """Counts per dtype and exporter: passed, failed, no-kernel, not-attempted, coverage."""
    summary: dict[str, dict[str, dict]] = {}
    for dtype in dtypes:
        summary[dtype] = {}
        for exporter in exporters:
            counts = collections.Counter(per_dtype[dtype][exporter]["status"]
                                         for per_dtype in ops.values() if dtype in per_dtype)
            failed = counts["failed"] + counts["error"]
            summary[dtype][exporter] = {
                "passed": counts["passed"], "failed": failed, "attempted": counts["passed"] + failed,
                "no_kernel": counts["no-kernel"], "not_attempted": counts["not-attempted"],
                "coverage": round(counts["passed"] / max(1, counts["passed"] + failed), 4)}
    return summary


def settings(options: argparse.Namespace, exporters: list[str], dtypes: list[str]) -> dict[str, Any]:
    import onnx
    import onnxruntime
    import onnxscript
    import torch

    from tests.exporter.ops.exporters import TORCH_ONNX_OPTIMIZE
    from tests.exporter.ops.op_tolerances import DTYPE_TOLERANCES, OVERRIDES

    return {
        "exporters": exporters, "dtypes": dtypes, "opset": options.opset, "samples_per_op": options.limit,
        "torch_onnx": f"torch.onnx.export(..., dynamo=True, opset_version={options.opset}, "
                      f"optimize={TORCH_ONNX_OPTIMIZE})",
        "runtime": "onnxruntime CPUExecutionProvider, default SessionOptions",
        "tolerances": {str(d).replace("torch.", ""): {"rtol": t.rtol, "atol": t.atol}
                       for d, t in DTYPE_TOLERANCES.items()},
        "overrides": {op: {"rtol": o.tolerance.rtol, "atol": o.tolerance.atol, "reason": o.reason,
                           "dtypes": [str(d).replace("torch.", "") for d in o.dtypes]}
                      for op, o in sorted(OVERRIDES.items())},
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
                     "onnxscript": onnxscript.__version__, "python": platform.python_version()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="op-coverage.json")
    parser.add_argument("--markdown", default="", help="also write the parity page (docs/op-parity.md)")
    parser.add_argument("--exporter", default="onnxsight", choices=(*EXPORTER_NAMES, "both"))
    parser.add_argument("--dtypes", default="float32", help=f"comma-separated, of {', '.join(DTYPES)}")
    parser.add_argument("--limit", type=int, default=3, help="samples per op and dtype")
    parser.add_argument("--opset", type=int, default=18)
    parser.add_argument("--filter", default="", help="only ops whose OpInfo name contains this")
    parser.add_argument("--batch", type=int, default=60, help="ops per worker process")
    parser.add_argument("--op-timeout", type=float, default=300.0, help="seconds one op may take")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes at a time")
    parser.add_argument("--progress", default="", help="append each op's record here as it finishes (JSON lines)")
    parser.add_argument("--stop-file", default="", help="when this file exists, ops not yet begun are recorded "
                        "`not-run` (a sweep stopped by a deadline still writes what it has)")
    parser.add_argument("--from-progress", default="", help="write the report from a --progress file (the "
                        "dtypes in --dtypes that every exporter finished), running nothing")
    parser.add_argument("--log", default=os.devnull, help="the workers' stdout/stderr")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ops", default="", help=argparse.SUPPRESS)
    parser.add_argument("--jsonl", default="", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        return worker(options)
    if options.from_progress:
        return from_progress(options)
    return sweep(options)


def from_progress(options: argparse.Namespace) -> int:
    """The report of a sweep from its --progress records: a sweep that is still running (or was stopped in a
    later dtype) gives the figures of the dtypes it finished."""
    exporters = list(EXPORTER_NAMES) if options.exporter == "both" else [options.exporter]
    dtypes = [d for d in options.dtypes.split(",") if d]
    ops: dict[str, dict[str, dict[str, dict]]] = collections.defaultdict(dict)
    seconds: dict[str, dict[str, float]] = {d: {e: 0.0 for e in exporters} for d in dtypes}
    with open(options.from_progress) as handle:
        for line in handle:
            record = json.loads(line)
            op, dtype, exporter = record.pop("op"), record.pop("dtype"), record.pop("exporter")
            if dtype in dtypes and exporter in exporters:
                ops[op].setdefault(dtype, {})[exporter] = record
                seconds[dtype][exporter] = round(seconds[dtype][exporter] + record.get("seconds", 0.0), 1)
    for dtype in dtypes:
        counts = {e: sum(e in per.get(dtype, {}) for per in ops.values()) for e in exporters}
        if len(set(counts.values())) != 1:
            raise SystemExit(f"{options.from_progress}: {dtype} is not finished for every exporter: {counts}")
    return _write(options, exporters, dtypes, dict(sorted(ops.items())), seconds)


def _write(options: argparse.Namespace, exporters: list[str], dtypes: list[str],
           ops: dict[str, dict[str, dict[str, dict]]], seconds: dict[str, dict[str, float]]) -> int:
    result = {"settings": settings(options, exporters, dtypes), "summary": summarize(ops, exporters, dtypes),
              "worker_seconds": seconds, "ops": {k: v for k, v in ops.items() if v}}
    with open(options.out, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write("\n")
    if options.markdown:
        from tests.exporter.ops.parity_report import write_markdown
        write_markdown(result, options.markdown)
    for dtype, per_exporter in result["summary"].items():
        for exporter, counts in per_exporter.items():
            print(f"{exporter} {dtype}: {counts['passed']} / {counts['attempted']} OpInfo ops pass "
                  f"({counts['coverage']:.1%}); {counts['no_kernel']} no ONNX Runtime kernel")
    return 0


def sweep(options: argparse.Namespace) -> int:
    import torch

    from tests.exporter.ops.opinfo_harness import opinfo_table

    exporters = list(EXPORTER_NAMES) if options.exporter == "both" else [options.exporter]
    dtypes = [d for d in options.dtypes.split(",") if d]
    table = {k: v for k, v in opinfo_table().items() if options.filter in k}
    ops: dict[str, dict[str, dict[str, dict]]] = {name: {} for name in sorted(table)}
    seconds: dict[str, dict[str, float]] = {d: {e: 0.0 for e in exporters} for d in dtypes}
    tasks = []
    for dtype in dtypes:
        names = [n for n in sorted(table) if getattr(torch, dtype) in table[n].dtypes]
        tasks += [(dtype, exporter, names[i:i + options.batch], len(names))
                  for exporter in exporters for i in range(0, len(names), options.batch)]
    done: collections.Counter = collections.Counter()

    def run_task(task: tuple[str, str, list[str], int]) -> None:
        dtype, exporter, batch, total = task
        start = time.monotonic()
        records = run_batch(batch, exporter, dtype, options)
        with lock:
            for name, record in records.items():
                ops[name].setdefault(dtype, {})[exporter] = record
            if options.progress:  # every finished record, so a long sweep's partial figures can be read
                with open(options.progress, "a") as handle:
                    handle.writelines(json.dumps({"op": n, "dtype": dtype, "exporter": exporter, **r}) + "\n"
                                      for n, r in records.items())
            seconds[dtype][exporter] = round(seconds[dtype][exporter] + time.monotonic() - start, 1)
            done[dtype, exporter] += len(batch)
            print(f"{exporter} {dtype}: {done[dtype, exporter]}/{total} ops "
                  f"({seconds[dtype][exporter]:.0f} s)", file=sys.stderr, flush=True)

    lock = threading.Lock()
    with concurrent.futures.ThreadPoolExecutor(max_workers=options.jobs) as pool:
        list(pool.map(run_task, tasks))
    return _write(options, exporters, dtypes, ops, seconds)


if __name__ == "__main__":
    raise SystemExit(main())
