"""Formatting helpers shared by the markdown and HTML renderers (pure functions of record data)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from onnxsight.reports._record import STAGE_ORDER, RunRecord

REQUIRED_STAGES = ("arguments", "capture", "decompose", "translate", "check")
LEVEL_ORDER = {"error": 0, "warning": 1, "note": 2}


def seconds(value: Any) -> str:
    """``0.123`` -> ``123 ms``; ``12.3`` -> ``12.3 s``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return ""
    return f"{number * 1000:.0f} ms" if number < 1 else f"{number:.2f} s"


def size(value: Any) -> str:
    """Bytes as B / KB / MB / GB."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(number) < 1024 or unit == "GB":
            return f"{number:.0f} {unit}" if unit == "B" else f"{number:.1f} {unit}"
        number /= 1024
    return str(value)


def number(value: Any) -> str:
    """Metrics: 3 significant digits, scientific when small; strings (``"inf"``) and None as given."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.3g}" if "e" in f"{value:.3g}" else f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


def shape(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def where(location: Mapping[str, Any] | None) -> str:
    """``file:line`` of a location dict."""
    if not location or not location.get("file"):
        return ""
    line = location.get("line")
    return f"{location['file']}:{line}" if line else str(location["file"])


#: How each dim asked dynamic ended (``facts["dynamic_dims"]``, from the capture's audit).
DIM_STATUS = {"dynamic": "kept dynamic", "narrowed": "narrowed (fix applied)", "refused": "refused (static)",
              "unknown": "unknown"}


def dynamic_dim_rows(run: RunRecord) -> list[dict[str, Any]]:
    """The specialisation audit as rows: input, axis, dim, status (in words), detail, source (file:line, code)."""
    return [{"input": d.get("input"), "axis": d.get("axis"), "dim": d.get("dim"), "status": d.get("status"),
             "label": DIM_STATUS.get(str(d.get("status")), str(d.get("status"))), "detail": d.get("detail") or "",
             "source": where({"file": d.get("file"), "line": d.get("line")}), "code": d.get("code") or ""}
            for d in run.facts.get("dynamic_dims") or []]


def stage_rows(run: RunRecord) -> list[dict[str, Any]]:
    """Every stage in run order; export stages the run never reached are listed as ``not run``."""
    seen = {stage["name"] for stage in run.stages}
    rows = [dict(stage) for stage in run.stages]
    if run.kind == "export":
        rows += [{"name": name, "status": "not run", "seconds": None, "detail": ""}
                 for name in REQUIRED_STAGES if name not in seen]
    order = {name: index for index, name in enumerate(STAGE_ORDER)}
    return sorted(rows, key=lambda r: order.get(r["name"], len(order)))


def group_by_rule(diagnostics: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Diagnostics grouped by rule, errors first, then by code."""
    groups: dict[str, dict[str, Any]] = {}
    for diagnostic in diagnostics:
        code = str(diagnostic.get("rule"))
        group = groups.setdefault(code, {"code": code, "name": diagnostic.get("rule_name", ""),
                                         "level": diagnostic.get("level", "note"), "items": []})
        if LEVEL_ORDER.get(str(diagnostic.get("level")), 3) < LEVEL_ORDER.get(group["level"], 3):
            group["level"] = diagnostic.get("level")
        group["items"].append(diagnostic)
    return sorted(groups.values(), key=lambda g: (LEVEL_ORDER.get(g["level"], 3), g["code"]))


def headline(run: RunRecord) -> str:
    """One line: what happened to this model."""
    counts = run.counts()
    tally = f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['note']} note(s)"
    if run.error:
        return f"{run.status} at stage {run.error.get('stage')}: {run.error.get('summary')} ({tally})"
    g = run.generation
    if g is not None:
        return f"{generation_verdict(g)} ({tally})"
    v = run.verification
    if v is not None:
        verdict = (f"verified: all {v.get('nodes_compared', 0)} compared values within tolerance" if v.get("passed")
                   else f"verification failed: {v.get('nodes_failed', 0)} of {v.get('nodes_compared', 0)} values "
                        f"out of tolerance, {len(v.get('root_causes') or [])} root cause(s)")
        return f"{verdict} ({tally})"
    return f"{'exported' if run.status == 'ok' else run.status} ({tally})"


def generation_verdict(g: Mapping[str, Any]) -> str:
    """A verified generation in one line: every step agreed, or where it first diverged."""
    steps, requested = len(g.get("steps") or []), g.get("requested_steps")
    first = g.get("first_divergence")
    tie = g.get("first_token_difference")
    if first is None and g.get("passed"):
        extra = f"; a token differs at a near-tie at step {tie['step']}" if tie else ""
        return f"generation verified: all {steps} steps agree with PyTorch{extra}"
    if first is None:
        return f"generation failed: {steps} of {requested} steps ran"
    where = "the encoder" if first.get("step") == -1 else f"step {first.get('step')} ({first.get('kind')})"
    return (f"generation diverged at {where}: {g.get('steps_agreed', 0)} of {requested} steps agree, "
            f"{len(g.get('root_causes') or [])} root cause(s)")


def total_seconds(run: RunRecord) -> float:
    return sum(float(stage.get("seconds") or 0.0) for stage in run.stages)


def weights_rows(facts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Parameters and buffers by dtype as table rows."""
    rows = []
    for kind in ("parameters", "buffers"):
        for dtype, row in sorted((facts.get(kind) or {}).items()):
            rows.append({"kind": kind, "dtype": dtype, **row})
    return rows


def histogram_rows(histogram: Mapping[str, int] | None) -> list[tuple[str, int]]:
    return sorted((histogram or {}).items(), key=lambda item: (-int(item[1]), item[0]))


METRIC_COLUMNS = ("max_abs_diff", "max_rel_diff", "mismatch_fraction", "cosine")


# A message longer than this (or on several lines) is shown by its first line, the whole of it
# folded once below: torch's messages run to pages, and a table column holding one squeezes the
# columns beside it into fragments.
SHORT_TEXT = 160


def is_long(text: Any) -> bool:
    """Whether ``text`` is folded (several lines, or longer than ``SHORT_TEXT``)."""
    value = "" if text is None else str(text).strip()
    return "\n" in value or len(value) > SHORT_TEXT


def first_line(text: Any, limit: int = SHORT_TEXT) -> str:
    """The first non-empty line of ``text``, cut at ``limit`` characters with an ellipsis."""
    value = "" if text is None else str(text)
    line = next((part.strip() for part in value.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "\u2026"


def attempt_error(attempt: Mapping[str, Any], limit: int = 100) -> str:
    """A capture attempt's error as one short line (its full text is in the CAP diagnostics)."""
    if not attempt.get("error_type"):
        return ""
    return first_line(f"{attempt['error_type']}: {attempt.get('error') or ''}", limit)
