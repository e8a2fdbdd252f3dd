"""onnxsight.verify_generation on a decoder: a 16-step greedy loop over the exported step in ONNX Runtime
against the model in PyTorch, and faults injected into the step found at their step, node and line.

One LLaMA with grouped-query attention (2 layers, random weights from a local config) is exported once
(export_generation: one step program over the cache, past length down to 0); the prompt is a batch of two
with the first row left-padded, as a tokenizer pads a batch for generate().
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest
import torch

import onnxsight
from onnxsight import rules
from onnxsight.verification import VerificationError
from tests.verification import generation_faults as faults

transformers = pytest.importorskip("transformers")

STEPS = 16


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
    return LlamaForCausalLM(config).eval()


def _prompt() -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 128, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, :2] = 0  # row 0 is left-padded
    ids[0, :2] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def llama() -> tuple[Any, onnxsight.GenerationPrograms]:
    model = _llama()
    return model, onnxsight.export_generation(model, _prompt())


def test_sixteen_steps_agree_with_pytorch_and_with_generate(llama: Any) -> None:
    model, programs = llama
    decoder = programs.decoder
    assert decoder.input_names[:3] == ["input_ids", "attention_mask", "position_ids"]
    assert decoder.input_names[3:] == [f"past_key_values.{layer}.{kind}" for layer in range(2)
                                       for kind in ("key", "value")]
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=STEPS)
    assert result.passed, result.steps
    assert len(result.steps) == STEPS and result.steps_agreed == STEPS
    assert result.first_divergence is None and result.first_token_difference is None
    assert result.steps["tokens_agree"].all() and result.steps["logits_passed"].all()
    assert result.steps["cache_passed"].all() and (result.steps["max_logit_diff"] < 1e-4).all()
    assert list(result.steps["past_length"]) == [0] + list(range(6, 6 + STEPS - 1))
    assert result.steps["phase"].tolist() == ["prompt"] + ["decode"] * (STEPS - 1)
    assert (result.steps["margin"] > 0).all()
    assert result.tokens == result.onnx_tokens
    # the loop the exported step serves gives generate()'s greedy tokens, padding included
    prompt = _prompt()
    with torch.no_grad():
        expected = model.generate(**prompt, max_new_tokens=STEPS, min_new_tokens=STEPS, do_sample=False)
    assert result.tokens == expected[:, prompt["input_ids"].shape[1]:].tolist()
    assert not [d for d in result.diagnostics if d.level is rules.Level.ERROR]


def _root(result: Any) -> Any:
    assert result.verification is not None, [str(d) for d in result.diagnostics]
    roots = result.root_causes
    assert len(roots), result.verification.nodes[~result.verification.nodes["passed"]]
    return roots.iloc[0]


def _diverged(result: Any) -> Any:
    found = [d for d in result.diagnostics if d.rule is rules.GENERATION_DIVERGED]
    assert len(found) == 1, [str(d) for d in result.diagnostics]
    return found[0]


def test_a_cache_update_that_keeps_the_old_cache_is_found_at_step_0_and_the_concat(llama: Any) -> None:
    """The attention then reads an empty cache and ONNX Runtime fails at the prompt step; fed PyTorch's
    inputs node by node (isolated), the per-node comparison names the update that kept the old cache."""
    model, programs = llama
    faulty = faults.keep_old_cache(programs.decoder.model_proto, "present.0.key")
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=4, onnx_models={"decoder": faulty})
    assert not result.passed and len(result.steps) == 1
    assert result.first_divergence == {"step": 0, "kind": "error", "phase": "prompt"}
    root = _root(result)
    assert result.verification.info["mode"] == "isolated"
    assert root["value"] == "present.0.key" and root["onnx_op"] == "Concat" and root["shape_mismatch"]
    assert root["target"] == "aten.cat.default"
    diagnostic = _diverged(result)  # the model's own line: no frame of a user's file made the cache update
    assert os.path.basename(diagnostic.location.file) == "modeling_llama.py"
    assert "cache.update(" in diagnostic.location.code
    assert f"at {diagnostic.location}" in diagnostic.message
    assert "step 0 of the generation (prompt)" in diagnostic.message and "present.0.key" in diagnostic.message
    assert result.step_inputs["past_key_values.0.key"].shape[2] == 0  # the prompt step: an empty cache


def test_new_keys_before_the_old_ones_is_found_at_step_1(llama: Any) -> None:
    """At step 0 the cache is empty and either order is right: the fault shows at the first decode step."""
    model, programs = llama
    faulty = faults.new_keys_first(programs.decoder.model_proto, "present.1.key")
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=4, onnx_models={"decoder": faulty})
    assert result.steps["divergence"].tolist()[0] is None
    assert result.steps["divergence"].tolist()[1] in ("logits", "cache")  # the attention reads the keys too
    assert result.first_divergence["step"] == 1 and result.steps_agreed == 1
    root = _root(result)
    assert root["value"] == "present.1.key" and root["target"] == "aten.cat.default"
    assert result.step_inputs["past_key_values.1.key"].shape[2] == 6  # PyTorch's cache after the prompt


def test_without_the_per_node_run_the_divergence_is_still_reported(llama: Any) -> None:
    model, programs = llama
    faulty = faults.new_keys_first(programs.decoder.model_proto, "present.1.key")
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=3, onnx_models={"decoder": faulty},
                                         per_node=False)
    assert result.verification is None and result.root_causes.empty and not result.passed
    assert "it was not compared per node (per_node=False)" in _diverged(result).message
    assert result.step_inputs["past_key_values.1.key"].shape[2] == 6


def test_a_position_off_by_one_is_found_at_the_rotary_embedding(llama: Any) -> None:
    model, programs = llama
    faulty = faults.shift_input(programs.decoder.model_proto, "position_ids", 1)
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=4, onnx_models={"decoder": faulty})
    assert result.first_divergence["step"] == 0 and result.first_divergence["kind"] in ("logits", "cache")
    root = _root(result)
    assert root["target"] in ("aten.unsqueeze.default", "aten._to_copy.default", "aten.to.dtype"), root
    location = _diverged(result).location
    assert os.path.basename(location.file) == "modeling_llama.py" and "position_ids" in location.code


@pytest.mark.slow
def test_a_fault_at_a_prompt_shorter_than_the_exports_narrowed_mask_is_found_at_its_node(llama: Any) -> None:
    """The export narrows the mask to at least 4 positions (CAP007, torch.export's guess); ONNX Runtime runs a
    2-token prompt all the same, and the per-node comparison still names the fault's node (it said GEN009/GEN012,
    the step outside the program's range, with no node)."""
    model, programs = llama
    short = {"input_ids": torch.tensor([[5, 9]]), "attention_mask": torch.ones(1, 2, dtype=torch.long)}
    faulty = faults.shift_input(programs.decoder.model_proto, "position_ids", 1)
    result = onnxsight.verify_generation(model, short, programs, steps=3, onnx_models={"decoder": faulty})
    assert result.first_divergence["step"] == 0
    assert os.path.basename(_diverged(result).location.file) == "modeling_llama.py" and len(_root(result))
    assert onnxsight.verify_generation(model, short, programs, steps=3).passed
    one = {"input_ids": torch.tensor([[5]]), "attention_mask": torch.ones(1, 1, dtype=torch.long)}
    assert onnxsight.verify_generation(model, one, programs, steps=3).passed


def test_a_mask_ignored_is_found_on_the_padded_prompt(llama: Any) -> None:
    model, programs = llama
    faulty = faults.ignore_input(programs.decoder.model_proto, "attention_mask")
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=4, onnx_models={"decoder": faulty})
    assert result.first_divergence["step"] == 0
    root = _root(result)
    upstream = result.verification.nodes.set_index("value")
    assert root["value"] in upstream.index and not root["shape_mismatch"]
    # without padding the same fault changes nothing: every row attends to every token anyway
    unpadded = {"input_ids": _prompt()["input_ids"][1:], "attention_mask": torch.ones(1, 6, dtype=torch.long)}
    clean = onnxsight.verify_generation(model, unpadded, programs, steps=3, onnx_models={"decoder": faulty})
    assert clean.passed


