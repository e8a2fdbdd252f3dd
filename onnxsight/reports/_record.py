"""RunRecord: everything one export/verify run produced, as plain JSON-ready data.

The markdown and HTML renderers read a RunRecord and nothing else, so a report
can be re-rendered later (``onnxsight report run.json``) on a machine that has
neither the model nor its source files: source snippets are copied into the
record when it is built.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

from onnxsight.reports._files import write_text_atomic

SCHEMA_VERSION = 1

# Stages in the order an export runs them; the reports list every one, "not run" when absent.
STAGE_ORDER = ("arguments", "capture", "decompose", "translate", "check", "save", "onnxruntime", "accuracy")


@dataclass
class RunRecord:
    """One run of onnxsight on one model.

    ``status`` is ``"ok"``, ``"export failed"`` or ``"verification failed"``.
    ``diagnostics`` are :meth:`Diagnostic.to_dict` rows with ``rule_name``,
    ``fix`` and ``snippet`` (``[[line, text], ...]``) added. ``verification``
    is ``None`` or a dict with ``passed``, ``mode``, ``outputs``,
    ``root_causes``, ``worst_nodes`` and ``nodes`` (row dicts). ``generation`` (kind ``"generation"``) is
    a verified generation's summary: ``passed``, ``requested_steps``, ``steps_agreed``, ``first_divergence``,
    ``first_token_difference``, ``atol``, ``encoder`` and one row per ``steps``; ``verification`` is then
    the per-node comparison of its first diverging step.
    """

    model: str
    created: str
    kind: str = "export"                                   # "export" | "verify" | "generation"
    status: str = "ok"
    error: dict[str, Any] | None = None                    # {"type", "stage", "summary"}
    opset: int | None = None
    stages: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    unsupported: list[dict[str, Any]] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    verification: dict[str, Any] | None = None
    generation: dict[str, Any] | None = None
    program_text: str = ""
    files: dict[str, str] = field(default_factory=dict)    # kind -> path of the files of this run
    schema: int = SCHEMA_VERSION

    @property
    def failed(self) -> bool:
        return self.status != "ok"

    def counts(self) -> dict[str, int]:
        """Number of diagnostics per level (error, warning, note)."""
        out = {"error": 0, "warning": 0, "note": 0}
        for diagnostic in self.diagnostics:
            level = str(diagnostic.get("level", "note"))
            out[level] = out.get(level, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunRecord":
        """Build from :meth:`to_dict` output; unknown keys (a newer schema) are ignored."""
        if not isinstance(data, Mapping) or "model" not in data or "created" not in data:
            raise ValueError("not an onnxsight run record (no 'model'/'created' keys)")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, path: str | os.PathLike) -> str:
        """Write as JSON, atomically; returns the path."""
        return write_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "RunRecord":
        with open(path, encoding="utf-8") as handle:
            try:
                data = json.load(handle)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{os.fspath(path)} is not JSON: {exc}") from exc
        return cls.from_dict(data)


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: non-finite floats become strings, numpy scalars plain numbers."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype") and tuple(getattr(value, "shape", (1,))) == ():
        return jsonable(value.item())  # numpy / torch scalars
    return str(value)


def write_atomic(path: str | os.PathLike, text: str) -> str:
    """Write ``text`` to ``path`` atomically (see :func:`onnxsight.reports._files.write_text_atomic`)."""
    return write_text_atomic(path, text)


REPORT_SUFFIXES = {"record": "_run.json", "markdown": "_report.md", "html": "_report.html", "sarif": ".sarif"}


def safe_stem(name: str) -> str:
    """A model name as a file-name fragment (letters, digits, ``._-``)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")
    return stem[:80] or "model"


def reserve_paths(directory: str | os.PathLike, model: str, timestamp: str) -> dict[str, str]:
    """Paths for a new run's files that no other run has taken: ``<model>_<timestamp>[-N]<suffix>``.

    The run record's path is created exclusively (``O_EXCL``), so two runs in the
    same second, or in two processes, never get the same names.
    """
    directory = os.path.abspath(os.fspath(directory))
    os.makedirs(directory, exist_ok=True)
    base = f"{safe_stem(model)}_{timestamp}"
    for attempt in range(1, 10_000):
        stem = base if attempt == 1 else f"{base}-{attempt}"
        paths = {kind: os.path.join(directory, stem + suffix) for kind, suffix in REPORT_SUFFIXES.items()}
        if any(os.path.exists(p) for p in paths.values()):
            continue
        try:
            os.close(os.open(paths["record"], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        return paths
    raise FileExistsError(f"no free report name for {base} in {directory}")


def paths_for(record_path: str | os.PathLike) -> dict[str, str]:
    """The report paths that belong with a saved run record (``..._run.json``)."""
    record_path = os.path.abspath(os.fspath(record_path))
    suffix = REPORT_SUFFIXES["record"]
    stem = record_path[: -len(suffix)] if record_path.endswith(suffix) else os.path.splitext(record_path)[0]
    return {kind: stem + ext for kind, ext in REPORT_SUFFIXES.items()} | {"record": record_path}
