"""ModelResult: the record of one model in one zoo run (JSON-ready, stored as is)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from onnxsight.reports import write_text_atomic

PASSED, FAILED, ERROR = "passed", "failed", "error"
CRASHED, TIMEOUT, OOM = "crashed", "timeout", "oom"
STATUSES = (PASSED, FAILED, ERROR, CRASHED, TIMEOUT, OOM)
ABNORMAL = frozenset({CRASHED, TIMEOUT, OOM})   # the process did not finish on its own
STAGES = ("start", "build", "eager", "export", "save", "run", "verify", "done")


@dataclass
class ModelResult:
    """What happened to one model: stage reached, status, timings, sizes, accuracy, diagnostics.

    ``status`` is one of :data:`STATUSES`: ``failed`` means onnxsight reported
    a problem (export error, accuracy mismatch, or an exported program that
    differs from the model's eager forward: ACC007); ``error`` that the model
    itself could not be built or run eagerly; the last three that its process
    crashed, hung or ran out of memory.
    """

    name: str
    suite: str
    status: str
    stage: str = "start"
    tags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    export_stages: list[dict[str, Any]] = field(default_factory=list)
    peak_mb: float | None = None
    onnx_bytes: int | None = None
    node_count: int | None = None
    op_counts: dict[str, int] = field(default_factory=dict)
    max_abs_diff: float | None = None
    reference_max_abs: float | None = None                          # scale of the eager outputs
    outputs_compared: int = 0
    verification: dict[str, Any] | None = None
    root_cause: dict[str, Any] | None = None
    failing_ops: list[str] = field(default_factory=list)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    stderr_tail: str = ""
    returncode: int | None = None
    source: dict[str, Any] = field(default_factory=dict)
    changes: list[dict[str, Any]] = field(default_factory=list)   # regressions against the baseline
    # a generative model verified as a generation: steps, steps_agreed, first_divergence, first_token_difference
    generation: dict[str, Any] | None = None

    @property
    def export_seconds(self) -> float | None:
        return self.timings.get("export")

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelResult":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def write(self, path: str) -> None:
        """Write atomically, so a crash of the job never leaves half a record."""
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1, sort_keys=True))

    @classmethod
    def read(cls, path: str) -> "ModelResult":
        with open(path, encoding="utf-8") as handle:
            return cls.from_dict(json.load(handle))


def _jsonable(value: Any) -> Any:
    """Plain JSON values; non-finite floats become strings, unknown objects their str()."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        try:
            return _jsonable(value.item())
        except (ValueError, RuntimeError):
            pass
    return str(value)


def as_float(value: Any) -> float | None:
    """A stored metric back as a float (``"inf"``/``"nan"`` strings included)."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
