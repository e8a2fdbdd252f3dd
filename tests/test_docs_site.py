"""The documentation site builds in strict mode, offline, every link between its pages resolves, and every
page opens in chromium.

``make docs`` runs the same build. Strict mode fails on a broken link or anchor, a page in docs/
missing from the navigation, or an API name (mkdocstrings) that no longer exists.
"""

from __future__ import annotations

import html.parser
import json
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name.split(".")[0]) is None]

pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"the docs toolchain is not installed ({', '.join(MISSING)}): "
                          "pip install mkdocs mkdocs-material 'mkdocstrings[python]'")


class _Links(html.parser.HTMLParser):
    """Every href/src of a page, with the tag it is on."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append((tag, value))
            if name == "id" and value:
                self.ids.add(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def _pages(site: Path) -> dict[Path, _Links]:
    pages = {}
    for page in site.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        pages[page] = parser
    return pages


def test_every_page_of_the_navigation_is_built(site: Path) -> None:
    import yaml

    def files(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [f for item in nav for f in files(item)]
        if isinstance(nav, dict):
            return [f for value in nav.values() for f in files(value)]
        return []

    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    pages = files(config["nav"])
    assert "index.md" in pages and "api.md" in pages and "rules/README.md" in pages
    for page in pages:
        built = "rules/index.html" if page == "rules/README.md" else page[:-3] + ".html"
        assert (site / built).is_file(), f"{page} was not built"


def test_the_front_page_is_the_readme(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    first = (ROOT / "README.md").read_text(encoding="utf-8").split("\n\n")[2].splitlines()[0]
    assert first in index                          # the README's opening paragraph
    assert 'href="export.html"' in index          # README's docs/export.md, re-pointed


def test_links_between_pages_resolve(site: Path) -> None:
    pages = _pages(site)
    broken = []
    for page, parsed in pages.items():
        if page.name == "404.html":  # served from the site's root by a web server: absolute links
            continue
        for tag, link in parsed.links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith(("mailto:", "data:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html" and tag == "a":
                ids = pages[target].ids if target in pages else set()
                if parts.fragment not in ids:
                    broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


def test_the_site_fetches_nothing(site: Path) -> None:
    """No fonts, scripts, styles or images from the network: the site works offline."""
    fetched = []
    for page, parsed in _pages(site).items():
        for tag, link in parsed.links:
            if tag in ("script", "link", "img", "iframe") and urlsplit(link).scheme in ("http", "https"):
                fetched.append(f"{page.relative_to(site)}: <{tag}> {link}")
    assert not fetched, "\n".join(fetched[:20])


def test_the_api_reference_is_generated_from_docstrings(site: Path) -> None:
    api = (site / "api.html").read_text(encoding="utf-8")
    import onnxsight

    for name in ("export", "verify", "verify_onnx", "ONNXProgram", "VerificationResult", "Tolerance"):
        assert f'id="onnxsight.{name}"' in api, name
    first_line = onnxsight.verify.__doc__.strip().splitlines()[0]
    assert html.escape(first_line.split("``")[0].strip(), quote=False)[:40] in api


@pytest.mark.browser
def test_every_page_opens_in_chromium_and_the_navigation_works(site: Path) -> None:
    """Each page loads with no console error and no request outside the site; the nav's links lead to pages."""
    from tests.reports.test_browser import NO_BROWSER, Browser, chromium_binary, evaluate, open_page

    binary = chromium_binary()
    if binary is None:
        pytest.skip(NO_BROWSER)
    browser = Browser(binary)
    try:
        own = site.resolve().as_uri() + "/"
        pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html" and p.parent.name != "rules"
                       or p.name == "index.html")
        for page in pages:
            open_page(browser, page)
            problems = []
            for event in browser.events:
                method, params = event.get("method"), event.get("params", {})
                if method == "Runtime.exceptionThrown" or (
                        method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error"):
                    problems.append(json.dumps(params)[:1500])
                elif method == "Network.requestWillBeSent" and not params["request"]["url"].startswith((own, "data:")):
                    problems.append("request: " + params["request"]["url"])
            assert not problems, (page.name, problems)
        session = open_page(browser, site / "index.html")
        links = evaluate(browser, session, "Array.from(document.querySelectorAll('nav.md-nav--primary a.md-nav__link'))"
                                           ".map(a => a.getAttribute('href')).filter(h => h && !h.startsWith('#'))")
        assert "export.html" in links and "api.html" in links and "rules/index.html" in links
        evaluate(browser, session, "document.querySelector('nav.md-nav--primary a[href=\"verification.html\"]').click()")
        browser.wait_for("Page.loadEventFired")
        browser.pump(0.3)
        assert evaluate(browser, session, "location.pathname.endsWith('/verification.html')") is True
        assert "Verification" in evaluate(browser, session, "document.querySelector('h1').textContent")
    finally:
        browser.close()


BROKEN = {
    "a broken link": ("index.md", "See [the guide](no-such-page.md).\n", "no-such-page.md"),
    "a page missing from the navigation": ("orphan.md", "# Orphan\n", "orphan.md"),
    "an API name that no longer exists": ("index.md", "::: onnxsight.no_such_function\n", "no_such_function"),
}


@pytest.mark.parametrize("case", [*sorted(BROKEN), "nothing wrong"])
def test_the_strict_build_fails_on(case: str, tmp_path: Path) -> None:
    """The site's own settings (INHERITed from mkdocs.yml) turn each of these into a failed build; the same
    project with nothing wrong builds."""
    page, text, named = BROKEN.get(case, ("index.md", "::: onnxsight.verify\n", ""))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n")
    (docs / page).write_text((docs / page).read_text() + text if (docs / page).exists() else text)
    (tmp_path / "mkdocs.yml").write_text(
        f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nhooks: []\nextra_javascript: []\n"
        "nav:\n  - Home: index.md\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    if not named:
        assert run.returncode == 0, run.stdout + run.stderr
        return
    assert run.returncode != 0, run.stdout + run.stderr
    assert named in run.stdout + run.stderr
