"""Supervising one model's process: timeout, memory limit, crashes, Ctrl-C.

The worker runs in a new session (its own process group), so a terminal's
Ctrl-C reaches only the job, which then kills the model processes itself and
keeps every finished result. Memory is watched with psutil (resident set of
the worker and its children); a model over the limit is killed and recorded
as out of memory, a model past the timeout as timed out, a model killed by a
signal (segfault, abort) as crashed, each with the tail of its stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext, Location
from onnxsight.zoo._result import CRASHED, OOM, TIMEOUT, ModelResult

STDERR_TAIL_CHARS = 4000
POLL_SECONDS = 0.05


def _tree_rss(process: psutil.Process) -> int:
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _read_text(path: str, limit: int | None = None) -> str:
    try:
        with open(path, "rb") as handle:
            if limit is not None:
                handle.seek(max(0, os.path.getsize(path) - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _abnormal(task: dict[str, Any], status: str, reason: str, *, timeout: float, memory_limit_mb: float | None,
              returncode: int | None) -> ModelResult:
    model_dir = task["model_dir"]
    stage = _read_text(os.path.join(model_dir, "stage")).strip() or "start"
    source = task.get("source") or {}
    location = Location(source["file"], source.get("line")) if source.get("file") else None
    ctx = DiagnosticContext()
    if status == TIMEOUT:
        ctx.emit(rules.ZOO_MODEL_TIMEOUT, location=location, model=task["model"], timeout=f"{timeout:g}", stage=stage)
    elif status == OOM:
        ctx.emit(rules.ZOO_MODEL_OOM, location=location, model=task["model"], limit=f"{memory_limit_mb:g}"
                 if memory_limit_mb else "system", stage=stage)
    else:
        ctx.emit(rules.ZOO_MODEL_CRASHED, location=location, model=task["model"], reason=reason, stage=stage)
    return ModelResult(name=task["model"], suite=task.get("suite_name", ""), status=status, stage=stage,
                       tags=list(task.get("tags", [])), error=reason, returncode=returncode, source=source,
                       diagnostics=[d.to_dict() for d in ctx.diagnostics])


def supervise(task: dict[str, Any], *, timeout: float, memory_limit_mb: float | None = None,
              stop: threading.Event | None = None) -> ModelResult | None:
    """Run one model in its own process; ``None`` when ``stop`` was set before it finished."""
    model_dir = task["model_dir"]
    os.makedirs(model_dir, exist_ok=True)
    for stale in ("result.json", "stage"):
        if os.path.exists(os.path.join(model_dir, stale)):
            os.remove(os.path.join(model_dir, stale))
    task_path = os.path.join(model_dir, "task.json")
    with open(task_path, "w", encoding="utf-8") as handle:
        json.dump(task, handle, indent=1)
    log_path = os.path.join(model_dir, "stderr.txt")
    env = dict(os.environ, PYTHONFAULTHANDLER="1", PYTHONUNBUFFERED="1")
    if task.get("threads"):
        env.setdefault("OMP_NUM_THREADS", str(task["threads"]))
    limit = memory_limit_mb * 1024 * 1024 if memory_limit_mb else None
    started = time.monotonic()
    peak, status, reason = 0, None, ""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "onnxsight.zoo._worker", task_path], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            watched = psutil.Process(proc.pid)
            while proc.poll() is None:
                rss = _tree_rss(watched)
                peak = max(peak, rss)
                if limit is not None and rss > limit:
                    status, reason = OOM, f"resident memory {rss / 2**20:.0f} MB exceeded the limit of " \
                                          f"{memory_limit_mb:g} MB"
                    break
                if time.monotonic() - started > timeout:
                    status, reason = TIMEOUT, f"no result after {timeout:g}s"
                    break
                if stop is not None and stop.wait(POLL_SECONDS):
                    return None
                if stop is None:
                    time.sleep(POLL_SECONDS)
        finally:
            if proc.poll() is None:
                _kill(proc)
            proc.wait()
    tail = _read_text(log_path, STDERR_TAIL_CHARS)
    result_path = os.path.join(model_dir, "result.json")
    if status is None and os.path.exists(result_path):
        result = ModelResult.read(result_path)
        result.returncode = proc.returncode
        result.peak_mb = max(result.peak_mb or 0.0, peak / 2**20)
        if result.status != "passed" and not result.stderr_tail:
            result.stderr_tail = tail
        return result
    if status is None:
        if proc.returncode == -signal.SIGKILL:
            status, reason = OOM, "killed by SIGKILL without a result (the system's out-of-memory killer)"
        elif proc.returncode < 0:
            status, reason = CRASHED, f"killed by {_signal_name(proc.returncode)}"
        else:
            status, reason = CRASHED, f"exited with code {proc.returncode} without a result"
    result = _abnormal(task, status, reason, timeout=timeout, memory_limit_mb=memory_limit_mb,
                       returncode=proc.returncode)
    result.stderr_tail, result.peak_mb = tail, peak / 2**20
    result.seconds = time.monotonic() - started
    result.write(result_path)
    return result
