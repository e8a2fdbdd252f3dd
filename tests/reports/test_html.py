"""HTML report: self-contained, escaped, readable without JavaScript, CSP by hash, SVG error plot."""

from __future__ import annotations

import base64
import hashlib
import re
from html.parser import HTMLParser

import pytest

from onnxsight.reports import html
from onnxsight.reports._record import RunRecord
from tests.reports.conftest import HOSTILE, hostile_record


class Collector(HTMLParser):
    """Tags, attributes and the text of a page, for structural assertions."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._inline: list[str] = []
        self.inline: dict[str, list[str]] = {"script": [], "style": []}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in self.inline:
            self._inline = []

    def handle_endtag(self, tag: str) -> None:
        if tag in self.inline:
            self.inline[tag].append("".join(self._inline))

    def handle_data(self, data: str) -> None:
        self._inline.append(data)
        self.text.append(data)


def parse(text: str) -> Collector:
    collector = Collector()
    collector.feed(text)
    return collector


@pytest.fixture
def page(record: RunRecord) -> str:
    return html.render(record)


def test_escapes_every_model_string(page: str) -> None:
    doc = parse(page)
    assert [t for t, _ in doc.tags].count("script") == 1
    assert "__pwned" not in "".join(doc.inline["script"])
    assert "<script>__pwned" not in page
    assert "&lt;script&gt;__pwned=1&lt;/script&gt;" in page
    text = "".join(doc.text)
    assert HOSTILE.split("`")[0] in text  # shown to the reader as text
    assert not any(name.startswith("on") for _, attrs in doc.tags for name in attrs)


def test_self_contained_and_csp_by_hash(page: str) -> None:
    doc = parse(page)
    for tag, attrs in doc.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed")
        assert "src" not in attrs
        href = attrs.get("href")
        assert href is None or href.startswith("#")
    assert not re.search(r"(?:https?:)?//[a-z]", "".join(doc.inline["script"]) + "".join(doc.inline["style"]))
    csp = next(a["content"] for t, a in doc.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp
    for kind in ("script", "style"):
        [body] = doc.inline[kind]
        digest = base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
        assert f"{kind}-src 'sha256-{digest}'" in csp
    assert not any("style" in attrs for _, attrs in doc.tags)  # no inline style attributes (CSP)


def test_contents_without_javascript(page: str) -> None:
    doc = parse(page)
    text = " ".join("".join(doc.text).split())
    for heading in ("Stages", "Unsupported operators", "Diagnostics", "Verification", "Root causes",
                    "Error along the graph", "Worst values", "Model", "Parameters and buffers", "Environment",
                    "Exported program"):
        assert heading in text, heading
    assert "not run" in text and "1.50 s" in text
    ids = {attrs.get("id") for _, attrs in doc.tags}
    assert {"stages-table", "unsupported-table", "outputs-table", "roots-table", "worst-table", "weights-table",
            "inputs-table", "aten-ops-table", "environment-table"} <= ids
    sortable = [a for t, a in doc.tags if t == "table" and "sortable" in (a.get("class") or "")]
    assert len(sortable) >= 8
    details = [a for t, a in doc.tags if t == "details"]
    assert len(details) >= 4
    program = page[page.index('id="program"'):]
    assert "<details>" in program and "open" not in program.split("</summary>")[0]


def test_diagnostics_grouped_with_snippet_and_fix(page: str) -> None:
    codes = re.findall(r'<span class="mono">(\w{3}\d{3})</span>', page)
    assert codes[:3] == ["OPS001", "CAP001", "VAL005"]
    assert '<span class="hl">   12 | y = &lt;script&gt;' in page
    assert '<div class="fix">Fix it: &lt;script&gt;' in page


def test_error_chart_in_page_is_inline_svg_of_the_nodes(page: str) -> None:
    """The verification section holds the chart of reports/charts.py (tests/reports/test_charts.py checks
    its geometry), inline, escaped, and allowed by the page's CSP (no style attribute, no script)."""
    figure = page[page.index('<figure class="chart">'):page.index("</figure>")]
    assert '<svg class="chart"' in figure and "root-causes" in figure and "differences" in figure
    assert "v3&lt;script&gt;" in figure          # the root cause named, escaped
    assert "<script" not in figure and "style=" not in figure


