"""The dashboard escapes every string, links only to local sources, draws trends and each model's history
from the store, and shows a passing row without anything that reads like a failure."""

from __future__ import annotations

import re
from html import unescape

import pytest

from onnxsight.zoo import ModelResult, ResultsStore
from onnxsight.zoo._dashboard import render, source_link
from onnxsight.zoo._history import run_date
from onnxsight.zoo._summary import markdown_summary
from tests.reports.test_charts import _marks, _texts, _y_of_linear, _y_of_log, _yticks

EVIL = '<script>alert("x")</script>'
ATTR = '" onmouseover="alert(1)'


def _evil_result() -> ModelResult:
    return ModelResult(
        name=f"model{EVIL}", suite=f"suite{ATTR}", status="failed", stage="export", tags=[f"tag{ATTR}", "<i>t</i>"],
        error=f"boom {EVIL}", stderr_tail=f"Traceback {EVIL}",
        root_cause={"rule": "OPS002", "message": f"operator {EVIL} has no ONNX translation",
                    "file": f"/src/{EVIL}.py", "line": 3},
        op_counts={f"Op{EVIL}": 1}, node_count=1)


def test_every_string_is_escaped() -> None:
    changes = [{"model": EVIL, "kind": "newly-failing", "detail": ATTR, "regression": True}]
    html = render([_evil_result()], run_id=f"run{EVIL}", changes=changes, baseline=f"base{EVIL}",
                  skipped=[(EVIL, f"because {EVIL}")])
    assert "alert" in html  # the text is there ...
    scripts = re.findall(r"<script>(.*?)</script>", html, flags=re.S)
    assert len(scripts) == 1 and "alert" not in scripts[0]  # ... but never as script
    assert "<script>alert" not in html and "<i>t</i>" not in html
    assert 'onmouseover="alert' not in html
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html


def test_content_security_policy_forbids_other_scripts() -> None:
    html = render([_evil_result()], run_id="r")
    [csp] = [unescape(c) for c in re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp


def test_source_links_are_local_file_uris() -> None:
    assert source_link("/home/me/model.py", 12) == ("file:///home/me/model.py#L12", "/home/me/model.py:12")
    assert source_link("javascript:alert(1)", 1) == (None, "javascript:alert(1):1")
    assert source_link(None, None) == (None, None)
    html = render([_evil_result()], run_id="r")
    assert 'href="file:///src/%3Cscript%3Ealert%28%22x%22%29%3C/script%3E.py#L3"' in html


def test_filters_and_rows() -> None:
    ok = ModelResult(name="fine", suite="s", status="passed", stage="done", tags=["vision"], max_abs_diff=3e-7,
                     seconds=1.5, timings={"export": 0.75}, peak_mb=300.0, onnx_bytes=4096)
    html = render([ok, _evil_result()], run_id="r")
    assert html.count('<tr class="model"') == 2
    assert 'data-status="passed"' in html and "<option>vision</option>" in html
    assert "3.00e-07" in html and "0.75" in html


def _night(store: ResultsStore, night: str, results: list[ModelResult]) -> None:
    store.begin_run(night, out_dir=f"/tmp/{night}", suites=["s"])
    store.add_results(night, results)
    store.finish_run(night, "finished")


def test_trends_from_history(tmp_path) -> None:
    """Pass rate and export time per stored run, drawn from the store's numbers, with run dates."""
    store = ResultsStore(str(tmp_path / "s.sqlite"))
    for night, status in (("n1", "failed"), ("n2", "passed"), ("n3", "passed")):
        _night(store, night, [ModelResult(name="m", suite="s", status=status, timings={"export": 1.0}),
                              ModelResult(name="k", suite="s", status="passed", timings={"export": 2.0})])
    assert store.history()["pass_rate"].tolist() == [0.5, 1.0, 1.0]
    html = render([], run_id="n3", store=store)
    charts = re.findall(r"<figure><figcaption>([^<]*)</figcaption>(<svg.*?</svg>)\s*</figure>", html, re.S)
    assert [title for title, _ in charts] == ["pass rate per run", "export time per run, all models"]
    rate, export = charts[0][1], charts[1][1]
    ticks = _yticks(rate)
    assert [y for _, y in _marks(rate, "trend")] == pytest.approx([ticks["50%"], ticks["100%"], ticks["100%"]], abs=0.6)
    assert [y for _, y in _marks(export, "trend")] == pytest.approx([_y_of_linear(_yticks(export), 3.0)] * 3, abs=0.6)
    assert run_date(store.runs()["started"][0]) in _texts(rate)        # run dates on the x axis
    assert "style=" not in html.split("</style>", 1)[1]                 # nothing the CSP would block


def test_a_passing_row_shows_nothing_that_reads_like_a_failure() -> None:
    ok = ModelResult(name="fine", suite="s", status="passed", stage="done", op_counts={"Gemm": 2, "Relu": 1},
                     node_count=3, max_abs_diff=1e-7)
    html = render([ok], run_id="r")
    row = re.search(r'<tr class="model".*?</tr>', html, re.S).group(0)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[-1].strip() == ""                                      # the root-cause cell is empty
    assert "<summary>3</summary>Gemm 2, Relu 1" in cells[-2]            # node counts in their own column


def test_a_model_row_links_to_its_history(tmp_path) -> None:
    store = ResultsStore(str(tmp_path / "s.sqlite"))
    diffs = {"n1": (1e-7, "passed", 400.0, 1.5), "n2": (3e-3, "failed", 410.0, 1.6)}
    for night, (diff, status, peak, seconds) in diffs.items():
        _night(store, night, [ModelResult(name="m<x>", suite="s", status=status, max_abs_diff=diff, peak_mb=peak,
                                          timings={"export": seconds},
                                          verification={"outputs": [{"max_abs_diff": diff, "atol": 1e-4}]})])
    current = ModelResult(name="m<x>", suite="s", status="failed", max_abs_diff=3e-3)
    html = render([current], run_id="n2", store=store)
    assert '<a href="#history-0" title="history over the stored runs">m&lt;x&gt;</a>' in html
    section = html[html.index('<section class="history" id="history-0">'):]
    section = section[:section.index("</section>")]
    assert "<h3>m&lt;x&gt;</h3>" in section
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr><td>.*?</tr>", section, re.S)]
    assert [(r[0], r[2], r[3], r[4], r[5], r[6]) for r in rows] == [
        ("n2", "failed", "1.60", "410", "3.00e-03", "0.0001"), ("n1", "passed", "1.50", "400", "1.00e-07", "0.0001")]
    svg = section[section.index("<svg"):section.index("</svg>")]
    ticks = _yticks(svg)
    assert [y for _, y in _marks(svg, "differences")] == pytest.approx(
        [_y_of_log(ticks, 1e-7), _y_of_log(ticks, 3e-3)], abs=0.6)
    assert len(_marks(svg, "not-passed")) == 1 and "atol 0.0001" in _texts(svg)


def test_no_history_without_a_store() -> None:
    html = render([ModelResult(name="m", suite="s", status="passed")], run_id="r")
    assert "Model history" not in html and "#history-" not in html


def test_markdown_summary_escapes_cells() -> None:
    text = markdown_summary([_evil_result()], run_id="r")
    assert "<script>" not in text and "\\|" not in text.split("\n")[0]
    row = [line for line in text.splitlines() if line.startswith("| model")][1]
    assert row.count(" | ") == 6  # a "|" in a value never adds a column
