"""verify_generation on the models and set-ups its first tests did not cover, as a user would call it: sliding
windows (Mistral, Gemma2), ALiBi (Falcon), a prompt without a mask, loops longer than the model's positions,
a dtype ONNX Runtime has no CPU kernels for. Each model is built from a small local config with random weights
(``onnxsight.zoo.suites.generation``). Slow (an export each): `make test-generation`; `make test` runs the
sliding window and a user's own decoder verified, its faults named at the user's lines.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import torch

import onnxsight
from onnxsight import rules
from onnxsight.zoo.suites import generation as suite
from tests.verification import generation_faults as cache_faults
from tests.verification import user_decoder as user_decoder_module

transformers = pytest.importorskip("transformers")

STEPS = 16


def _generate(model: Any, prompt: dict[str, torch.Tensor], steps: int) -> list[list[int]]:
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=steps, do_sample=False)
    return out[:, prompt["input_ids"].shape[1]:].tolist()


def _agrees_with_generate(model: Any, prompt: dict[str, torch.Tensor], steps: int = STEPS) -> Any:
    """The loop verified agrees at every step, and its tokens are generate()'s greedy ones, each row up to its
    end-of-sequence token (generate() pads a row after it; the loop verified takes it like any other token)."""
    result = onnxsight.verify_generation(model, prompt, steps=steps)
    assert result.passed, (result.steps, [str(d) for d in result.diagnostics])
    assert result.steps["cache_passed"].all() and result.steps["logits_passed"].all()
    assert result.tokens == result.onnx_tokens
    eos = model.generation_config.eos_token_id
    ends = set(eos if isinstance(eos, list) else [eos])
    for ours, theirs in zip(result.tokens, _generate(model, prompt, steps)):
        cut = next((i + 1 for i, token in enumerate(ours) if token in ends), len(ours))
        assert ours[:cut] == theirs[:cut]
    return result


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma2", "phi3", "opt", "gpt_neox", "bloom", "qwen3", "phi", "gptj", "codegen",
                                  "stablelm", "olmo2", "granite", "starcoder2", "gpt_bigcode", "mixtral",
                                  "qwen2_moe", "cohere"])
def test_decoders_agree_with_generate(name: str) -> None:
    model, prompt = getattr(suite, name)()
    _agrees_with_generate(model, prompt)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["m2m100", "blenderbot_small", "mt5"])
def test_encoder_decoders_agree_at_every_step(name: str) -> None:
    model, prompt = getattr(suite, name)()
    result = onnxsight.verify_generation(model, prompt, steps=STEPS)
    assert result.passed, (result.steps, [str(d) for d in result.diagnostics])
    assert result.steps["tokens_agree"].all() and len(result.steps) == STEPS


@pytest.mark.slow
def test_a_float16_model_on_the_cpu_agrees_within_float16s_tolerance() -> None:
    model, prompt = suite.llama()
    result = _agrees_with_generate(model.half(), prompt)
    assert 0 < result.steps["max_logit_diff"].max() < 1e-2


@pytest.mark.slow
def test_falcons_alibi_in_bfloat16_exports_and_says_onnx_runtime_has_no_kernel_for_it() -> None:
    """Falcon rounds its ALiBi bias to bfloat16 (slopes.bfloat16() * positions) in a float32 model: the export
    folds the constant part (it failed with INT001), and ONNX Runtime's CPU provider has no bfloat16 Mul for the
    rest: the result names the op and dtype (it was a raw ONNX Runtime exception)."""
    model, prompt = suite.falcon()
    result = onnxsight.verify_generation(model, prompt, steps=4)
    assert not result.passed and result.steps.empty
    assert "ONNX Runtime could not load the decoder" in result.info["error"]
    (kernel,) = [d for d in result.diagnostics if d.code == "DTY002"]
    assert kernel.message.startswith("Mul (opset") and "bfloat16" in kernel.message


def _greedy_without_cache(model: Any, prompt: dict[str, torch.Tensor], steps: int) -> list[list[int]]:
    """The user's decoder run on the whole sequence at every step (no cache), positions as generate() counts."""
    from transformers import DynamicCache

    ids, mask = prompt["input_ids"], prompt["attention_mask"]
    for _ in range(steps):
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        with torch.no_grad():
            logits, _ = model(ids, mask, positions, DynamicCache())
        ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=-1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
    return ids[:, prompt["input_ids"].shape[1]:].tolist()