@pytest.mark.parametrize("value, key", [(1, "1.0"), (2.5, "2.5"), ("inf", "1e308"), (float("-inf"), "-1e308"),
                                        (True, "1"), (None, ""), ("abc", "abc")])
def test_sort_key(value: object, key: str) -> None:
    assert html.sort_key(value) == key


def test_minimal_record() -> None:
    page = html.render(RunRecord(model="m", created="2025-01-01T00:00:00+00:00"))
    assert "No diagnostics." in page and 'id="verification"' not in page and "<svg" not in page


TORCH_MESSAGE = ("GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(u0, 1) "
                 "(unhinted: Eq(u0, 1)).  (Size-like symbols: none)\n\n" + "Caused by: x.sum() > 0  " * 30
                 + "\nFor more information, run with TORCH_LOGS=\"dynamic\"\n")


class Cells(HTMLParser):
    """Each table cell's class and text, by table id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[tuple[str, str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._class = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._table = dict(attrs).get("id") or ""
            self.tables.setdefault(self._table, [])
        elif tag == "td":
            self._cell, self._class = [], dict(attrs).get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table is not None:
            self.tables[self._table].append((self._class, "".join(self._cell)))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _long_page(record: RunRecord) -> str:
    record.attempts = [{"strategy": "torch.export(strict=False)", "success": False, "seconds": 7.1,
                        "error_type": "GuardOnDataDependentSymNode", "error": TORCH_MESSAGE, "rule": "CAP002"}]
    record.stages[3]["detail"] = f"CaptureError: {TORCH_MESSAGE}"
    record.diagnostics = [dict(record.diagnostics[1], message=f"capture failed: {TORCH_MESSAGE}")]
    return html.render(record)


def _cells(page: str, table: str) -> list[tuple[str, str]]:
    cells = Cells()
    cells.feed(page)
    return cells.tables[table]


@pytest.mark.parametrize("check", [
    # short columns never wrap into fragments; the long one takes the room, as one short line
    lambda page: [c for c, _ in _cells(page, "attempts-table")][:4] == ["mono nowrap", "nowrap", "num", "nowrap"],
    lambda page: all(len(text) <= 100 for _, text in _cells(page, "attempts-table")),
    lambda page: all(len(text) <= 160 for _, text in _cells(page, "stages-table")),
    # the raw torch message: shown in full once, folded
    lambda page: "".join(parse(page).text).count("Caused by: x.sum() > 0  " * 30) == 1,
    lambda page: re.search(r'<details class="raw"><summary>full message</summary><pre>capture failed: '
                           r'GuardOnDataDependentSymNode', page) is not None,
], ids=["nowrap-columns", "attempt-error-one-line", "stage-detail-one-line", "raw-once", "raw-folded"])
def test_long_torch_messages_stay_readable(record: RunRecord, check: object) -> None:
    page = _long_page(record)
    assert check(page)


@pytest.mark.parametrize("dims, shown", [
    ([{"input": "x", "axis": 0, "dim": "batch", "status": "dynamic", "detail": "", "file": None, "line": None,
       "code": None}], ["batch", "kept dynamic"]),
    ([{"input": "x", "axis": 1, "dim": "seq", "status": "refused", "detail": "seq == 8 <script>",
       "file": "model.py", "line": 20, "code": "x.view(2, 8)"}], ["seq", "refused (static)", "model.py:20",
                                                                    "x.view(2, 8)", "seq == 8 <script>"]),
    ([], []),
])
def test_dynamic_dims_section(record: RunRecord, dims: list, shown: list) -> None:
    record.facts["dynamic_dims"] = dims
    page = html.render(record)
    doc = parse(page)
    ids = [attrs.get("id") for _, attrs in doc.tags]
    assert ("dynamic-dims-table" in ids) is bool(dims)
    assert ('href="#dynamic-dims"' in page) is bool(dims)
    text = "".join(doc.text)
    assert all(item in text for item in shown)
    assert "seq == 8 <script>" not in page  # escaped
