"""The export record: what each stage did and how long it took (read by reports)."""

from __future__ import annotations

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
    # per dim asked dynamic (input, axis, dim, status, detail, file, line; see exporter/_audit.py).
    facts: dict[str, Any] = field(default_factory=dict)
    # The captured (then decomposed) program, kept for the reports' model facts even when a
    # later stage fails; never serialised.
    exported_program: Any = field(default=None, repr=False, compare=False)

    @contextmanager
    def stage(self, name: str) -> Iterator[StageRecord]:
        record = StageRecord(name)
        self.stages.append(record)
        start = time.perf_counter()
        try:
            yield record
        except BaseException as exc:
            record.status = "failed"
            record.detail = record.detail or f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise
        finally:
            record.seconds = time.perf_counter() - start
        if record.status == "running":
            record.status = "ok"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, exported_program=None))
        del data["exported_program"]
        return data
