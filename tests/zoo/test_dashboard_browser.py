"""The zoo dashboard in headless chromium: no console errors, no requests, no injection; filters work."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnxsight.zoo import ModelResult
from onnxsight.zoo._dashboard import write_dashboard
from tests.reports.test_browser import browser, evaluate, open_page, page_problems  # noqa: F401 (fixture)
from tests.zoo.test_dashboard import _evil_result

pytestmark = pytest.mark.browser

VISIBLE = "Array.from(document.querySelectorAll('tr.model')).filter(r => !r.hidden).length"


def _select(browser, session: str, element: str, value: str) -> None:  # noqa: F811
    evaluate(browser, session, f"var s=document.getElementById('{element}'); s.value={value!r};"
                               "s.dispatchEvent(new Event('change'))")


def test_dashboard_in_browser(browser, tmp_path: Path) -> None:  # noqa: F811
    ok = ModelResult(name="fine", suite="s", status="passed", stage="done", tags=["vision"])
    changes = [{"model": "<img src=x onerror=window.__pwned=1>", "kind": "newly-failing", "detail": "<b>x</b>",
                "regression": True}]
    page = Path(write_dashboard(str(tmp_path), results=[ok, _evil_result()], run_id="<script>r</script>",
                                changes=changes, baseline="night1"))
    session = open_page(browser, page)
    assert page_problems(browser, page) == ([], [])
    assert evaluate(browser, session, "typeof window.__pwned") == "undefined"
    assert evaluate(browser, session, "document.scripts.length") == 1
    assert evaluate(browser, session, "document.querySelectorAll('img, iframe, [onerror], [onload]').length") == 0
    assert evaluate(browser, session, VISIBLE) == 2
    _select(browser, session, "f-status", "passed")
    assert evaluate(browser, session, VISIBLE) == 1
    _select(browser, session, "f-status", "")
    _select(browser, session, "f-tag", "<i>t</i>")
    assert evaluate(browser, session, VISIBLE) == 1
    assert evaluate(browser, session, "document.getElementById('f-count').textContent") == "1 shown"


def test_charts_and_history_in_browser(browser, tmp_path: Path) -> None:  # noqa: F811
    """The trend charts and a model's history render under the page's CSP (no blocked style), and the model's
    row takes you to its history."""
    from onnxsight.zoo import ResultsStore

    store = ResultsStore(str(tmp_path / "s.sqlite"))
    for night, diff in (("n1", 1e-7), ("n2", 2e-7)):
        result = ModelResult(name="m", suite="s", status="passed", max_abs_diff=diff, timings={"export": 1.0},
                             verification={"outputs": [{"max_abs_diff": diff, "atol": 1e-4}]})
        store.begin_run(night, out_dir=str(tmp_path / night), suites=["s"])
        store.add_results(night, [result])
        store.finish_run(night, "finished")
    page = Path(write_dashboard(str(tmp_path), results=[result], run_id="n2", store=store))
    session = open_page(browser, page)
    assert page_problems(browser, page) == ([], [])
    sizes = evaluate(browser, session, "Array.from(document.querySelectorAll('svg.chart'))"
                                       ".map(s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
    assert len(sizes) == 3 and all(w > 200 and h > 80 for w, h in sizes)   # two trends, one history
    stroke = "getComputedStyle(document.querySelector('svg.chart g[id$=trend] path')).stroke"
    assert evaluate(browser, session, stroke) == "rgb(59, 111, 216)"        # the colour reached the line
    evaluate(browser, session, "document.querySelector('tr.model a[href^=\"#history-\"]').click()")
    assert evaluate(browser, session, "location.hash") == "#history-0"
    assert evaluate(browser, session, "window.scrollY > 0 && document.getElementById('history-0')"
                                      ".getBoundingClientRect().top < window.innerHeight") is True
