"""``onnxsight zoo run|list|report``: the command line of the zoo job.

``register(subparsers)`` adds the ``zoo`` command to the main parser; each
leaf sets ``func`` (``args.func(args) -> exit code``). ``main()`` runs it
standalone (``python -m onnxsight.zoo``).

Exit codes of ``zoo run``: 0 nothing to fail on, 1 the ``--fail-on``
condition was met, 2 bad usage (unknown suite, bad option), 130 interrupted
(finished results kept; ``--resume`` completes the run).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any, Sequence

EXIT_USAGE = 3  # as in the main command line


def _split(values: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(p.strip() for v in values or () for p in v.split(",") if p.strip())


def _add_run(sub: Any) -> None:
    p = sub.add_parser("run", help="export and verify every model of the suites, each in its own process",
                       description="Run the zoo job. Exit codes: 0 ok, 1 --fail-on condition met, 3 usage error, "
                                   "130 interrupted (use --resume).")
    p.add_argument("--suite", action="append", metavar="S[,S2]",
                   help="built-in suite (smoke, tricky, transformers, torchvision, timm) or a .py file defining "
                        "suite(); repeatable or comma-separated")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder of the run")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="models run at once (default 1)")
    p.add_argument("--timeout", type=float, default=900.0, metavar="SECONDS", help="per model (default 900)")
    p.add_argument("--memory-limit", type=float, default=None, metavar="MB",
                   help="per model resident memory; a model above it is killed and recorded as oom")
    p.add_argument("--providers", nargs="+", default=["CPUExecutionProvider"], metavar="PROVIDER",
                   help="ONNX Runtime providers (default CPUExecutionProvider)")
    p.add_argument("--per-node", action="store_true", help="verify every intermediate value, not only outputs")
    p.add_argument("--baseline", metavar="DIR|auto", help="compare with a run folder, or the previous stored run")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--ray-address", metavar="ADDRESS", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--filter", metavar="PATTERN", help="model names (globs, comma-separated) or tag:TAG")
    p.add_argument("--resume", action="store_true", help="finish an interrupted run in --out")
    p.add_argument("--store", metavar="PATH", help="SQLite results store (default: beside --out)")
    p.add_argument("--opset", type=int, default=None, help="opset for models that do not fix one")
    p.add_argument("--fail-on", choices=("new-errors", "any-error", "never"), default="new-errors")
    p.add_argument("--accuracy-factor", type=float, default=None, help="accuracy regression factor (default 10)")
    p.add_argument("--time-factor", type=float, default=None, help="export-time regression factor (default 2)")
    p.add_argument("--summary", metavar="PATH",
                   help="also append the markdown summary here (default: $GITHUB_STEP_SUMMARY when set)")
    p.add_argument("--quiet", action="store_true", help="no progress line and no final table")
    p.set_defaults(func=cmd_run)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``zoo run|list|report`` to the main command line's subparsers."""
    zoo = subparsers.add_parser("zoo", help="the model-zoo verification job",
                                description="Export and verify model suites, compare with a baseline, report.")
    sub = zoo.add_subparsers(dest="zoo_command", metavar="{run,list,report}")
    sub.required = True
    _add_run(sub)
    p = sub.add_parser("list", help="list the models of the suites")
    p.add_argument("--suite", action="append", metavar="S[,S2]", help="default: every built-in suite")
    p.add_argument("--filter", metavar="PATTERN")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("report", help="(re)write a run folder's HTML dashboard")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--store", metavar="PATH")
    p.set_defaults(func=cmd_report)
    return zoo


def _stop_on_sigterm() -> Any:
    """CI cancels jobs with SIGTERM: treat it like Ctrl-C (stop cleanly, keep finished results)."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    return signal.signal(signal.SIGTERM, interrupt)


def cmd_run(args: argparse.Namespace) -> int:
    from onnxsight.zoo._baseline import RegressionPolicy
    from onnxsight.zoo._runner import RunOptions, run

    defaults = RegressionPolicy()
    policy = RegressionPolicy(accuracy_factor=args.accuracy_factor or defaults.accuracy_factor,
                              time_factor=args.time_factor or defaults.time_factor)
    options = RunOptions(suites=_split(args.suite), out_dir=args.out, jobs=args.jobs, timeout=args.timeout,
                         memory_limit_mb=args.memory_limit, providers=_split(args.providers), per_node=args.per_node,
                         baseline=args.baseline, executor=args.executor, ray_address=args.ray_address,
                         filter=args.filter, resume=args.resume, store=args.store, opset=args.opset,
                         fail_on=args.fail_on, policy=policy)
    previous = _stop_on_sigterm()
    try:
        outcome = run(options, progress=not args.quiet)
    except (ValueError, RuntimeError) as exc:
        print(f"onnxsight zoo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    summary_path = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        with open(outcome.paths["summary"], encoding="utf-8") as src, open(summary_path, "a", encoding="utf-8") as dst:
            dst.write(src.read())
    print(f"dashboard: {outcome.paths['dashboard']}")
    print(f"merged SARIF: {outcome.paths['merged_sarif']}")
    return outcome.exit_code


def cmd_list(args: argparse.Namespace) -> int:
    from onnxsight.zoo._spec import BUILTIN_SUITES, load_suites

    try:
        suites = load_suites(list(_split(args.suite) or BUILTIN_SUITES))
    except ValueError as exc:
        print(f"onnxsight zoo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for suite in suites:
        if suite.skipped:
            print(f"{suite.name}: skipped: {suite.skipped}")
            continue
        specs = [s for s in suite.specs if s.matches(args.filter)]
        print(f"{suite.name}: {len(specs)} models")
        for spec in specs:
            print(f"  {spec.name:<28} {' '.join(spec.tags)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from onnxsight.zoo._report import report

    try:
        path = report(args.dir, store_path=args.store)
    except ValueError as exc:
        print(f"onnxsight zoo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"dashboard: {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onnxsight")
    register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error
        return EXIT_USAGE if exc.code else 0
    return int(args.func(args))
