"""The HTML report in a real headless browser (chromium): no console errors, no requests.

The browser is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages separated by NUL bytes on file descriptors 3 and 4), so no
websocket library and no TCP port are needed. The browser is a chromium on PATH, or
playwright's (``python -m playwright install chromium``, which ``make browser-deps``
runs: pip's playwright downloads it for the user, no root needed); without one these
tests skip with that command.

The screenshot goes to ``$ONNXSIGHT_SCREENSHOT`` when set (the README's
``docs/img/report.png`` is made that way), otherwise into the test's tmp dir.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import onnxsight
from tests.reports.test_export_reports import CustomOp, EvilModule, export_failing, sloppy

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
                  "--remote-debugging-pipe")
TIMEOUT = 60.0


# The skip message of every browser test: the one command that gets the browser, without root.
NO_BROWSER = "chromium is not installed; run `python -m playwright install chromium` (or `make browser-deps`)"


def chromium_binary() -> str | None:
    """A chromium on PATH, else the newest one playwright downloaded (``$PLAYWRIGHT_BROWSERS_PATH``, or its
    default ``~/.cache/ms-playwright``); None where there is neither."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    root = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    found = sorted(root.glob("chromium-*/chrome-linux*/chrome"), key=lambda p: int(p.parts[-3].split("-")[-1])
                   if p.parts[-3].split("-")[-1].isdigit() else 0)
    return str(found[-1]) if found else None


class Browser:
    """A headless chromium driven over the DevTools pipe; events are kept in ``events``."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="onnxsight-chromium-")
        commands_r, commands_w = os.pipe()
        replies_r, replies_w = os.pipe()

        def child_fds() -> None:  # chromium reads commands on fd 3 and writes replies on fd 4
            high_r, high_w = os.dup(commands_r), os.dup(replies_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.log = open(os.path.join(self.profile, "chromium.log"), "w+b")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen([binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                        stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                        preexec_fn=child_fds, pass_fds=(3, 4, commands_r, replies_w))
        os.close(commands_r)
        os.close(replies_w)
        self._out, self._in = commands_w, replies_r
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._out, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        for event in self.events:
            if event.get("method") == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            event = self._read(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def pump(self, seconds: float) -> None:
        """Collect events for ``seconds`` (late requests, late console messages)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read(deadline))
        except TimeoutError:
            pass

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no message from chromium")
            ready, _, _ = select.select([self._in], [], [], remaining)
            if ready:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    self.log.seek(0)
                    raise RuntimeError("chromium closed the DevTools pipe: "
                                       + self.log.read().decode(errors="replace")[-2000:])
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._out, self._in):
            os.close(fd)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Any:
    binary = chromium_binary()
    if binary is None:
        pytest.skip(NO_BROWSER)
    instance = Browser(binary)
    yield instance
    instance.close()


def open_page(browser: Browser, path: str | Path, *, width: int = 1280, height: int = 900) -> str:
    """Load ``path`` in a fresh tab; returns the DevTools session id once the load event fired."""
    browser.events.clear()
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for method in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
        browser.send(method, session=session)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
    browser.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=session)
    browser.wait_for("Page.loadEventFired")
    browser.pump(0.5)
    return session


def evaluate(browser: Browser, session: str, expression: str) -> Any:
    result = browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    if "exceptionDetails" in result:
        raise AssertionError(f"{expression}: {result['exceptionDetails']}")
    return result["result"].get("value")


def page_problems(browser: Browser, page: Path) -> tuple[list[str], list[str]]:
    """(console errors, requests to anything but the page itself) seen since the page was opened."""
    errors, requests = [], []
    own = page.resolve().as_uri()
    for event in browser.events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            errors.append(json.dumps(params.get("args"))[:300])
        elif method == "Runtime.exceptionThrown":
            errors.append(json.dumps(params.get("exceptionDetails"))[:300])
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            errors.append(params["entry"].get("text", "")[:300])
        elif method == "Network.requestWillBeSent" and params.get("request", {}).get("url") != own:
            requests.append(params["request"]["url"])
    return errors, requests


