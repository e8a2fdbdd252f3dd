"""The README's runnable examples (blocks after a `<!-- readme-test -->` marker) must run."""

from __future__ import annotations

import os
import re

import pytest

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
BLOCKS = re.findall(r"<!-- readme-test -->\s*```python\n(.*?)```", open(README).read(), re.S)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = BLOCKS[index].replace("demo::", f"readme{index}::").replace("torch.ops.demo.", f"torch.ops.readme{index}.")
    exec(compile(code, f"README.md block {index}", "exec"), {"__name__": f"readme_{index}"})


def test_readme_starts_with_the_two_commands() -> None:
    head = open(README).read().splitlines()[:6]
    assert any(line.startswith("make demo") for line in head)
    assert any(line.startswith("make test") for line in head)
