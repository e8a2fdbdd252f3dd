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
