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
    assert "<script>" not in prose and r"\<script\>" in prose
    assert not re.search(r"&(lt|gt|amp|quot|#x?[0-9a-fA-F]+);", text), "no HTML entities in markdown"
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
    ("a|b", r"a\|b"), ("<b>", r"\<b\>"), ("x\ny", "x<br>y"), ("*_`", r"\*\_\`"), (None, ""),
    ("if x.sum() > 0:", r"if x.sum() \> 0:"), ("a & b", r"a \& b"), ("&gt;", r"\&gt;"),
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


# A torch message as long as real ones: several lines, a line far wider than any column.
TORCH_MESSAGE = ("GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(u0, 1) "
                 "(unhinted: Eq(u0, 1)).  (Size-like symbols: none)\n\n" + "Caused by: x.sum() > 0  " * 30
                 + "\nFor more information, run with TORCH_LOGS=\"dynamic\"\n")


def _long_record(record: RunRecord) -> RunRecord:
    record.attempts = [{"strategy": "torch.export(strict=False)", "success": False, "seconds": 7.1,
                        "error_type": "GuardOnDataDependentSymNode", "error": TORCH_MESSAGE, "rule": "CAP002"}]
    record.diagnostics = [dict(record.diagnostics[1], message=f"capture failed: {TORCH_MESSAGE}")]
    return record


@pytest.mark.parametrize("where, check", [
    ("attempts-table", lambda text: max(len(line) for line in text.splitlines() if line.startswith("| torch.export"))
     < 250),
    ("summary-table", lambda text: all(len(line) < 300 for line in text.splitlines() if line.startswith("| CAP"))),
    ("raw-message-once", lambda text: text.count("Caused by: x.sum() > 0  " * 30) == 1),
    ("raw-message-folded", lambda text: "<details><summary>full message</summary>" in text),
    ("no-entities", lambda text: not re.search(r"&(lt|gt|amp|quot|#x?[0-9a-fA-F]+);", text)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_long_torch_messages_stay_readable(record: RunRecord, where: str, check: object) -> None:
    record = _long_record(record)
    text = markdown.render_summary(record) if where == "summary-table" else markdown.render(record)
    assert check(text), text


def test_failed_capture_names_inputs_by_forward_arguments(tmp_path: object) -> None:
    """No graph to name the inputs after: the report uses forward()'s argument names, not [0][1]."""
    import torch

    import onnxsight

    class Branchy(torch.nn.Module):
        def forward(self, tokens: torch.Tensor, pair: list[torch.Tensor]) -> torch.Tensor:
            if (tokens * pair[0]).sum() > 0:
                return tokens * 2
            return tokens + pair[1]

    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Branchy(), (torch.randn(2, 3), [torch.ones(2, 3), torch.ones(2, 3)]), report=True,
                         artifacts_dir=str(tmp_path))
    text = open(info.value.report_paths[0], encoding="utf-8").read()
    inputs = text[text.index("Inputs:"):]
    names = re.findall(r"^\| (\S+) \| float32 \|", inputs, flags=re.M)
    assert names == ["tokens", r"pair\[0\]", r"pair\[1\]"], inputs


DYNAMIC_DIMS = [
    {"input": "x", "axis": 0, "dim": "batch", "status": "dynamic", "detail": "", "file": None, "line": None,
     "code": None, "origin": None},
    {"input": "x", "axis": 1, "dim": "seq", "status": "narrowed", "detail": "seq >= 2 (fix applied)",
     "file": "model.py", "line": 12, "code": "x[:, 1]", "origin": None},
    {"input": "mask|y", "axis": 2, "dim": "width", "status": "refused", "detail": "width == 8",
     "file": "model.py", "line": 20, "code": "x.view(2, 8)", "origin": None},
]


@pytest.mark.parametrize("status, label, source", [
    ("batch", "kept dynamic", ""),
    ("seq", "narrowed (fix applied)", "`model.py:12` `x[:, 1]`"),
    ("width", "refused (static)", "`model.py:20` `x.view(2, 8)`"),
])
def test_dynamic_dims_table_says_what_became_of_each_dim(record: RunRecord, status: str, label: str,
                                                         source: str) -> None:
    record.facts["dynamic_dims"] = DYNAMIC_DIMS
    text = markdown.render(record)
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings[:2] == ["Stages", "Dynamic dims"]
    rows = [line for line in text.splitlines() if f"| `{status}` |" in line]
    assert len(rows) == 1 and f"| {label} |" in rows[0] and rows[0].endswith(f"| {source} |")
    assert "| mask\\|y | 2 |" in text  # an input name cannot break the table


def test_no_dynamic_dims_no_section(record: RunRecord) -> None:
    record.facts.pop("dynamic_dims", None)
    assert "## Dynamic dims" not in markdown.render(record)