@pytest.fixture(scope="module")
def user_decoder() -> tuple[Any, dict[str, torch.Tensor], onnxsight.GenerationPrograms]:
    model, prompt = user_decoder_module.build()
    return model, prompt, onnxsight.export_generation(model, prompt)


def test_a_users_own_decoder_is_exported_and_verified(user_decoder: Any) -> None:
    model, prompt, programs = user_decoder
    assert programs.decoder.input_names[:3] == ["input_ids", "attention_mask", "position_ids"]
    result = onnxsight.verify_generation(model, prompt, programs, steps=8)
    assert result.passed, (result.steps, [str(d) for d in result.diagnostics])
    assert result.tokens == result.onnx_tokens == _greedy_without_cache(model, prompt, 8)


@pytest.mark.parametrize("fault, marker", [
    (lambda proto: cache_faults.new_keys_first(proto, "present.1.key"), "CACHE UPDATE"),
    (lambda proto: cache_faults.shift_input(proto, "position_ids", 1), "POSITIONS"),
])
def test_a_fault_in_a_users_own_decoder_is_named_at_the_users_line(user_decoder: Any, fault: Any,
                                                                    marker: str) -> None:
    model, prompt, programs = user_decoder
    faulty = fault(programs.decoder.model_proto)
    result = onnxsight.verify_generation(model, prompt, programs, steps=4, onnx_models={"decoder": faulty})
    assert not result.passed and len(result.root_causes), [str(d) for d in result.diagnostics]
    found = [d for d in result.diagnostics if d.rule is rules.GENERATION_DIVERGED]
    assert len(found) == 1, [str(d) for d in result.diagnostics]
    location = found[0].location
    assert location.file == user_decoder_module.__file__ and location.line == user_decoder_module.line_of(marker)


def _only(result: Any, rule: Any) -> Any:
    found = [d for d in result.diagnostics if d.rule is rule]
    assert len(found) == 1, [str(d) for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.rule is rules.GENERATION_DIVERGED], "said once, as GEN012"
    return found[0]


@pytest.mark.slow
def test_a_step_outside_the_dims_the_export_narrowed_says_so() -> None:
    """The decoder branches on past > new tokens; torch.export narrows the past to at least 3 (CAP007), and the
    prompt step (an empty past) runs in ONNX Runtime on the branch the example took. Every value agrees with the
    exported program on the step's inputs: the program's own guard names what is wrong."""
    model, prompt = user_decoder_module.build(user_decoder_module.LongPastDecoder)
    result = onnxsight.verify_generation(model, prompt, steps=3)
    assert result.first_divergence == {"step": 0, "kind": "logits", "phase": "prompt"}
    message = _only(result, rules.GENERATION_STEP_OUTSIDE_EXPORT).message
    assert "(Guard failed: past_key_values['0.key'].size()[2] >= 3)" in message
    assert "step 0 of the generation (prompt)" in message and "the logits differ by" in message


@pytest.mark.slow
def test_a_guard_of_the_export_that_fails_at_a_step_says_so() -> None:
    """Exported with a mask longer than its past and new tokens, the step reads the mask's last columns; the loop's
    masks are never longer, and the program's guard fails on them: said so, not a raw AssertionError."""
    from transformers import DynamicCache

    model, prompt = user_decoder_module.build(user_decoder_module.PaddedMaskDecoder)
    past = [torch.randn(2, 4, 5, 8) for _ in range(4)]
    kwargs = {"input_ids": torch.randint(1, 64, (2, 3)), "attention_mask": torch.ones(2, 10, dtype=torch.long),
              "position_ids": torch.arange(5, 8).expand(2, 3).contiguous(),
              "past_key_values": DynamicCache([(past[0], past[1]), (past[2], past[3])])}
    dims = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "sequence"}, "past_key_values": [{0: "batch", 2: "past"}] * 4}
    program = onnxsight.export(model, (), kwargs=kwargs, dynamic_shapes=dims)
    result = onnxsight.verify_generation(model, prompt, program, steps=3)
    assert result.first_divergence["step"] == 0 and not result.passed
    message = _only(result, rules.GENERATION_STEP_OUTSIDE_EXPORT).message
    assert "Guard failed" in message and "attention_mask" in message