def test_report_loads_without_errors_or_requests_and_screenshot(browser: Browser, tmp_path: Path) -> None:
    with pytest.raises(AssertionError):  # guard: the checker itself must notice an error
        bad = tmp_path / "bad.html"
        bad.write_text("<html><body><script>console.error('x'); fetch('http://example.invalid/')</script>")
        open_page(browser, bad)
        errors, requests = page_problems(browser, bad)
        assert not errors and not requests
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[layer for _ in range(6) for layer in (torch.nn.Linear(32, 32), torch.nn.ReLU())])
    onnxsight.export(model, (torch.randn(4, 32),), report=True, verify=True, artifacts_dir=tmp_path / "report",
                     custom_translations={torch.ops.aten.relu.default: sloppy})
    paths = [str(p) for p in (tmp_path / "report").iterdir()]
    page = Path(next(p for p in paths if p.endswith(".html")))
    session = open_page(browser, page)
    errors, requests = page_problems(browser, page)
    assert errors == []
    assert requests == []
    # The script ran (under the page's own CSP): the tools bar is shown and tables sort.
    assert evaluate(browser, session, "document.querySelector('.tools').classList.contains('hidden')") is False
    column = "Array.from(document.querySelectorAll('#aten-ops-table tbody tr td:nth-child(2)')).map(c => +c.textContent)"
    evaluate(browser, session, "document.querySelector('#aten-ops-table th:nth-child(2)').click()")
    ascending = evaluate(browser, session, column)
    assert ascending == sorted(ascending) and len(ascending) > 1
    evaluate(browser, session, "document.querySelector('#aten-ops-table th:nth-child(2)').click()")
    assert evaluate(browser, session, column) == sorted(ascending, reverse=True)
    assert evaluate(browser, session, "document.querySelectorAll('svg.chart g[id$=root-causes] use').length") >= 1
    # For the README: fold everything but the root-cause diagnostic, so the verification plot shows too.
    evaluate(browser, session, "document.querySelectorAll('details').forEach(d => d.open ="
                               " d.classList.contains('rule') && d.textContent.includes('ACC002'))")
    shot = browser.send("Page.captureScreenshot", {"format": "png", "clip": {"x": 0, "y": 0, "width": 1280,
                                                                             "height": 1900, "scale": 1},
                                                   "captureBeyondViewport": True}, session=session)
    target = Path(os.environ.get("ONNXSIGHT_SCREENSHOT") or tmp_path / "report.png")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(base64.b64decode(shot["data"]))
    assert target.stat().st_size > 10_000


def test_hostile_names_do_not_inject(browser: Browser, tmp_path: Path) -> None:
    paths = export_failing(EvilModule(), (torch.randn(2, 4),), tmp_path)
    page = Path(next(p for p in paths if p.endswith(".html")))
    session = open_page(browser, page)
    errors, requests = page_problems(browser, page)
    assert errors == [] and requests == []
    assert evaluate(browser, session, "typeof window.__pwned") == "undefined"
    assert evaluate(browser, session, "document.scripts.length") == 1
    assert evaluate(browser, session, "document.querySelectorAll('img, iframe, [onerror], [onload]').length") == 0
    assert "<script>" in evaluate(browser, session, "document.body.textContent")


def test_failed_export_report_loads(browser: Browser, tmp_path: Path) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(CustomOp(), (torch.randn(2, 3),), report=True, artifacts_dir=tmp_path)
    page = Path(next(p for p in info.value.report_paths if p.endswith(".html")))
    session = open_page(browser, page)
    assert page_problems(browser, page) == ([], [])
    assert evaluate(browser, session, "document.querySelectorAll('#unsupported-table tbody tr').length") == 1
