"""The zoo job: load suites, run each model in its own process, record, compare, report.

Output folder layout::

    DIR/run.json               run id and options (what --resume reads)
    DIR/models/<suite>/<model>/{result.json, model.sarif, model.onnx, stderr.txt, task.json}
    DIR/results.json           every record of the run
    DIR/merged.sarif           one SARIF log for the run, baselineState on every result
    DIR/summary.md             markdown summary for CI job summaries
    DIR/dashboard.html         the self-contained dashboard

Each finished model goes to the results store at once (one transaction), so
Ctrl-C or a crash of the job loses nothing already finished.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence, TextIO

from onnxsight.zoo import _sarif
from onnxsight.zoo._baseline import REGRESSIONS, RegressionPolicy, auto_baseline, compare
from onnxsight.zoo._executors import Limits, make_executor
from onnxsight.zoo._progress import Progress
from onnxsight.zoo._result import PASSED, ModelResult
from onnxsight.zoo._spec import Suite, load_suites
from onnxsight.zoo._store import ResultsStore, default_store_path
from onnxsight.zoo._summary import console_table, markdown_summary

FAIL_ON = ("new-errors", "any-error", "never")
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class RunOptions:
    """The options of ``onnxsight zoo run`` (see ``onnxsight zoo run --help``)."""

    suites: tuple[str, ...]
    out_dir: str
    jobs: int = 1
    timeout: float = 900.0
    memory_limit_mb: float | None = None
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    per_node: bool = False
    baseline: str | None = None
    executor: str = "local"
    ray_address: str | None = None
    filter: str | None = None
    resume: bool = False
    store: str | None = None
    opset: int | None = None
    fail_on: str = "new-errors"
    policy: RegressionPolicy = field(default_factory=RegressionPolicy)


@dataclass
class RunOutcome:
    """What a run produced."""

    run_id: str
    out_dir: str
    results: list[ModelResult]
    changes: list[dict[str, Any]]
    skipped: list[tuple[str, str]]
    baseline: str | None
    interrupted: bool
    paths: dict[str, str]
    exit_code: int


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "_"


def _tasks(suites: Sequence[Suite], options: RunOptions) -> list[dict[str, Any]]:
    cuda = any("CUDA" in p or "Tensorrt" in p for p in options.providers)
    threads = max(1, (os.cpu_count() or 1) // max(1, options.jobs))  # no oversubscription with --jobs N
    tasks = []
    for suite in suites:
        for spec in suite.specs:
            if not spec.matches(options.filter):
                continue
            file, line = spec.source
            tasks.append({
                "model": spec.name, "suite": suite.ref, "suite_name": suite.name, "tags": list(spec.tags),
                "model_dir": os.path.join(os.path.abspath(options.out_dir), "models", _safe(suite.name),
                                          _safe(spec.name)),
                "providers": list(options.providers), "per_node": options.per_node, "opset": options.opset,
                "source": {"file": file, "line": line} if file else {}, "gpu": cuda or "gpu" in spec.tags,
                "threads": threads,
            })
    return tasks


def _run_identity(options: RunOptions) -> tuple[str, RunOptions]:
    """The run id (new, or the interrupted run's with --resume) and the options to use."""
    meta_path = os.path.join(options.out_dir, "run.json")
    if options.resume and os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as handle:
            meta = json.load(handle)
        if not options.suites:
            options = dataclasses.replace(options, suites=tuple(meta["options"]["suites"]),
                                          filter=options.filter or meta["options"].get("filter"))
        return meta["run_id"], options
    if not options.suites:
        raise ValueError("no suite given (--suite), and nothing to resume in " + options.out_dir)
    run_id = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    os.makedirs(options.out_dir, exist_ok=True)
    record = {"run_id": run_id, "started": time.time(), "options": {
        k: v for k, v in dataclasses.asdict(options).items() if k != "policy"}}
    with open(meta_path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1, default=str)
    return run_id, options


def _load_baseline(spec: str | None, store: ResultsStore, run_id: str
                   ) -> tuple[str | None, list[ModelResult] | None, dict[str, Any] | None]:
    """(label, records, merged SARIF) of the baseline: a run folder, or ``auto`` (the previous stored run)."""
    if not spec:
        return None, None, None
    if spec == "auto":
        previous = auto_baseline(store, run_id)  # the same suites only, never a run of others
        if previous is None:
            return None, None, None
        info = store.run_info(previous) or {}
        records = store.records(previous)
        log = _sarif.read_json(os.path.join(str(info.get("out_dir", "")), "merged.sarif"))
        return previous, records, log
    records = read_run_dir(spec)
    if records is None:
        raise ValueError(f"baseline {spec} is not a zoo run folder (no results.json or models/*/result.json)")
    return os.path.abspath(spec), records, _sarif.read_json(os.path.join(spec, "merged.sarif"))


def read_run_dir(out_dir: str) -> list[ModelResult] | None:
    """Every record of a run folder: results.json, else the per-model result.json files."""
    path = os.path.join(out_dir, "results.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return [ModelResult.from_dict(d) for d in json.load(handle)]
    models = os.path.join(out_dir, "models")
    if not os.path.isdir(models):
        return None
    found = []
    for root, _, files in os.walk(models):
        if "result.json" in files:
            found.append(ModelResult.read(os.path.join(root, "result.json")))
    return sorted(found, key=lambda r: (r.suite, r.name))


def run_info(out_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(out_dir, "run.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def exit_code(results: Sequence[ModelResult], changes: Sequence[dict[str, Any]], *, fail_on: str,
              has_baseline: bool) -> int:
    """``never``: 0; ``any-error``: 1 if a model did not pass; ``new-errors``: 1 on a regression or a
    failing model that did not fail in the baseline (every failing model when there is no baseline)."""
    if fail_on == "never":
        return EXIT_OK
    failing = [r for r in results if r.status != PASSED]
    if fail_on == "any-error" or not has_baseline:
        return EXIT_FAILED if failing else EXIT_OK
    new_model = {c["model"] for c in changes if c["kind"] == "new-model"}
    if any(c["regression"] for c in changes) or any(r.name in new_model for r in failing):
        return EXIT_FAILED
    return EXIT_OK


def run(options: RunOptions, *, stream: TextIO | None = None, progress: bool = True) -> RunOutcome:
    """Run the zoo job. Ctrl-C stops cleanly: finished results are kept and reported (exit code 130)."""
    stream = stream or sys.stderr
    if options.fail_on not in FAIL_ON:
        raise ValueError(f"--fail-on must be one of {', '.join(FAIL_ON)}, got {options.fail_on!r}")
    run_id, options = _run_identity(options)
    suites = load_suites(list(options.suites))
    skipped = [(s.name, s.skipped) for s in suites if s.skipped]
    skipped += [(f"{s.name}/{model}", reason) for s in suites for model, reason in s.skipped_models]
    for name, reason in skipped:  # a model as suite/model
        stream.write(f"skipped {'model' if '/' in name else 'suite'} {name}: {reason}\n")
    tasks = _tasks(suites, options)
    store = ResultsStore(options.store or default_store_path(options.out_dir))
    store.begin_run(run_id, out_dir=options.out_dir, suites=[s.name for s in suites], host=platform.node(),
                    options={k: v for k, v in dataclasses.asdict(options).items() if k != "policy"})
    results: dict[str, ModelResult] = {}
    if options.resume:
        for task in tasks:
            path = os.path.join(task["model_dir"], "result.json")
            if os.path.exists(path):
                results[task["model"]] = ModelResult.read(path)
        store.add_results(run_id, results.values())
    todo = [t for t in tasks if t["model"] not in results]
    if options.resume:
        stream.write(f"resuming run {run_id}: {len(results)} finished, {len(todo)} to run\n")
    bar = Progress(len(tasks), done=len(results), stream=stream, enabled=progress)
    for done in results.values():
        bar.count(done)

    def on_result(result: ModelResult) -> None:
        results[result.name] = result
        store.add_results(run_id, [result])
        bar.finish(result)

    interrupted = False
    executor = make_executor(options.executor, jobs=options.jobs, ray_address=options.ray_address)
    try:
        executor.run(todo, Limits(options.timeout, options.memory_limit_mb), on_start=bar.start, on_result=on_result)
    except KeyboardInterrupt:
        interrupted = True
        stream.write(f"\ninterrupted: {len(results)} of {len(tasks)} models finished and kept; "
                     f"finish with --resume --out {options.out_dir}\n")
    finally:
        bar.close()
    ordered = [results[t["model"]] for t in tasks if t["model"] in results]
    outcome = finish(run_id, options, ordered, store, skipped=skipped, interrupted=interrupted)
    if progress:
        stream.write(console_table(ordered) + "\n")
    return outcome


def finish(run_id: str, options: RunOptions, results: list[ModelResult], store: ResultsStore, *,
           skipped: list[tuple[str, str]], interrupted: bool) -> RunOutcome:
    """Baseline comparison, SARIF, results.json, summary and dashboard for a (possibly partial) run."""
    from onnxsight.zoo._dashboard import write_dashboard

    out_dir = options.out_dir
    label, baseline_records, baseline_log = _load_baseline(options.baseline, store, run_id)
    changes = compare(results, baseline_records, options.policy)
    logs = []
    for result in results:
        log = _sarif.model_log(result)
        model_dir = os.path.join(os.path.abspath(out_dir), "models", _safe(result.suite), _safe(result.name))
        os.makedirs(model_dir, exist_ok=True)
        _sarif.write_json(log, os.path.join(model_dir, "model.sarif"))
        logs.append(log)
    if baseline_records is not None and baseline_log is None:  # rebuild the baseline's SARIF from its records
        baseline_log = _sarif.merged_log([_sarif.model_log(r) for r in baseline_records], None, ())
    merged = _sarif.merged_log(logs, baseline_log, [r.name for r in results])
    paths = {"merged_sarif": _sarif.write_json(merged, os.path.join(out_dir, "merged.sarif"))}
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as handle:
        json.dump([r.to_dict() for r in results], handle, indent=1)
    paths["results"] = os.path.join(out_dir, "results.json")
    store.add_results(run_id, results)
    store.finish_run(run_id, "interrupted" if interrupted else "finished")
    paths["dashboard"] = write_dashboard(out_dir, store=store, run_id=run_id, results=results, changes=changes,
                                         baseline=label, skipped=skipped)
    paths["summary"] = os.path.join(out_dir, "summary.md")
    with open(paths["summary"], "w", encoding="utf-8") as handle:
        handle.write(markdown_summary(results, run_id=run_id, changes=changes, baseline=label, skipped=skipped,
                                      interrupted=interrupted,
                                      artifacts={"dashboard": paths["dashboard"],
                                                 "merged SARIF": paths["merged_sarif"]}))
    code = EXIT_INTERRUPTED if interrupted else exit_code(results, changes, fail_on=options.fail_on,
                                                         has_baseline=baseline_records is not None)
    with open(os.path.join(out_dir, "changes.json"), "w", encoding="utf-8") as handle:
        json.dump({"baseline": label, "changes": changes, "regressions": sum(c["kind"] in REGRESSIONS
                                                                              for c in changes)}, handle, indent=1)
    return RunOutcome(run_id, out_dir, results, changes, skipped, label, interrupted, paths, code)
