"""docs/migration.md's runnable examples (blocks after a `<!-- readme-test -->` marker) must run."""

from __future__ import annotations

import os
import re

import pytest

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "migration.md")
BLOCKS = re.findall(r"<!-- readme-test -->\s*```python\n(.*?)```", open(PAGE).read(), re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_migration_example_runs(index: int, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"docs/migration.md block {index}", "exec"), {"__name__": f"migration_{index}"})