@pytest.mark.slow
def test_an_encoder_decoder_prompt_without_a_mask() -> None:
    """A prompt of token ids alone (batch 1, no attention_mask): the encoder's length stays dynamic in the decoder
    steps (it was static 7, the export's example, and ONNX Runtime refused the prompt's 6)."""
    model, prompt = suite.t5()
    prompt = {"input_ids": prompt["input_ids"][1:]}
    programs = onnxsight.export_generation(model, prompt)
    for program in (programs.first_step, programs.decoder):
        states = [i for i in program.model_proto.graph.input if i.name.startswith("encoder_")]
        assert states and states[0].type.tensor_type.shape.dim[1].dim_param, states
    result = onnxsight.verify_generation(model, prompt, programs, steps=STEPS)
    assert result.passed, (result.steps, [str(d) for d in result.diagnostics])


@pytest.mark.slow
def test_a_dtype_onnx_runtime_cannot_run_gives_a_result_naming_the_op_and_line() -> None:
    """bfloat16 on the CPU: ONNX Runtime has no kernel for the step's first bfloat16 op. The result says so
    (ORT001, DTY002 at the user's line), where a raw ONNX Runtime exception escaped."""
    model, prompt = user_decoder_module.build()
    model = model.to(torch.bfloat16)
    result = onnxsight.verify_generation(model, prompt, steps=4)
    assert not result.passed and result.steps.empty and "Could not find an implementation" in result.info["error"]
    codes = {d.code for d in result.diagnostics}
    assert {"ORT001", "DTY002"} <= codes, [str(d) for d in result.diagnostics]
    kernel = next(d for d in result.diagnostics if d.code == "DTY002")
    assert "bfloat16" in kernel.message and kernel.location.file == user_decoder_module.__file__


@pytest.mark.slow
def test_an_export_that_fails_writes_its_report_and_names_the_rule_at_the_users_line(tmp_path: Any) -> None:
    model, prompt = user_decoder_module.build(user_decoder_module.DataBranchDecoder)
    with pytest.raises(onnxsight.ExportError) as caught:
        onnxsight.verify_generation(model, prompt, steps=4, report=True, artifacts_dir=tmp_path)
    error = caught.value
    assert "CAP002" in str(error)
    assert error.report_paths and all(os.path.isfile(p) for p in error.report_paths)
    sarif = json.loads(next(open(p).read() for p in error.report_paths if p.endswith(".sarif")))
    found = [r for r in sarif["runs"][0]["results"] if r["ruleId"] == "CAP002"]
    location = found[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("user_decoder.py")
    assert location["region"]["startLine"] == user_decoder_module.line_of("DATA BRANCH")


@pytest.mark.slow
def test_a_loop_past_the_models_positions_keeps_the_steps_that_ran() -> None:
    """GPT-2's 64 learned positions: the prompt's 6 tokens and 64 steps need 70. PyTorch's step 59 fails; the 59
    steps that ran are the result, and GEN011 says why the loop ended (where the whole result was lost)."""
    model, prompt = suite.gpt2()
    result = onnxsight.verify_generation(model, prompt, steps=64)
    assert len(result.steps) == 59 and result.steps["tokens_agree"].all() and result.steps_agreed == 59
    assert not result.passed and result.first_divergence is None
    assert "config.n_positions = 64" in result.info["error"]
    (stopped,) = [d for d in result.diagnostics if d.rule is rules.GENERATION_MODEL_CALL_FAILED]
    assert "decode (step 59)" in stopped.message and "position 64" in stopped.message
