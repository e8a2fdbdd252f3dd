"""docs/quantization.md's runnable examples (blocks after a `<!-- readme-test -->` marker) must run."""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("tests.quantized.models", reason="torchao is not installed: pip install onnxsight[quant]")

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs",
                    "quantization.md")
BLOCKS = re.findall(r"<!-- readme-test -->\s*```python\n(.*?)```", open(PAGE).read(), re.S)


def test_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index: int, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[index], f"docs/quantization.md block {index}", "exec"), {"__name__": f"quant_doc_{index}"})
