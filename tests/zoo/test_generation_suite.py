"""The zoo's generation suite: generative models verified as 16-step loops over their KV cache, their steps
agreed on the dashboard and in the summaries. `make test` runs one model in-process (GPT-2); the whole suite
through the job runner is slow (`make test-generation`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from onnxsight.zoo import ModelResult, load_suite
from onnxsight.zoo._dashboard import render
from onnxsight.zoo._summary import console_table, markdown_summary
from onnxsight.zoo._worker import run_model

pytest.importorskip("transformers")

MODELS = {"gen_llama", "gen_llama_mha", "gen_qwen2", "gen_gpt2", "gen_bart", "gen_marian", "gen_t5", "gen_whisper",
          "gen_mistral", "gen_gemma2", "gen_phi3", "gen_opt", "gen_gpt_neox", "gen_bloom", "gen_mbart", "gen_pegasus",
          "gen_qwen3", "gen_phi", "gen_gptj", "gen_codegen", "gen_stablelm", "gen_olmo2", "gen_granite",
          "gen_starcoder2", "gen_gpt_bigcode", "gen_mixtral", "gen_qwen2_moe", "gen_cohere", "gen_m2m100",
          "gen_blenderbot_small", "gen_mt5", "gen_mpt", "gen_gemma3", "gen_gpt_neo", "gen_llama4", "gen_deepseek_v3"}


def _task(model: str, tmp_path) -> dict:
    return {"model": model, "suite": "generation", "model_dir": str(tmp_path), "providers": ["CPUExecutionProvider"],
            "per_node": True, "opset": None, "source": {}}


def test_the_suite_has_the_decoders_and_encoder_decoders() -> None:
    specs = load_suite("generation").specs
    assert {s.name for s in specs} == MODELS
    assert all(s.generation_steps == 16 and "generation" in s.tags for s in specs)
    assert {"grouped-query", "decoder", "encoder-decoder", "audio", "sliding-window", "alibi", "complex-rotary",
            "latent-attention"} <= {
        t for s in specs for t in s.tags}


def test_gpt2_generation_record(tmp_path) -> None:
    result = run_model(_task("gen_gpt2", tmp_path))
    assert (result.status, result.stage) == ("passed", "done"), (result.error, result.root_cause)
    assert set(result.timings) == {"build", "export", "save", "verify"}
    assert result.generation["steps"] == result.generation["steps_agreed"] == 16
    assert result.generation["first_divergence"] is None and len(result.generation["max_logit_diff"]) == 16
    assert result.max_abs_diff < 1e-4 and result.outputs_compared == 16
    assert result.onnx_bytes == (tmp_path / "decoder.onnx").stat().st_size and result.node_count > 20
    assert (tmp_path / "stage").read_text() == "done"


def _generation_result(name: str, agreed: int, status: str) -> ModelResult:
    divergence = None if agreed == 16 else {"step": agreed, "kind": "cache", "phase": "decode"}
    return ModelResult(name=name, suite="generation", status=status, stage="done",
                       generation={"steps": 16, "steps_agreed": agreed, "first_divergence": divergence})


def test_steps_agreed_on_the_dashboard_and_in_the_summaries() -> None:
    results = [_generation_result("gen_llama", 16, "passed"), _generation_result("gen_t5", 3, "failed")]
    html = render(results, run_id="r")
    title = "generation steps that agree with PyTorch before the first divergence"
    assert f'<th title="{title}">steps agreed</th>' in html
    cells = re.findall(r'<td class="num">(\d+/16)</td>', html)
    assert sorted(cells) == ["16/16", "3/16"]
    summary = markdown_summary(results, run_id="r")
    assert "| steps agreed |" in summary and "| 3/16 |" in summary and "| 16/16 |" in summary
    assert "3/16 steps agree" in console_table(results)
    plain = render([ModelResult(name="mlp", suite="smoke", status="passed", stage="done")], run_id="r")
    assert "steps agreed" not in plain and "steps agreed" not in markdown_summary(
        [ModelResult(name="mlp", suite="smoke", status="passed")], run_id="r")


@pytest.mark.slow
def test_the_whole_suite_agrees_for_sixteen_steps(tmp_path) -> None:
    """`onnxsight zoo run --suite generation`: every model, each in its own process, 16 steps agreed."""
    out = tmp_path / "zoo"
    completed = subprocess.run([sys.executable, "-m", "onnxsight.zoo", "run", "--suite", "generation", "--out",
                                str(out), "--jobs", "2", "--timeout", "900"], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    records = [json.loads(path.read_text()) for path in out.rglob("result.json")]
    assert {r["name"] for r in records} == MODELS
    for record in records:
        assert record["status"] == "passed", (record["name"], record["error"], record["root_cause"])
        assert record["generation"]["steps_agreed"] == 16, record["name"]
    dashboard = (out / "dashboard.html").read_text()
    assert dashboard.count(">16/16</td>") == len(MODELS)
