"""verify_generation on encoder-decoders (BART, T5): the encoder once, the first decoder step computing the
cross-attention cache, then 16 steps over both caches; faults in the encoder and in the decoder's cache found
at their step and node. Slow (three exports per model): `make test-generation`."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxsight
from onnxsight.verification import VerificationError
from onnxsight.zoo.suites import generation as suite
from tests.verification import faults
from tests.verification import generation_faults as cache_faults

pytestmark = pytest.mark.slow
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module", params=["bart", "t5"])
def exported(request: Any) -> tuple[str, Any, dict[str, Any], onnxsight.GenerationPrograms]:
    model, prompt = getattr(suite, request.param)()
    return request.param, model, prompt, onnxsight.export_generation(model, prompt)


def test_sixteen_steps_over_both_caches_agree(exported: Any) -> None:
    name, model, prompt, programs = exported
    assert [which for which, _ in programs.items()] == ["encoder", "first_step", "decoder"]
    assert any(".encoder." in n for n in programs.decoder.input_names)  # the cross-attention cache is an input
    result = onnxsight.verify_generation(model, prompt, programs, steps=16)
    assert result.passed, (name, result.steps)
    assert result.encoder["passed"] and result.steps["phase"].tolist()[0] == "prompt"
    assert list(result.steps["past_length"]) == list(range(16))  # the decoder starts from its start token
    # generate()'s plain greedy tokens (no forced or suppressed tokens), each row up to its end token
    eos = model.generation_config.eos_token_id
    with torch.no_grad():
        expected = model.generate(**prompt, max_new_tokens=16, do_sample=False, forced_bos_token_id=None,
                                  forced_eos_token_id=None, no_repeat_ngram_size=0, begin_suppress_tokens=None)
    assert [_until(row, eos) for row in result.tokens] == [_until(row, eos) for row in expected[:, 1:].tolist()]


def _until(tokens: list[int], eos: int) -> list[int]:
    return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens


def test_a_fault_in_the_encoder_is_found_before_the_first_step(exported: Any) -> None:
    name, model, prompt, programs = exported
    encoder = programs.encoder.model_proto
    value = next(o for n in encoder.graph.node for o in n.output if o.startswith("linear"))  # a first projection
    faulty = faults.add_constant(encoder, value, 0.5)
    result = onnxsight.verify_generation(model, prompt, programs, steps=3, onnx_models={"encoder": faulty})
    assert result.first_divergence == {"step": -1, "kind": "encoder", "phase": "encoder"}
    assert result.root_causes.iloc[0]["value"] == value


def test_keys_out_of_order_in_the_self_attention_cache_are_found_at_step_1(exported: Any) -> None:
    name, model, prompt, programs = exported
    faulty = cache_faults.new_keys_first(programs.decoder.model_proto, "present.0.decoder.key")
    result = onnxsight.verify_generation(model, prompt, programs, steps=3, onnx_models={"decoder": faulty})
    assert result.first_divergence["step"] == 1, result.steps
    assert result.root_causes.iloc[0]["value"] == "present.0.decoder.key"


def test_a_decoder_over_the_cross_attention_cache_needs_the_first_step(exported: Any) -> None:
    name, model, prompt, programs = exported
    with pytest.raises(VerificationError, match="which no step has computed at step 0") as failure:
        onnxsight.verify_generation(model, prompt, {"encoder": programs.encoder, "decoder": programs.decoder})
    assert failure.value.rule == "GEN005"
