"""The runnable examples of the README and of the docs site's pages must run.

A runnable example is a ```python block right after a `<!-- readme-test -->` marker, in README.md
or in any page under docs/ (the site's pages, which hold what the README held before it became the
front page).
"""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
MARKER = re.compile(r"<!-- readme-test -->\s*```python\n(.*?)```", re.S)


def _documents() -> list[str]:
    docs = os.path.join(ROOT, "docs")
    pages = sorted(os.path.relpath(os.path.join(folder, name), ROOT)
                   for folder, _, names in os.walk(docs) for name in names if name.endswith(".md"))
    return ["README.md", *pages]


BLOCKS = [(path, index, code)
          for path in _documents()
          for index, code in enumerate(MARKER.findall(open(os.path.join(ROOT, path), encoding="utf-8").read()))]


@pytest.mark.parametrize(("path", "index", "code"), BLOCKS, ids=[f"{p}:{i}" for p, i, _ in BLOCKS])
def test_example_runs(path: str, index: int, code: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    tag = re.sub(r"\W", "_", os.path.splitext(path)[0]) + str(index)   # own custom-op namespace per block
    code = code.replace("demo::", f"{tag}::").replace("torch.ops.demo.", f"torch.ops.{tag}.")
    exec(compile(code, f"{path} block {index}", "exec"), {"__name__": f"readme_{tag}"})


def test_the_docs_keep_their_examples() -> None:
    """The README's examples moved into the site with its sections: none was lost on the way."""
    pages = {path for path, _, _ in BLOCKS}
    assert {"README.md", "docs/export.md", "docs/dynamic-shapes.md", "docs/getting-started.md"} <= pages
    assert len(BLOCKS) >= 7


def test_readme_starts_with_the_two_commands() -> None:
    head = open(README).read().splitlines()[:6]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)


def test_readme_is_a_front_page_that_links_into_the_site() -> None:
    text = open(README, encoding="utf-8").read()
    assert len(text.splitlines()) <= 150
    linked = set(re.findall(r"\]\(docs/([^)#]+)", text))
    for page in ("getting-started.md", "export.md", "dynamic-shapes.md", "large-models.md", "diagnostics.md",
                 "verification.md", "reports.md", "cli.md", "zoo.md", "performance.md", "api.md"):
        assert page in linked, page
    for page in linked:
        assert os.path.exists(os.path.join(ROOT, "docs", page)), page
