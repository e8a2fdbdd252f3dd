"""Markdown report and CI job summary: pure functions of a :class:`RunRecord`.

Every string that comes from the model or the user is escaped with
backslashes (markdown punctuation, and ``<``/``&`` so that viewers pass no
HTML through), never with HTML entities (which show as ``&gt;`` in raw
markdown and in viewers that do not decode them), or shown inside a code
fence longer than any backtick run in it. Long messages (torch's run to
pages) appear by their first line, the whole text folded once.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from onnxsight.reports import _format as fmt
from onnxsight.reports._record import RunRecord

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#<>&])")
STATUS_MARK = {"ok": "ok", "failed": "FAILED", "not run": "not run", "skipped": "skipped", "running": "running"}
HISTOGRAM_ROWS = 40
SUMMARY_DIAGNOSTICS = 20


def escape(text: Any) -> str:
    """Text safe in markdown prose and table cells: punctuation backslash-escaped, newlines as ``<br>``."""
    value = _MD_SPECIAL.sub(r"\\\1", "" if text is None else str(text))
    return value.replace("\r", "").replace("\n", "<br>")


def code(text: Any) -> str:
    """An inline code span that holds ``text`` verbatim (``|`` escaped for tables)."""
    value = ("" if text is None else str(text)).replace("\n", " ")
    longest = max((len(run) for run in re.findall(r"`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value.replace('|', chr(92) + '|')}{pad}{fence}"


def fence(text: str, language: str = "") -> str:
    """A fenced code block that ``text`` cannot close."""
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=0)
    marks = "`" * max(3, longest + 1)
    return f"{marks}{language}\n{text}\n{marks}"


def folded(text: str, summary: str = "full message", indent: str = "") -> list[str]:
    """``text`` verbatim in a collapsed ``<details>`` block (GitHub and most viewers render it folded)."""
    return [f"{indent}<details><summary>{summary}</summary>", "",
            *(f"{indent}{line}" for line in fence(text, "text").splitlines()), "", f"{indent}</details>"]


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A GFM table; cells are already-formatted markdown."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def render(run: RunRecord) -> str:
    """The full markdown report."""
    parts = [f"# onnxsight report: {escape(run.model)}", "",
             f"**{escape(fmt.headline(run))}**", "",
             f"{escape(run.kind)} run, {escape(run.created)}"
             + (f", opset {run.opset}" if run.opset else "") + f", {fmt.seconds(fmt.total_seconds(run))} in all.", ""]
    for title, section in (("Stages", _stages(run)), ("Dynamic dims", _dynamic_dims(run)),
                           ("Unsupported operators", _unsupported(run)),
                           ("Diagnostics", _diagnostics(run)), ("Generation", _generation(run)),
                           ("Verification", _verification(run)),
                           ("Model", _facts(run)), ("Environment", _environment(run)),
                           ("Files", _files(run))):
        if section:
            parts += [f"## {title}", "", section, ""]
    if run.program_text:
        parts += ["<details><summary>Exported program</summary>", "", fence(run.program_text, "python"), "",
                  "</details>", ""]
    return "\n".join(parts)


def render_summary(run: RunRecord) -> str:
    """A short markdown summary for a CI job summary (``--summary FILE``)."""
    parts = [f"### onnxsight: {escape(run.model)}: {escape(run.status)}", "", escape(fmt.headline(run)), "",
             table(["stage", "status", "time"],
                   ([escape(s["name"]), STATUS_MARK.get(s["status"], escape(s["status"])), fmt.seconds(s["seconds"])]
                    for s in fmt.stage_rows(run))), ""]
    problems = [d for d in run.diagnostics if d.get("level") in ("error", "warning")]
    if problems:
        rows = ([escape(d["rule"]), escape(d["level"]), escape(fmt.first_line(d["message"])),
                 escape(fmt.where(d.get("location")))]
                for d in problems[:SUMMARY_DIAGNOSTICS])
        parts += [table(["rule", "level", "message", "source"], rows), ""]
        if len(problems) > SUMMARY_DIAGNOSTICS:
            parts += [f"... and {len(problems) - SUMMARY_DIAGNOSTICS} more in the report.", ""]
    if run.generation is not None:
        parts += [f"Generation: **{escape(fmt.generation_verdict(run.generation))}**.", ""]
    verification = run.verification
    if verification is not None:
        parts += [f"Verification: **{'passed' if verification.get('passed') else 'failed'}**, "
                  f"{verification.get('nodes_failed', 0)} of {verification.get('nodes_compared', 0)} values "
                  f"out of tolerance, {len(verification.get('root_causes') or [])} root cause(s).", ""]
    if run.files:
        parts += ["Reports: " + ", ".join(code(name) for kind, name in run.files.items() if kind != "record"), ""]
    return "\n".join(parts)


def _stages(run: RunRecord) -> str:
    rows = ([escape(s["name"]), STATUS_MARK.get(s["status"], escape(s["status"])), fmt.seconds(s.get("seconds")),
             fmt.size(s.get("peak_rss")), fmt.size(s.get("rss_after")),
             escape(fmt.first_line(s.get("detail", "")))] for s in fmt.stage_rows(run))
    out = table(["stage", "status", "time", "peak RSS", "RSS after", "detail"], rows)
    if run.attempts:
        attempts = ([escape(a.get("strategy")), "ok" if a.get("success") else "failed", fmt.seconds(a.get("seconds")),
                     escape(a.get("rule") or ""), escape(fmt.attempt_error(a))] for a in run.attempts)
        out += "\n\nCapture attempts:\n\n" + table(["strategy", "result", "time", "rule", "error"], attempts)
    return out


def _dynamic_dims(run: RunRecord) -> str:
    """Every dim asked dynamic: kept, narrowed (with the fix applied) or refused, at the line that decided it."""
    dims = fmt.dynamic_dim_rows(run)
    if not dims:
        return ""
    rows = ([escape(r["input"]), escape(r["axis"]), code(r["dim"]), escape(r["label"]),
             escape(fmt.first_line(r["detail"])),
             " ".join(code(r[key]) for key in ("source", "code") if r[key])]
            for r in dims)
    return table(["input", "axis", "dim", "status", "detail", "source line"], rows)


def _unsupported(run: RunRecord) -> str:
    if not run.unsupported:
        return ""
    rows = ([code(r["op"]), r["count"], escape(r["rule"]), escape(fmt.where(r.get("first_location")))]
            for r in run.unsupported)
    return table(["operator", "count", "rule", "first source line"], rows)


def _diagnostics(run: RunRecord) -> str:
    if not run.diagnostics:
        return "No diagnostics."
    out = []
    for group in fmt.group_by_rule(run.diagnostics):
        out += [f"### {escape(group['code'])} {escape(group['name'])} ({escape(group['level'])}, "
                f"{len(group['items'])})", ""]
        for diagnostic in group["items"]:
            out += _diagnostic(diagnostic)
    return "\n".join(out).rstrip()


def _diagnostic(d: Mapping[str, Any]) -> list[str]:
    message = d.get("message")
    lines = [f"- **{escape(d.get('level'))}** {escape(fmt.first_line(message) if fmt.is_long(message) else message)}"]
    location = fmt.where(d.get("location"))
    if location:
        module = f" (module {code(d['module_path'])})" if d.get("module_path") else ""
        lines.append(f"  at {code(location)}{module}")
    if fmt.is_long(message):
        lines += ["", *folded(str(message), indent="  ")]
    snippet = d.get("snippet") or []
    if snippet:
        line = (d.get("location") or {}).get("line")
        text = "\n".join(f"{'>' if n == line else ' '}{n:5d} | {t}" for n, t in snippet)
        lines += ["", *("  " + part for part in fence(text, "python").splitlines())]
    if d.get("fix"):
        lines += ["", f"  Fix: {escape(d['fix'])}"]
    lines.append("")
    return lines


def _verification(run: RunRecord) -> str:
    v = run.verification
    if v is None:
        return ""
    mode = f" ({escape(v['mode'])} mode)" if v.get("mode") else ""
    out = [f"**{'Passed' if v.get('passed') else 'Failed'}**{mode}: {v.get('nodes_failed', 0)} of "
           f"{v.get('nodes_compared', 0)} compared values out of tolerance.", ""]
    columns = ["value", "dtype", "shape", *fmt.METRIC_COLUMNS, "passed"]
    if v.get("outputs"):
        out += ["Outputs:", "", _rows_table(v["outputs"], columns), ""]
    if v.get("root_causes"):
        out += ["Root causes (first values to diverge):", "",
                _rows_table(v["root_causes"], ["value", "target", "onnx_op", "max_abs_diff", "max_rel_diff",
                                               "source"]), ""]
    if v.get("worst_nodes"):
        out += ["Worst values:", "", _rows_table(v["worst_nodes"], ["value", "target", "onnx_op", *fmt.METRIC_COLUMNS,
                                                                   "root_cause"]), ""]
    if v.get("quantization_layers"):
        out += [QUANTIZATION_TITLE + ":", "", _rows_table(v["quantization_layers"], list(QUANTIZATION_COLUMNS)), ""]
    return "\n".join(out).rstrip()


GENERATION_COLUMNS = ("step", "phase", "past_length", "tokens_agree", "max_logit_diff", "max_cache_diff", "margin",
                      "near_tie", "divergence")
SPARK = "▁▂▃▄▅▆▇█"


def _generation(run: RunRecord) -> str:
    """The per-step table of a verified generation, with its largest logit difference per step as a text chart
    (the HTML report draws it)."""
    g = run.generation
    if g is None:
        return ""
    out = [f"**{escape(fmt.generation_verdict(g))}**, on {escape(', '.join(g.get('providers') or []))}; "
           f"a batch of {g.get('batch')}, prompt length {g.get('prompt_length')}.", ""]
    encoder = g.get("encoder")
    if encoder:
        out += [f"Encoder: {'agrees' if encoder.get('passed') else 'differs'} "
                f"(max abs diff {escape(fmt.number(encoder.get('max_abs_diff')))}).", ""]
    steps = g.get("steps") or []
    if steps:
        out += [f"Max logit difference per step (log scale, atol {escape(fmt.number(g.get('atol')))}): "
                f"`{spark([r.get('max_logit_diff') for r in steps])}`", ""]
        out += [_rows_table(steps, list(GENERATION_COLUMNS)), ""]
    if g.get("root_causes"):
        out += ["Root causes at the first divergence (its step fed PyTorch's cache, compared per node):", "",
                _rows_table(g["root_causes"], ["value", "target", "onnx_op", "max_abs_diff", "source"]), ""]
    return "\n".join(out).rstrip()


def spark(values: Sequence[Any]) -> str:
    """Numbers as one line of block characters on a log scale (non-finite: the top block, missing: a space)."""
    import math

    numbers = [_float(v) for v in values]
    finite = [math.log10(max(abs(n), 1e-12)) for n in numbers if n is not None and math.isfinite(n)]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    out = []
    for n in numbers:
        if n is None:
            out.append(" ")
        elif not math.isfinite(n):
            out.append(SPARK[-1])
        else:
            level = 0 if high == low else (math.log10(max(abs(n), 1e-12)) - low) / (high - low)
            out.append(SPARK[round(level * (len(SPARK) - 1))])
    return "".join(out)


def _float(value: Any) -> float | None:
    """A number of the record (``"inf"`` is stored as text); None for what is not one."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


