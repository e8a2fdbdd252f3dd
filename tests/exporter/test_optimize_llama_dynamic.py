"""LLaMA-like decoders exported with ``dynamic_shapes`` and ``optimize="ort-fusion"``: ONNX Runtime's transformer
optimizer fuses one ``MultiHeadAttention``, two ``RotaryEmbedding`` and two ``SkipSimplifiedLayerNormalization``
per layer, the fused model matches PyTorch at the example and at other sizes; masks that are not causal
(a sliding window) and grouped-query attention are left as translated; a padding mask from an input fuses
(test_optimize_llama_mask.py)."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest
import torch

import onnxsight

LAYERS, HIDDEN, HEADS = 2, 64, 4
DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}}
OTHER_SIZES = [(1, 5), (3, 12), (2, 1)]


def _model(name: str = "LlamaModel", *, cache: bool = False, **overrides: Any) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    settings = dict(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                    num_key_value_heads=HEADS, intermediate_size=2 * HIDDEN, max_position_embeddings=32)
    config = getattr(transformers, name.replace("Model", "Config"))(**{**settings, **overrides})
    model = getattr(transformers, name)(config).eval()
    model.config.use_cache, model.config.return_dict = cache, False
    return model


def _export(model: torch.nn.Module, tmp_path_factory: Any, args: tuple | None = None,
            dynamic: dict | None = None) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    args = args or (torch.randint(0, 100, (2, 8)),)
    program = onnxsight.export(model, args, optimize="ort-fusion", dynamic_shapes=dynamic or DYNAMIC)
    path = str(tmp_path_factory.mktemp("llama-dynamic") / "model.onnx")
    program.save(path)
    return program, args, path


def _fused(path: str, model_type: str = "gpt2") -> Any:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        return optimize_model(path, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN, opt_level=0)


def _stats(fused: Any) -> dict[str, int]:
    return {op: n for op, n in fused.get_fused_operator_statistics().items() if n}


@pytest.fixture(scope="module")
def llama(tmp_path_factory: Any) -> tuple[torch.nn.Module, onnxsight.ONNXProgram, tuple, str]:
    model = _model()
    return (model, *_export(model, tmp_path_factory))


@pytest.mark.parametrize("model_type", ["gpt2", "qwen3"])
def test_dynamic_llama_fuses_attention_rotary_and_residual_norms(llama: Any, model_type: str) -> None:
    _, program, args, path = llama
    fused = _fused(path, model_type)
    stats = _stats(fused)
    assert stats["MultiHeadAttention"] == LAYERS
    assert stats["RotaryEmbedding"] == 2 * LAYERS
    assert stats["SkipSimplifiedLayerNormalization"] == 2 * LAYERS
    result = onnxsight.verify(program, args, onnx_model=fused.model)
    assert result.passed
    assert result.coverage_summary["held by a fused op in another layout"] == LAYERS


def test_the_fused_model_declares_no_shape_its_rotary_outputs_do_not_have(llama: Any) -> None:
    # ORT's rotary fusion gives q_embed's name to RotaryEmbedding's (batch, length, hidden) output; a declared
    # (batch, heads, length, head size) shape left on it made every session of the fused model warn
    # "Error merging shape info for output" on the console
    fused = _fused(llama[3]).model
    declared = {v.name: v for v in fused.graph.value_info}
    rotary = [n.output[0] for n in fused.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == 2 * LAYERS
    assert all(len(declared[name].type.tensor_type.shape.dim) in (0, 3) for name in rotary if name in declared)


def test_fused_dynamic_llama_matches_pytorch_at_other_sizes(llama: Any) -> None:
    import onnxruntime as ort

    model, _, _, path = llama
    session = ort.InferenceSession(_fused(path).model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch, length in OTHER_SIZES:
        ids = torch.randint(0, 100, (batch, length))
        got = session.run(None, {"input_ids": ids.numpy()})[0]
        with torch.no_grad():
            want = model(ids)[0].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_export_with_the_forms_verifies_at_other_sizes(llama: Any) -> None:
    _, program, _, _ = llama
    ops = {n.op_type for n in program.model_proto.graph.node}
    assert {"Shape", "Cos", "Sin", "Range"} <= ops  # sizes, cos/sin and the causal mask computed at run time
    assert "TopK" not in ops                        # the causal mask masks no whole row: no guard
    for batch, length in OTHER_SIZES:
        assert onnxsight.verify(program, (torch.randint(0, 100, (batch, length)),)).passed


@pytest.mark.parametrize("dims", [{0: "batch"}, {1: "seq"}], ids=["batch", "sequence"])
def test_one_dynamic_axis_fuses_too(dims: dict, tmp_path_factory: Any) -> None:
    # a dynamic batch alone keeps cos/sin and the mask constants (the cos/sin cache form, batch from Shape);
    # a dynamic sequence alone computes them at run time
    program, args, path = _export(_model(), tmp_path_factory, dynamic={"input_ids": dims})
    fused = _fused(path)
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed
    batch, length = (3, 8) if 0 in dims else (2, 5)
    assert onnxsight.verify(program, (torch.randint(0, 100, (batch, length)),)).passed


def test_the_default_export_is_left_without_the_forms(llama: Any, tmp_path_factory: Any) -> None:
    model, _, args, _ = llama
    default = onnxsight.export(model, args, dynamic_shapes=DYNAMIC)
    path = str(tmp_path_factory.mktemp("default") / "model.onnx")
    default.save(path)
    assert "MultiHeadAttention" not in _stats(_fused(path))


def test_a_sliding_window_mask_is_not_causal_and_is_left_as_translated(tmp_path_factory: Any) -> None:
    # Mistral's sliding window masks keys more than 3 positions back: causal at lengths up to 3 only
    program, args, path = _export(_model("MistralModel", sliding_window=3), tmp_path_factory)
    assert "MultiHeadAttention" not in _stats(_fused(path))
    # not rewritten as a causal mask (it masks no whole row, so torch's guard may go: _sized_mask)
    assert not any(o.startswith("_causal_mask") for n in program.model_proto.graph.node for o in n.output)
    assert onnxsight.verify(program, args).passed


@pytest.mark.parametrize("window", [20, 100])
def test_a_sliding_window_wider_than_the_sampled_sizes_is_not_fused(window: int, tmp_path_factory: Any) -> None:
    # the window only shows at sequences longer than it: the mask's subgraph is also run at sizes around
    # each integer constant it holds (_sized_mask), so a window of 20 or 100 is found and nothing is fused;
    # fusing it would attend keys beyond the window at long sequences, silently
    model = _model("MistralModel", sliding_window=window, max_position_embeddings=256)
    program, args, path = _export(model, tmp_path_factory)
    assert "MultiHeadAttention" not in _stats(_fused(path))
    long_ids = torch.randint(0, 100, (1, window + 7))
    assert onnxsight.verify(program, (long_ids,)).passed


def test_a_mistral_without_window_fuses_as_llama(tmp_path_factory: Any) -> None:
    program, args, path = _export(_model("MistralModel", sliding_window=None), tmp_path_factory)
    fused = _fused(path)
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed


def test_a_padding_mask_input_fuses_with_a_finite_fill(tmp_path_factory: Any) -> None:
    # the mask depends on the input's values: checked causal & padding on sample masks, written with the dtype's
    # lowest (a fully masked row averages, ONX008); more in test_optimize_llama_mask.py
    ids = torch.randint(0, 100, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0   # right padding: every query row attends a key (left padding: test_optimize_llama_mask.py)
    program, args, path = _export(_model(), tmp_path_factory, (ids, mask),
                                  {"input_ids": DYNAMIC["input_ids"], "attention_mask": DYNAMIC["input_ids"]})
    assert _stats(_fused(path))["MultiHeadAttention"] == LAYERS
    assert any(d.code == "ONX008" for d in program.diagnostics)
    assert onnxsight.verify(program, args).passed


def test_grouped_query_attention_is_left_as_translated(tmp_path_factory: Any) -> None:
    # ORT's Python optimizer fuses repeat_kv only after a past/present Concat (see docs/optimization.md)
    program, args, path = _export(_model(num_key_value_heads=2), tmp_path_factory)
    fused = _fused(path)
    assert "MultiHeadAttention" not in _stats(fused)
    assert _stats(fused)["SkipSimplifiedLayerNormalization"] == 2 * LAYERS
    assert "RotaryEmbedding" not in _stats(fused)   # no LLaMA form written (its causal mask is compacted as any)
    assert onnxsight.verify(program, args).passed
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed


# -- a KV cache (transformers' DynamicCache, forward()'s `cache` from 5.24) ------------------------------------

def _cache(batch: int, past: int, kv_heads: int = HEADS) -> Any:
    from transformers import DynamicCache

    shape = (batch, kv_heads, past, HIDDEN // HEADS)
    return DynamicCache([(torch.randn(shape), torch.randn(shape)) for _ in range(LAYERS)])


def _export_step(model: torch.nn.Module, tmp_path_factory: Any, *, mask: bool = False,
                 kv_heads: int = HEADS) -> tuple[onnxsight.ONNXProgram, dict, str]:
    from torch.export import Dim

    model.config.use_cache = True
    batch, seq, past = Dim("batch"), Dim("seq"), Dim("past", min=1, max=64)
    inputs: dict[str, Any] = {"input_ids": torch.randint(0, 100, (2, 3)), "cache": _cache(2, 5, kv_heads)}
    dynamic: dict[str, Any] = {"input_ids": {0: batch, 1: seq}, "cache": [{0: batch, 2: past}] * (2 * LAYERS)}
    if mask:
        inputs["attention_mask"] = torch.ones(2, 8, dtype=torch.int64)
        dynamic["attention_mask"] = {0: batch, 1: Dim.DYNAMIC}
    program = onnxsight.export(model, (), kwargs=inputs, optimize="ort-fusion", dynamic_shapes=dynamic)
    path = str(tmp_path_factory.mktemp("llama-cache") / "model.onnx")
    program.save(path)
    return program, inputs, path


@pytest.fixture(scope="module")
def step(tmp_path_factory: Any) -> tuple[torch.nn.Module, onnxsight.ONNXProgram, dict, str]:
    model = _model()
    return (model, *_export_step(model, tmp_path_factory))


def test_a_step_over_a_kv_cache_fuses_with_past_key_and_value(step: Any) -> None:
    _, program, inputs, path = step
    fused = _fused(path)
    stats = _stats(fused)
    assert stats["MultiHeadAttention"] == LAYERS
    assert stats["RotaryEmbedding"] == 2 * LAYERS
    assert stats["SkipSimplifiedLayerNormalization"] == 2 * LAYERS
    attention = [n for n in fused.model.graph.node if n.op_type == "MultiHeadAttention"]
    assert [list(n.input[6:8]) for n in attention] == \
        [[f"past_key_values.{i}.key", f"past_key_values.{i}.value"] for i in range(LAYERS)]
    assert [list(n.output[1:]) for n in attention] == [[f"present.{i}.key", f"present.{i}.value"] for i in range(LAYERS)]
    assert onnxsight.verify(program, (), kwargs=inputs, onnx_model=fused.model).passed


@pytest.mark.parametrize("batch, length, past", [(1, 1, 7), (3, 4, 2), (2, 6, 1)])
def test_the_fused_step_matches_pytorch_at_other_sizes(step: Any, batch: int, length: int, past: int) -> None:
    import onnxruntime as ort

    model, _, _, path = step
    session = ort.InferenceSession(_fused(path).model.SerializeToString(), providers=["CPUExecutionProvider"])
    ids, cache = torch.randint(0, 100, (batch, length)), _cache(batch, past)
    feeds = {"input_ids": ids.numpy()}
    for i, layer in enumerate(cache.layers):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = \
            layer.keys.numpy().copy(), layer.values.numpy().copy()
    got = session.run(None, feeds)
    with torch.no_grad():
        hidden, present = model(input_ids=ids, cache=cache)[:2]
    np.testing.assert_allclose(got[0], hidden.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], present.layers[0].keys.numpy(), rtol=1e-5, atol=1e-5)
    assert got[1].shape == (batch, HEADS, past + length, HIDDEN // HEADS)


def test_a_step_with_an_attention_mask_fuses_with_a_finite_fill(tmp_path_factory: Any) -> None:
    # a padding mask can mask a whole query row (left padding): the form's finite fill averages it, where ORT's
    # MultiHeadAttention gives NaN for a row of -inf (test_optimize_llama_mask.py)
    program, inputs, path = _export_step(_model(), tmp_path_factory, mask=True)
    assert _stats(_fused(path))["MultiHeadAttention"] == LAYERS
    assert onnxsight.verify(program, (), kwargs=inputs).passed


def test_a_grouped_query_step_is_left_as_translated(tmp_path_factory: Any) -> None:
    program, inputs, path = _export_step(_model(num_key_value_heads=2), tmp_path_factory, kv_heads=2)
    fused = _fused(path)
    assert "MultiHeadAttention" not in _stats(fused)
    assert onnxsight.verify(program, (), kwargs=inputs, onnx_model=fused.model).passed


def test_the_forms_do_not_depend_on_how_the_reshapes_were_shaped(tmp_path_factory: Any) -> None:
    # the Q/K/V and output Reshapes are matched by what they compute: the default passes shape them by
    # constants ([0, 0, heads, head size], _shapes.constant_reshapes) before the forms are written
    program, args, path = _export(_model(), tmp_path_factory)
    detail = next(stage.detail for stage in program.record.stages if stage.name == "optimize")
    assert "constant reshape shapes" in detail
    fused = _fused(path)
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed


def _offset_mask(rows: int, cols: int, fill: float = float("-inf"), window: int | None = None) -> np.ndarray:
    """query i of ``rows`` attends keys up to i + cols - rows (and no further back than ``window``)."""
    keys, queries = np.arange(cols)[None, :], np.arange(rows)[:, None] + (cols - rows)
    keep = (keys <= queries) & (keys > queries - window if window else True)
    return np.where(keep, 0.0, fill).astype(np.float32)[None, None]


@pytest.mark.parametrize("mask, expected", [
    (_offset_mask(4, 4), float("-inf")),
    (_offset_mask(3, 7), float("-inf")),                                   # 4 past positions
    (_offset_mask(3, 7, float(np.finfo(np.float32).min)), float(np.finfo(np.float32).min)),
    (_offset_mask(1, 6), True),                                            # one new token sees every key
    (_offset_mask(3, 7, -1e4), False),                                     # not low enough to mask out
    (_offset_mask(4, 4).transpose(0, 1, 3, 2).copy(), False),              # anti-causal
    (_offset_mask(5, 5, window=2), False),                                 # a sliding window
    (np.zeros((1, 1, 4, 4), np.float32), False),                           # masks nothing
    (_offset_mask(3, 2), False),                                           # fewer keys than queries
    (np.concatenate([_offset_mask(4, 4), np.zeros((1, 1, 4, 4), np.float32)]), False),  # rows that differ
])
def test_only_a_causal_mask_after_the_past_is_causal(mask: np.ndarray, expected: float | bool) -> None:
    from onnxsight.exporter.optimize._sized_mask import offset_causal_fill

    assert offset_causal_fill(mask) == expected
