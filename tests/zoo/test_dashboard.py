"""The dashboard escapes every string, links only to local sources, and draws trends from the store."""

from __future__ import annotations

import re
from html import unescape

from onnxsight.zoo import ModelResult, ResultsStore
from onnxsight.zoo._dashboard import render, source_link
from onnxsight.zoo._summary import markdown_summary

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


def test_trends_from_history(tmp_path) -> None:
    store = ResultsStore(str(tmp_path / "s.sqlite"))
    for night, status in (("n1", "failed"), ("n2", "passed"), ("n3", "passed")):
        store.begin_run(night, out_dir=str(tmp_path / night), suites=["s"])
        store.add_results(night, [ModelResult(name="m", suite="s", status=status, timings={"export": 1.0}),
                                  ModelResult(name="k", suite="s", status="passed", timings={"export": 2.0})])
        store.finish_run(night, "finished")
    assert store.history()["pass_rate"].tolist() == [0.5, 1.0, 1.0]
    html = render([], run_id="n3", store=store)
    assert html.count("<svg") == 2 and html.count("<circle") == 6 and "n2: 100%" in html


def test_markdown_summary_escapes_cells() -> None:
    text = markdown_summary([_evil_result()], run_id="r")
    assert "<script>" not in text and "\\|" not in text.split("\n")[0]
    row = [line for line in text.splitlines() if line.startswith("| model")][1]
    assert row.count(" | ") == 6  # a "|" in a value never adds a column