QUANTIZATION_TITLE = "Error quantization adds, per layer (against the float model, worst SQNR first)"
QUANTIZATION_COLUMNS = ("layer", "module_type", "source", "sqnr_db", "sqnr_drop_db", "max_error_steps")


def _rows_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    def cell(row: Mapping[str, Any], column: str) -> str:
        if column == "source":
            return escape(fmt.where({"file": row.get("file"), "line": row.get("line")}))
        if column == "value" and "value" not in row:
            return escape(row.get("output", row.get("name", "")))
        value = row.get(column)
        if column == "shape":
            return escape(fmt.shape(value))
        if isinstance(value, float):
            return escape(fmt.number(value))
        return escape(fmt.number(value)) if column in fmt.METRIC_COLUMNS or isinstance(value, bool) else escape(value)
    return table(list(columns), ([cell(row, c) for c in columns] for row in rows))


def _facts(run: RunRecord) -> str:
    facts = run.facts
    out = []
    summary = [("opset", facts.get("opset")), ("ONNX nodes", facts.get("onnx_nodes")),
               ("ONNX size", fmt.size(facts["onnx_size"]) if facts.get("onnx_size") is not None else None)]
    out += [", ".join(f"{k}: {escape(v)}" for k, v in summary if v is not None), ""]
    weights = fmt.weights_rows(facts)
    if weights:
        out += [table(["kind", "dtype", "tensors", "elements", "size"],
                      ([w["kind"], escape(w["dtype"]), w["tensors"], f"{w['elements']:,}", fmt.size(w["bytes"])]
                       for w in weights)), ""]
    for key, title in (("inputs", "Inputs"), ("outputs", "Outputs")):
        if facts.get(key):
            out += [f"{title}:", "", table(["name", "dtype", "shape"],
                                           ([escape(r.get("name")), escape(r.get("dtype")), escape(fmt.shape(r.get("shape")))]
                                            for r in facts[key])), ""]
    for key, title in (("aten_ops", "ATen operators"), ("onnx_ops", "ONNX operators")):
        rows = fmt.histogram_rows(facts.get(key))
        if rows:
            more = f" (top {HISTOGRAM_ROWS} of {len(rows)})" if len(rows) > HISTOGRAM_ROWS else ""
            out += [f"{title}{more}:", "", table(["operator", "count"],
                                                 ([code(op), n] for op, n in rows[:HISTOGRAM_ROWS])), ""]
    for warning in facts.get("report_warnings", []):
        out += [f"- report warning: {escape(warning)}"]
    return "\n".join(out).strip()


def _environment(run: RunRecord) -> str:
    if not run.environment:
        return ""
    rows = ([escape(k), escape(", ".join(v) if isinstance(v, list) else v)] for k, v in run.environment.items())
    return table(["", "version"], rows)


def _files(run: RunRecord) -> str:
    return "\n".join(f"- {escape(kind)}: {code(name)}" for kind, name in run.files.items())
