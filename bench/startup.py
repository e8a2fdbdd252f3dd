"""Benchmark: how long the command line and ``import onnxsight`` take to start, as whole processes.

Each command runs once untimed (warm file cache), then ``--runs`` times; the
table gives the median and the range of the wall-clock time from process
start to exit, with the budget the light entry points must stay under
(``onnxsight --help`` and ``onnxsight rules`` load no torch:
tests/test_imports.py checks that; this measures what it buys). Two
references: the interpreter alone (``python -c pass``), the floor; and
``import torch``, what every one of them would cost if the top level
imported the exporter.

    .venv/bin/python bench/startup.py              # 10 runs each, markdown table
    make bench-startup
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

BUDGET_S = 0.5


def _commands() -> list[tuple[str, list[str], float | None]]:
    """(label, argv, budget in seconds or None); the venv's console script when there is one."""
    script = os.path.join(os.path.dirname(sys.executable), "onnxsight")
    cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "onnxsight"]
    return [
        ("onnxsight --help", [*cli, "--help"], BUDGET_S),
        ("onnxsight rules", [*cli, "rules"], BUDGET_S),
        ("onnxsight rules OPS001", [*cli, "rules", "OPS001"], BUDGET_S),
        ('python -c "import onnxsight"', [sys.executable, "-c", "import onnxsight"], BUDGET_S),
        ('python -c "pass" (reference: the interpreter alone)', [sys.executable, "-c", "pass"], None),
        ('python -c "import torch" (reference)', [sys.executable, "-c", "import torch"], None),
    ]


def _time_once(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


def measure(argv: list[str], runs: int) -> list[float]:
    """Wall-clock seconds of ``runs`` runs of ``argv``, after one untimed warm-up run."""
    _time_once(argv)
    return [_time_once(argv) for _ in range(runs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command (at least 5; default 10)")
    options = parser.parse_args()
    if options.runs < 5:
        parser.error("--runs must be at least 5")
    print(f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{options.runs} runs after 1 warm-up, wall clock per process\n")
    print("| command | median | min - max | budget |")
    print("|---|---:|---:|---|")
    over = []
    for label, argv, budget in _commands():
        times = measure(argv, options.runs)
        median = statistics.median(times)
        verdict = "" if budget is None else f"< {budget:.1f} s " + ("ok" if median < budget else "**over**")
        if budget is not None and median >= budget:
            over.append(label)
        print(f"| `{label}` | {median:.3f} s | {min(times):.3f} - {max(times):.3f} s | {verdict} |", flush=True)
    if over:
        print(f"\nover budget: {', '.join(over)}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
