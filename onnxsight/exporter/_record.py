"""The export record: what each stage did, how long it took and what memory it used (read by reports)."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Iterator


@dataclass
class StageRecord:
    name: str
    status: str = "running"          # "ok" | "failed" | "skipped" | "running"
    seconds: float = 0.0
    detail: str = ""
    # Bytes. ``rss_after``: the process's resident set when the stage ended. ``peak_rss``: the
    # highest resident set during the stage, from the kernel's high-water mark (ru_maxrss) when the
    # stage raised the process's peak, else the larger of the RSS at start and end (the stage stayed
    # under an earlier peak, so its own peak is known only that far: a lower bound). No sampling
    # thread: two system calls per stage. None where the platform cannot tell.
    peak_rss: int | None = None
    rss_after: int | None = None


def _rss() -> int | None:
    """The process's current resident set in bytes (psutil), None if unavailable."""
    try:
        import psutil
        return int(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001 - memory figures are informative only, never fail an export
        return None


def _max_rss() -> int | None:
    """The process's lifetime peak resident set in bytes (getrusage), None where there is none."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS: bytes; Linux: KiB


def _finish_memory(record: StageRecord, rss_start: int | None, max_start: int | None) -> None:
    """Fill ``peak_rss`` and ``rss_after`` (see StageRecord); a cheap pair of system calls."""
    record.rss_after = _rss()
    max_end = _max_rss()
    known = [value for value in (rss_start, record.rss_after) if value is not None]
    if max_start is not None and max_end is not None and max_end > max_start:
        known.append(max_end)  # the process's peak was set during this stage
    record.peak_rss = max(known) if known else None


@dataclass(frozen=True)
class CaptureAttempt:
    strategy: str
    success: bool
    seconds: float
    error_type: str | None = None
    error: str | None = None
    rule: str | None = None
    # torch's own log lines (WARNING and above) during the attempt: kept for the report, never printed.
    log: tuple[str, ...] = ()


@dataclass
class ExportRecord:
    """Mutable while the export runs; frozen in spirit once returned with the program."""

    model_name: str = "model"
    opset: int = 18
    stages: list[StageRecord] = field(default_factory=list)
    attempts: list[CaptureAttempt] = field(default_factory=list)
    # Model and run facts for the reports. ``facts["dynamic_dims"]``: the specialisation audit, one dict
    # per dim asked dynamic (input, axis, dim, status, detail, file, line; see exporter/capture/_audit.py).
    facts: dict[str, Any] = field(default_factory=dict)
    # The captured (then decomposed) program, kept for the reports' model facts even when a
    # later stage fails; never serialised.
    exported_program: Any = field(default=None, repr=False, compare=False)

    @contextmanager
    def stage(self, name: str) -> Iterator[StageRecord]:
        record = StageRecord(name)
        self.stages.append(record)
        rss_start, max_start = _rss(), _max_rss()
        start = time.perf_counter()
        try:
            yield record
        except BaseException as exc:
            record.status = "failed"
            record.detail = record.detail or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise
        finally:
            record.seconds = time.perf_counter() - start
            _finish_memory(record, rss_start, max_start)
        if record.status == "running":
            record.status = "ok"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, exported_program=None))
        del data["exported_program"]
        return data
