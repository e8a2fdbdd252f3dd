"""Markdown report and CI summary: contents, grouping and escaping (pure functions of a RunRecord)."""

from __future__ import annotations

import re

import pytest

from onnxsight.reports import markdown
from onnxsight.reports._record import RunRecord


def outside_code(text: str) -> str:
    """The markdown with fenced blocks and code spans removed."""
    text = re.sub(r"(`{3,})[^\n]*\n.*?\n *\1", "", text, flags=re.S)
    return re.sub(r"(`+).*?\1", "", text)


def test_sections_in_order(record: RunRecord) -> None:
    text = markdown.render(record)
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["Stages", "Unsupported operators", "Diagnostics", "Verification", "Model", "Environment",
                        "Files"]
    assert text.rstrip().endswith("</details>") and "<summary>Exported program</summary>" in text


def test_stages_list_the_ones_not_reached(record: RunRecord) -> None:
    text = markdown.render(record)
    assert "| translate | FAILED |" in text and "| check | not run |" in text
    assert "1.50 s" in text and "10 ms" in text


def test_diagnostics_grouped_by_rule_errors_first(record: RunRecord) -> None:
    record.diagnostics.append(dict(record.diagnostics[0], message="second one"))
    text = markdown.render(record)
    groups = re.findall(r"^### (\w+) ", text, flags=re.M)
    assert groups == ["OPS001", "CAP001", "VAL005"]
    assert "(error, 2)" in text
    assert ">   12 | y = " in text  # the snippet marks the line
    assert "Fix: Fix it:" in text


def test_hostile_strings_are_escaped(record: RunRecord) -> None:
    text = markdown.render(record)
    prose = outside_code(text)
    assert "<script>" not in prose and "&lt;script&gt;" in prose
    assert "[x](y)" not in prose and r"\[x\](y)" in prose  # no links from model strings
    # Fences and code spans cannot be closed by the content they hold.
    program = text[text.index("<summary>Exported program</summary>"):]
    fence = re.search(r"^(`{3,})python$", program, flags=re.M).group(1)
    assert len(fence) >= 4


def test_table_cells_keep_their_columns(record: RunRecord) -> None:
    text = markdown.render(record)
    header = "| operator | count | rule | first source line |"
    lines = text.splitlines()
    row = lines[lines.index(header) + 2]
    unescaped = re.findall(r"(?<!\\)\|", row)
    assert len(unescaped) == 5, row


@pytest.mark.parametrize("value, expected", [
    ("a|b", r"a\|b"), ("<b>", "&lt;b&gt;"), ("x\ny", "x<br>y"), ("*_`", r"\*\_\`"), (None, ""),
])
def test_escape(value: object, expected: str) -> None:
    assert markdown.escape(value) == expected


def test_code_span_and_fence_hold_backticks() -> None:
    assert markdown.code("a`b") == "``a`b``"
    assert markdown.fence("x\n```\ny").startswith("````\n")


def test_summary_for_ci(record: RunRecord) -> None:
    text = markdown.render_summary(record)
    assert text.startswith("### onnxsight: Model")
    assert "| rule | level | message | source |" in text and "OPS001" in text
    assert "VAL005" not in text  # notes stay in the full report
    assert "Verification: **failed**, 3 of 6 values" in text
    assert "<script>" not in outside_code(text)


def test_minimal_record_renders() -> None:
    run = RunRecord(model="m", created="2025-01-01T00:00:00+00:00")
    text = markdown.render(run)
    assert "No diagnostics." in text and "## Verification" not in text
    assert "| arguments | not run |" in text