def test_reports_show_the_steps_the_chart_and_the_divergence_at_its_line(llama: Any, tmp_path: Any) -> None:
    import json

    from onnxsight.reports import RunRecord, rerender
    from tests.sarif_check import check_sarif_file

    model, programs = llama
    faulty = faults.new_keys_first(programs.decoder.model_proto, "present.1.key")
    result = onnxsight.verify_generation(model, _prompt(), programs, steps=4, onnx_models={"decoder": faulty},
                                         report=True, artifacts_dir=tmp_path)
    markdown, html, sarif, record = result.report_paths
    text = open(markdown, encoding="utf-8").read()
    assert "## Generation" in text and "generation diverged at step 1" in text
    table = text[text.index("| step | phase |"):].split("\n\n")[0].splitlines()
    assert len(table) == 2 + 4 and table[3].startswith("| 1 | decode | 6 | ")
    assert "| present.1.key | aten.cat.default | Concat |" in text and "modeling\\_llama.py:" in text
    page = open(html, encoding="utf-8").read()
    assert 'id="generation-chart"' in page and 'id="generation-table"' in page
    log = check_sarif_file(sarif, "generation_divergence")
    [found] = [r for r in log["runs"][0]["results"] if r["ruleId"] == "GEN001"]
    location = found["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("modeling_llama.py") and location["region"]["startLine"]
    run = RunRecord.load(record)
    assert run.kind == "generation" and run.status == "verification failed"
    assert run.generation["first_divergence"]["step"] == 1 and run.generation["steps"][0]["divergence"] is None
    assert json.loads(open(record, encoding="utf-8").read())["generation"]["steps_agreed"] == 1
    again = rerender(record)
    assert "## Generation" in open(again[0], encoding="utf-8").read()


def test_a_file_without_its_program_diverges_without_a_node(llama: Any, tmp_path: Any) -> None:
    import onnx

    model, programs = llama
    path = str(tmp_path / "decoder.onnx")
    onnx.save(faults.keep_old_cache(programs.decoder.model_proto), path)
    result = onnxsight.verify_generation(model, _prompt(), {"decoder": path}, steps=2)
    assert result.first_divergence["step"] == 0 and result.verification is None
    codes = [d.code for d in result.diagnostics]
    assert "GEN009" in codes and "GEN001" in codes
    assert onnxsight.verify_generation(model, _prompt(), path.replace("decoder.onnx", "clean.onnx")
                                       if False else programs.decoder.model_proto, steps=2).passed


def test_a_program_of_another_model_is_the_captures_difference(llama: Any) -> None:
    """The ONNX model agrees with its program value by value: the difference is the program's (GEN008)."""
    model, programs = llama
    other = _llama()
    with torch.no_grad():
        other.lm_head.weight.mul_(1.5)
    result = onnxsight.verify_generation(other, _prompt(), programs, steps=2)
    assert result.first_divergence["step"] == 0 and result.root_causes.empty
    assert [d.code for d in result.diagnostics if d.level is rules.Level.ERROR] == ["GEN008"]


def test_near_tie_is_said_so_and_the_loop_goes_on() -> None:
    """ONNX Runtime's logits within tolerance pick the other of two tokens PyTorch's logits almost tie."""
    from onnxsight.diagnostics import DiagnosticContext
    from onnxsight.verification import Tolerance
    from onnxsight.verification._generation import _Loop
    from onnxsight.verification._generation_io import step_signature

    sig = step_signature("decoder", ["input_ids"], ["logits"])
    ctx = DiagnosticContext()
    loop = _Loop(None, None, {}, {"decoder": sig}, Tolerance(), ctx, 1)
    torch_logits = torch.tensor([[[0.0, 1.0, 1.00001, -3.0]]])
    onnx_logits = np.array([[[0.0, 1.00002, 1.0, -3.0]]], dtype=np.float32)
    row = loop.judge(sig, torch_logits, {"logits": onnx_logits}, {})
    assert row["divergence"] == "near-tie" and row["near_tie"] and not row["tokens_agree"]
    assert row["onnx_tokens"] == [1] and row["logits_passed"]
    row.update(torch_tokens=[2])
    loop.note_near_tie(3, sig, torch_logits, row)
    [note] = ctx.diagnostics
    assert note.rule is rules.GENERATION_NEAR_TIE and note.level is rules.Level.NOTE
    assert "step 3: ONNX Runtime picks token 1 where PyTorch picks 2 (row 0)" in note.message
    far = np.array([[[0.0, 1.5, 1.0, -3.0]]], dtype=np.float32)
    assert loop.judge(sig, torch_logits, {"logits": far}, {})["divergence"] == "logits"
    # an override keyed "logits" holds whatever the graph calls the output (here linear_14)
    named = step_signature("decoder", ["input_ids"], ["linear_14"])
    loose = _Loop(None, None, {}, {"decoder": named}, Tolerance(overrides={"logits": (1.0, 0.0)}), ctx, 1)
    row = loose.judge(named, torch_logits, {"linear_14": far}, {})
    assert row["logits_passed"] and row["divergence"] == "near-tie"


@pytest.mark.parametrize("programs, code", [
    ({"decoder": "missing.onnx"}, "GEN002"),
    ({"decoder": 3}, "GEN002"),
    ({"decoders": None}, "GEN002"),
])
def test_bad_programs_are_refused(llama: Any, programs: Any, code: str) -> None:
    model, _ = llama
    with pytest.raises(VerificationError) as failure:
        onnxsight.verify_generation(model, _prompt(), programs, steps=2)
    assert failure.value.rule == code


def test_steps_must_be_positive(llama: Any) -> None:
    model, programs = llama
    with pytest.raises(VerificationError, match="steps = 0"):
        onnxsight.verify_generation(model, _prompt(), programs, steps=0)


def _renamed(model: Any, old: str, new: str) -> Any:
    """A copy of ``model`` whose graph input or output ``old`` is called ``new``."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        node.output[:] = [new if o == old else o for o in node.output]
    for value in [*copy.graph.input, *copy.graph.output]:
        if value.name == old:
            value.name = new
    return copy


@pytest.mark.parametrize("old, new, code, message", [
    ("input_ids", "tokens", "GEN003", "the decoder's input tokens has no role"),
    ("present.0.value", "kv_0", "GEN006", "input past_key_values.0.value is returned by no step"),
])
def test_a_step_the_loop_cannot_feed_is_refused_naming_it(llama: Any, old: str, new: str, code: str,
                                                          message: str) -> None:
    model, programs = llama
    renamed = _renamed(programs.decoder.model_proto, old, new)
    with pytest.raises(VerificationError, match=message) as failure:
        onnxsight.verify_generation(model, _prompt(), renamed, steps=2)
    assert failure.value.rule == code


def test_a_decoder_without_positions_warns_on_a_padded_prompt(llama: Any) -> None:
    """Exported without position_ids, the step numbers left padding as positions: both loops agree, and
    both differ from generate() on the padded row, which GEN010 says."""
    model, _ = llama
    prompt = _prompt()
    from transformers import DynamicCache

    cache = DynamicCache([(torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)) for _ in range(2)])
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    program = onnxsight.export(model, (), kwargs={"input_ids": torch.randint(1, 128, (2, 3)),
                                                  "attention_mask": torch.ones(2, 8, dtype=torch.long), name: cache},
                               dynamic_shapes={"input_ids": {0: "batch", 1: "sequence"},
                                               "attention_mask": {0: "batch", 1: "total"},
                                               name: [{0: "batch", 2: "past"}] * 4})
    result = onnxsight.verify_generation(model, prompt, program, steps=3)
    assert result.passed
    [warning] = [d for d in result.diagnostics if d.rule is rules.GENERATION_POSITIONS_COUNT_PADDING]
    assert "rows 0" in warning.message


def test_a_model_that_raises_is_cap025_at_the_line_with_its_reports(tmp_path: Any) -> None:
    """4 query heads over 3 key/value heads: the model raises in PyTorch before anything is exported. The error is
    CAP025 at that line, with the reports, not sdpa's RuntimeError from export_generation's first forward."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                         num_key_value_heads=3, intermediate_size=64)).eval()
    with pytest.raises(onnxsight.CaptureError) as failure:
        onnxsight.verify_generation(model, _prompt(), report=True, artifacts_dir=tmp_path)
    [diagnostic] = failure.value.diagnostics
    assert diagnostic.code == "CAP025"
    assert "LlamaForCausalLM.forward raises RuntimeError" in diagnostic.message
    assert "scaled_dot_product_attention" in diagnostic.message  # the line that raised
    assert diagnostic.location.file == __file__  # the user's call
    assert failure.value.report_paths and all(os.path.exists(p) for p in failure.value.report_paths)


def test_an_encoders_example_ids_stay_in_its_vocabulary() -> None:
    """A prompt holding the vocabulary's last id (Marian pads with it): the encoder's example draws below it."""
    from transformers import BartConfig, BartForConditionalGeneration

    from onnxsight.pipeline._generation import step_examples

    torch.manual_seed(0)
    model = BartForConditionalGeneration(BartConfig(
        vocab_size=8, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16, pad_token_id=7,
        decoder_start_token_id=2)).eval()
    prompt = {"input_ids": torch.tensor([[5, 4, 7, 7], [3, 6, 5, 4]]),
              "attention_mask": torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])}
    [(name, _, encoder_kwargs, _), *_] = step_examples(model, prompt)
    assert name == "encoder" and int(encoder_kwargs["input_ids"].max()) < 8
