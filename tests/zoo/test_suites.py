"""Suites load by name or file, unavailable ones skip with a clear message, filters select models."""

from __future__ import annotations

import os

import pytest

from onnxsight.zoo import BUILTIN_SUITES, ModelSpec, SuiteUnavailable, load_suite, load_suites
from onnxsight.zoo.cli import main
from onnxsight.zoo.suites._hf_breadth import ARCHS

HERE = os.path.dirname(os.path.abspath(__file__))

_ARCHS = ARCHS
TRANSFORMERS_MODELS = {"bert", "distilbert", "gpt2", "t5", "bart", "llama", "mistral", "qwen2",
                       "llama_kv_cache_decode", "whisper", "vit", "swin", "convnext", "resnet", "mobilenet_v2",
                       "regnet", "segformer", "detr",
                       # breadth (onnxsight/zoo/suites/_hf_breadth.py)
                       "roberta", "xlm_roberta", "albert", "electra", "deberta_v2", "mpnet", "mobilebert",
                       "squeezebert", "phi", "phi3", "gemma", "gemma2", "qwen3", "opt", "gpt_neox", "falcon", "bloom",
                       "gpt_bigcode", "gptj", "stablelm", "starcoder2", "olmo", "mixtral", "qwen2_moe", "olmoe",
                       "marian", "mbart", "pegasus", "m2m_100", "deit", "beit", "dinov2", "levit", "poolformer",
                       "efficientnet", "mobilevit", "wav2vec2", "hubert", "wavlm", "audio_spectrogram_transformer",
                       "llama_dynamic_cache", "qwen2_dynamic_cache", "mistral_dynamic_cache", "ernie",
                       "conditional_detr", "siglip2"}
TRICKY_MODELS = {"lstm", "gru_bidirectional", "packed_speech_lstm", "vgg_head", "attention", "cond", "encoder_functions", "index_put_inplace", "cumsum",
                 "topk_sort", "einsum", "stft", "dict_io", "python_scalars"}


def test_builtin_suites_list_their_models() -> None:
    assert {s.name for s in load_suite("transformers").specs} == {f"hf_{m}" for m in TRANSFORMERS_MODELS}
    assert {s.name for s in load_suite("tricky").specs} == TRICKY_MODELS
    assert len(load_suite("smoke").specs) >= 3


def test_transformers_suite_is_broad() -> None:
    """At least 40 architectures, across the kinds people export, each with dims that vary."""
    specs = load_suite("transformers").specs
    assert len(specs) >= 40
    kinds = {"encoder", "decoder", "encoder-decoder", "vision", "audio", "moe", "kv-cache"}
    assert kinds <= {tag for spec in specs for tag in spec.tags}
    assert all(spec.dynamic for spec in specs)


@pytest.mark.parametrize("arch", [a.name for a in _ARCHS])
def test_transformers_breadth_configs_build(arch: str) -> None:
    """Each row's config is a valid transformers config (the model itself is built by the zoo run)."""
    import transformers

    row = next(a for a in _ARCHS if a.name == arch)
    config = getattr(transformers, row.config)(**row.sizes)
    assert getattr(transformers, row.model).config_class is type(config)


@pytest.mark.parametrize("name", ["torchvision", "timm"])
def test_unimportable_suites_are_skipped_with_a_reason(name: str) -> None:
    try:
        __import__(name)
    except Exception:  # noqa: BLE001
        suite = load_suite(name)
        assert suite.specs == () and f"{name} does not import here" in suite.skipped
    else:
        assert load_suite(name).specs  # where it imports (CUDA machines), the suite runs


def test_suite_from_a_file_and_its_source_lines() -> None:
    suite = load_suite(os.path.join(HERE, "suites", "faulty.py"))
    assert suite.name == "faulty" and suite.ref.endswith("faulty.py")
    file, line = suite.spec("aborts").source
    assert file.endswith("faulty.py") and line > 1
    with pytest.raises(KeyError, match="has no model 'nope'"):
        suite.spec("nope")


def test_unknown_suite_names_the_builtins(tmp_path) -> None:
    with pytest.raises(ValueError, match="smoke"):
        load_suite(str(tmp_path / "missing.py"))


def test_suite_raising_unavailable_and_duplicates(tmp_path) -> None:
    unavailable = tmp_path / "gpu_only.py"
    unavailable.write_text("from onnxsight.zoo import SuiteUnavailable\n"
                           "def suite():\n    raise SuiteUnavailable('needs CUDA')\n")
    assert load_suite(str(unavailable)).skipped == "needs CUDA"
    duplicated = tmp_path / "dup.py"
    duplicated.write_text("from onnxsight.zoo import ModelSpec\n"
                          "def suite():\n    return [ModelSpec('a', print), ModelSpec('a', print)]\n")
    with pytest.raises(ValueError, match="duplicate model names: a"):
        load_suite(str(duplicated))


@pytest.mark.parametrize("pattern, selected", [
    (None, True), ("bert", True), ("hf_*", True), ("gpt*", False), ("tag:text", True), ("tag:vision", False),
    ("gpt2,bert", True),
])
def test_filter(pattern: str | None, selected: bool) -> None:
    spec = ModelSpec("hf_bert", print, tags=("text", "encoder"))
    assert spec.matches(pattern) is selected


def test_comma_separated_suites() -> None:
    assert [s.name for s in load_suites("smoke, tricky")] == ["smoke", "tricky"]
    assert set(BUILTIN_SUITES) == {"smoke", "tricky", "transformers", "torchvision", "timm", "quantized", "generation"}
    assert issubclass(SuiteUnavailable, Exception)


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zoo", "list", "--suite", "tricky,smoke", "--filter", "tag:rnn"]) == 0
    out = capsys.readouterr().out
    assert "tricky: 3 models" in out and "lstm" in out and "gru_bidirectional" in out and "smoke: 0 models" in out
    assert main(["zoo", "list", "--suite", "no_such_suite"]) == 3
