"""Text renderings of a run: the markdown CI summary and the final console table.

Pure functions of the records; cells are escaped for markdown tables.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from onnxsight.zoo._result import ModelResult, as_float

CELL_LIMIT = 120


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    text = " ".join(text.split())
    if len(text) > CELL_LIMIT:
        text = text[:CELL_LIMIT - 1] + "…"
    for char in ("\\", "|", "<", ">", "`", "*", "_", "[", "]"):
        text = text.replace(char, "\\" + char)
    return text


def fmt_diff(value: Any) -> str:
    number = as_float(value)
    return "" if number is None else f"{number:.2e}"


def fmt_seconds(value: Any) -> str:
    number = as_float(value)
    return "" if number is None else f"{number:.2f}"


def steps_agreed(result: ModelResult) -> str:
    """A generation's steps that agree with PyTorch before the first divergence, of those asked (``16/16``);
    empty for a model verified as one call."""
    g = result.generation
    if not g:
        return ""
    return f"{g.get('steps_agreed', 0)}/{g.get('steps', 0)}"


def problem(result: ModelResult) -> str:
    """What went wrong, in one line: failing ops, else the root cause, else the error."""
    if result.failing_ops:
        return "unsupported: " + ", ".join(result.failing_ops)
    cause = result.root_cause or {}
    if cause.get("message"):
        where = f" ({cause['file']}:{cause['line']})" if cause.get("file") and cause.get("line") else ""
        return f"{cause.get('rule', '')} {cause['message']}{where}".strip()
    return (result.error or "").splitlines()[0] if result.error else ""


def counts(results: Sequence[ModelResult]) -> Counter:
    return Counter(r.status for r in results)


def headline(results: Sequence[ModelResult]) -> str:
    tally = counts(results)
    parts = [f"{tally[s]} {s}" for s in ("passed", "failed", "error", "crashed", "timeout", "oom") if tally[s]]
    return f"{len(results)} models: " + (", ".join(parts) if parts else "none")


def markdown_summary(results: Sequence[ModelResult], *, run_id: str, changes: Sequence[dict[str, Any]] = (),
                     baseline: str | None = None, skipped: Sequence[tuple[str, str]] = (),
                     interrupted: bool = False, artifacts: dict[str, str] | None = None) -> str:
    """The job summary for CI (GitHub's $GITHUB_STEP_SUMMARY and the like)."""
    lines = [f"## onnxsight zoo run `{_cell(run_id)}`", "", f"**{headline(results)}**"
             + (" (interrupted: partial results)" if interrupted else ""), ""]
    if baseline is not None:
        lines += [f"### Changes since baseline `{_cell(baseline)}`", ""]
        if changes:
            lines += ["| model | change | detail |", "|---|---|---|"]
            lines += [f"| {_cell(c['model'])} | {'**' + c['kind'] + '**' if c['regression'] else c['kind']} | "
                      f"{_cell(c['detail'])} |" for c in changes]
        else:
            lines.append("No changes.")
        lines.append("")
    generation = any(r.generation for r in results)  # a generation suite: its steps agreed, per model
    lines += ["### Models", "", "| model | suite | status | stage | export s | max abs diff |"
              + (" steps agreed |" if generation else "") + " problem |",
              "|---|---|---|---|---:|---:|" + ("---:|" if generation else "") + "---|"]
    for r in sorted(results, key=lambda r: (r.status == "passed", r.suite, r.name)):
        lines.append(f"| {_cell(r.name)} | {_cell(r.suite)} | {r.status} | {_cell(r.stage)} | "
                     f"{fmt_seconds(r.export_seconds)} | {fmt_diff(r.max_abs_diff)} | "
                     + (f"{steps_agreed(r)} | " if generation else "") + f"{_cell(problem(r))} |")
    for name, reason in skipped:
        lines += ["", f"{'Model' if '/' in name else 'Suite'} **{_cell(name)}** skipped: {_cell(reason)}"]
    if artifacts:
        lines += ["", *[f"- {label}: `{_cell(path)}`" for label, path in artifacts.items()]]
    return "\n".join(lines) + "\n"


def console_table(results: Sequence[ModelResult]) -> str:
    """The final table printed at the end of a run."""
    rows = [("model", "status", "stage", "time s", "peak MB", "max abs diff", "problem")]
    for r in sorted(results, key=lambda r: (r.suite, r.name)):
        peak = f"{r.peak_mb:.0f}" if r.peak_mb else ""
        steps = f"{steps_agreed(r)} steps agree; " if r.generation else ""
        rows.append((r.name, r.status, r.stage, f"{r.seconds:.1f}", peak, fmt_diff(r.max_abs_diff),
                     (steps + problem(r))[:70]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    out = []
    for row in rows:
        out.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return "\n".join(line.rstrip() for line in out)


def results_table(results: Sequence[ModelResult]) -> str:
    """The README's dev-zoo table: model, exported, max abs diff vs eager, status, failing op or problem."""
    lines = ["| model | suite | exported | max abs diff vs eager | max abs eager output | status | failing op / problem |",
             "|---|---|---|---:|---:|---|---|"]
    for r in results:
        exported = "yes" if r.onnx_bytes else "no"
        lines.append(f"| {_cell(r.name)} | {_cell(r.suite)} | {exported} | {fmt_diff(r.max_abs_diff)} | "
                     f"{fmt_diff(r.reference_max_abs)} | {r.status} | "
                     f"{_cell(problem(r)) if r.status != 'passed' else ''} |")
    return "\n".join(lines) + "\n"
