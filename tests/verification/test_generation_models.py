"""verify_generation on the models and set-ups its first tests did not cover, as a user would call it: sliding
windows (Mistral, Gemma2), ALiBi (Falcon), a prompt without a mask, loops longer than the model's positions,
a dtype ONNX Runtime has no CPU kernels for. Each model is built from a small local config with random weights
(``onnxsight.zoo.suites.generation``). Slow (an export each): `make test-generation`; `make test` runs the
sliding window alone.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxsight
from onnxsight import rules
from onnxsight.zoo.suites import generation as suite

transformers = pytest.importorskip("transformers")

STEPS = 16


def _generate(model: Any, prompt: dict[str, torch.Tensor], steps: int) -> list[list[int]]:
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=steps, min_new_tokens=steps, do_sample=False)
    return out[:, prompt["input_ids"].shape[1]:].tolist()


def _agrees_with_generate(model: Any, prompt: dict[str, torch.Tensor], steps: int = STEPS) -> Any:
    result = onnxsight.verify_generation(model, prompt, steps=steps)
    assert result.passed, (result.steps, [str(d) for d in result.diagnostics])
    assert result.steps["cache_passed"].all() and result.steps["logits_passed"].all()
    assert result.tokens == result.onnx_tokens == _generate(model, prompt, steps)
    return result


def test_a_sliding_window_shorter_than_the_loop_agrees_with_generate() -> None:
    """Mistral's window (4) is shorter than the prompt (6): generate()'s cache keeps the window, the exported
    step keeps every position and masks the ones outside it; the loop compares the same cache on both sides."""
    model, prompt = suite.mistral()
    result = _agrees_with_generate(model, prompt, steps=8)
    assert list(result.steps["past_length"]) == [0] + list(range(6, 6 + 7))
    assert result.steps["max_cache_diff"].max() < 1e-4  # every position compared, none dropped
    assert not [d for d in result.diagnostics if d.level is rules.Level.ERROR]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma2", "falcon", "phi3", "opt", "gpt_neox", "bloom"])
def test_decoders_agree_with_generate(name: str) -> None:
    model, prompt = getattr(suite, name)()
    _agrees_with_generate(model, prompt)
