"""Decoder graphs ONNX Runtime's transformer optimizer fuses: one attention op per layer on onnxsight's
GPT-2 (``Attention``) and LLaMA (``MultiHeadAttention`` with ``RotaryEmbedding``), the fused models still
matching PyTorch, and the rewrite refused where the fused op would compute something else."""

from __future__ import annotations

import contextlib
import io
import math
from typing import Any, Callable

import onnx
import pytest
import torch

import onnxsight
from onnxsight.exporter.optimize._decoder import causal_fill

LAYERS, HIDDEN, HEADS, SEQ = 2, 64, 4, 8


def _export(model: torch.nn.Module, tmp_path_factory: Any, name: str,
            batch: int = 1) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    model.config.use_cache = False
    model.config.return_dict = False
    model.eval()
    args = (torch.randint(0, 100, (batch, SEQ)),)
    program = onnxsight.export(model, args, optimize="ort-fusion")
    path = str(tmp_path_factory.mktemp(name) / f"{name}.onnx")
    program.save(path)
    return program, args, path


def _gpt2(transformers: Any, **overrides: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                     **overrides)
    return transformers.GPT2Model(config)


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    transformers = pytest.importorskip("transformers")
    return _export(_gpt2(transformers), tmp_path_factory, "gpt2")


def _llama(transformers: Any, **overrides: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    settings = dict(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                    num_key_value_heads=HEADS, intermediate_size=2 * HIDDEN, max_position_embeddings=32)
    return transformers.LlamaModel(transformers.LlamaConfig(**{**settings, **overrides}))


@pytest.fixture(scope="module")
def llama(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    transformers = pytest.importorskip("transformers")
    return _export(_llama(transformers), tmp_path_factory, "llama")


def _fused(path: str, **options: Any) -> Any:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        return optimize_model(path, model_type="gpt2", num_heads=HEADS, hidden_size=HIDDEN, **options)


def _stats(fused: Any) -> dict[str, int]:
    return {op: n for op, n in fused.get_fused_operator_statistics().items() if n}


def test_gpt2_attention_fuses_once_per_layer_and_matches_pytorch(gpt2: Any) -> None:
    program, args, path = gpt2
    fused = _fused(path, opt_level=0)
    assert _stats(fused)["Attention"] == LAYERS
    assert _stats(fused)["SkipLayerNormalization"] == 2 * LAYERS
    unidirectional = [a.i for n in fused.model.graph.node if n.op_type == "Attention" for a in n.attribute
                      if a.name == "unidirectional"]
    assert unidirectional == [1] * LAYERS
    result = onnxsight.verify(program, args, onnx_model=fused.model)
    assert result.passed
    assert result.info["compared"] > LAYERS


def test_llama_attention_fuses_once_per_layer_with_rotary_embeddings(llama: Any) -> None:
    program, args, path = llama
    fused = _fused(path, opt_level=0)
    stats = _stats(fused)
    assert stats["MultiHeadAttention"] == LAYERS
    assert stats["RotaryEmbedding"] == 2 * LAYERS
    assert stats["SkipSimplifiedLayerNormalization"] == 2 * LAYERS
    result = onnxsight.verify(program, args, onnx_model=fused.model)
    assert result.outputs["passed"].astype(bool).all()  # the fused model's output matches PyTorch's
    failed = result.nodes[~result.nodes["passed"].astype(bool)]
    # every other value that survives fusion matches; Q after the rotary embedding keeps its name on
    # RotaryEmbedding's (batch, length, hidden) output, which PyTorch holds as (batch, heads, length, head size)
    assert set(failed["onnx_op"]) <= {"RotaryEmbedding"}
    assert len(failed) <= LAYERS
    assert result.info["compared"] > 4 * LAYERS


def test_llama_fused_model_passes_verification(llama: Any) -> None:
    # ORT's RotaryEmbedding gives Q-after-rotary's name to its (batch, length, hidden) output: listed as held in
    # another layout, not compared and no root cause; the attention that reads it is still compared
    program, args, path = llama
    fused = _fused(path, opt_level=0).model
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert result.passed
    other = result.coverage[result.coverage["reason"].str.startswith("held by ")]
    assert len(other) == LAYERS
    assert set(other["reason"]) == {f"held by RotaryEmbedding in another layout: [1, {SEQ}, {HIDDEN}], "
                                    f"PyTorch [1, {HEADS}, {SEQ}, {HIDDEN // HEADS}]"}
    assert not other["compared"].any()
    assert result.coverage_summary["held by a fused op in another layout"] == LAYERS
    assert not set(other["value"]) & set(result.nodes["value"])
    assert len(result.root_causes) == 0
    read = {out for node in fused.graph.node if set(node.input) & set(other["value"]) for out in node.output}
    readers = result.nodes[result.nodes["value"].isin(read)]
    assert set(readers["onnx_op"]) == {"MultiHeadAttention"} and len(readers) >= LAYERS
    assert readers["passed"].astype(bool).all()
    # isolated mode feeds the attention ONNX Runtime's own Q, in its layout, not PyTorch's
    isolated = onnxsight.verify(program, args, onnx_model=fused, mode="isolated")
    assert isolated.passed and isolated.coverage_summary["held by a fused op in another layout"] == LAYERS


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_exported_decoder_still_verifies_with_the_fuser_forms(name: str, request: Any) -> None:
    program, args, _ = request.getfixturevalue(name)
    assert onnxsight.verify(program, args).passed
    ops = [n.op_type for n in program.model_proto.graph.node]
    assert "Shape" in ops  # the forms were written: sizes read at run time, as the fusers expect


@pytest.mark.parametrize("name, fused_op", [("gpt2", "Attention"), ("llama", "MultiHeadAttention")])
def test_a_batch_of_two_fuses_and_verifies(name: str, fused_op: str, tmp_path_factory: Any) -> None:
    # transformers expands the causal mask to every batch row; RotaryEmbedding wants a position id per row
    transformers = pytest.importorskip("transformers")
    model = _gpt2(transformers) if name == "gpt2" else _llama(transformers)
    program, args, path = _export(model, tmp_path_factory, f"{name}-batch", batch=2)
    assert onnxsight.verify(program, args).passed
    fused = _fused(path, opt_level=0)
    assert _stats(fused)[fused_op] == LAYERS
    assert onnxsight.verify(program, args, onnx_model=fused.model).outputs["passed"].astype(bool).all()


def test_default_opt_level_leaves_a_correct_model(gpt2: Any) -> None:
    # NOTE: opt_level=1 (model_type="gpt2"'s default) runs ORT's constant folding first, which folds the
    # Shape-based sizes of a static graph before the Python fusers look for them: no attention fusion,
    # but the model still matches.
    program, args, path = gpt2
    fused = _fused(path)
    assert "Attention" not in _stats(fused)
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed


def test_gpt2_layers_with_another_scale_are_left_to_themselves(tmp_path_factory: Any) -> None:
    # scale_attn_by_inverse_layer_idx: layer i scales by 1/sqrt(E)/(i + 1); ORT's Attention knows only 1/sqrt(E)
    transformers = pytest.importorskip("transformers")
    program, args, path = _export(_gpt2(transformers, scale_attn_by_inverse_layer_idx=True), tmp_path_factory,
                                  "gpt2-scaled")
    fused = _fused(path, opt_level=0)
    assert _stats(fused)["Attention"] == 1  # the first layer only
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed


def test_grouped_query_llama_is_left_as_translated(tmp_path_factory: Any) -> None:
    transformers = pytest.importorskip("transformers")
    program, args, path = _export(_llama(transformers, num_key_value_heads=2), tmp_path_factory, "gqa")
    assert "MultiHeadAttention" not in _stats(_fused(path, opt_level=0))
    assert not any(t.name.startswith("_padding_mask") for t in program.model_proto.graph.initializer)
    assert onnxsight.verify(program, args).passed


def _mask(rows: int, cols: int, fill: float) -> torch.Tensor:
    """torch's causal additive mask: 0 on and below the diagonal, ``fill`` above."""
    return torch.zeros(rows, cols).masked_fill(~torch.ones(rows, cols, dtype=torch.bool).tril(), fill)


@pytest.mark.parametrize("mask, expected", [
    (_mask(4, 4, -math.inf), -math.inf),
    (_mask(4, 4, -math.inf)[None, None], -math.inf),
    (_mask(4, 4, torch.finfo(torch.float32).min), torch.finfo(torch.float32).min),
    (_mask(4, 4, -1e4), None),                                  # not low enough to be "masked out" exactly
    (torch.zeros(4, 4), None),                                  # masks nothing
    (_mask(4, 4, -math.inf).T.contiguous(), None),              # anti-causal
    (_mask(4, 4, -math.inf).index_fill(1, torch.tensor([0]), -math.inf), None),  # a padded first key
    (_mask(4, 4, -math.inf).expand(2, 1, 4, 4), -math.inf),     # the same mask for every batch row
    (torch.stack([_mask(4, 4, -math.inf), torch.zeros(4, 4)]), None),  # batch rows that differ
])
def test_only_an_exactly_causal_mask_is_left_to_the_fused_op(mask: torch.Tensor, expected: float | None) -> None:
    assert causal_fill(mask, 4, 4) == expected


def test_causal_mask_of_another_query_length_is_refused() -> None:
    assert causal_fill(_mask(4, 4, -math.inf)[:2], 2, 4) is None


def test_the_forms_keep_the_graph_valid(gpt2: Any, llama: Any) -> None:
    for program, _, _ in (gpt2, llama):
        onnx.checker.check_model(program.model_proto, full_check=True)


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_the_default_export_leaves_out_the_decoder_forms(build: Callable[[Any], torch.nn.Module],
                                                         tmp_path_factory: Any) -> None:
    """The forms cost Shape arithmetic ORT folds again at load: only optimize="ort-fusion" writes them."""
    transformers = pytest.importorskip("transformers")
    model = build(transformers).eval()
    model.config.use_cache, model.config.return_dict = False, False
    args = (torch.randint(0, 100, (1, SEQ)),)
    default = onnxsight.export(model, args)
    forms = onnxsight.export(model, args, optimize="ort-fusion")
    assert len(default.model_proto.graph.node) < len(forms.model_proto.graph.node)
    assert "Shape" not in {n.op_type for n in default.model_proto.graph.node}
    path = str(tmp_path_factory.mktemp("default") / "m.onnx")
    default.save(path)
    stats = _stats(_fused(path, opt_level=0))
    assert not stats.get("Attention") and not stats.get("MultiHeadAttention")
    torch.testing.assert_close(default(*args)[0], model(*args)[0], rtol=1e-4, atol=1e-4)
