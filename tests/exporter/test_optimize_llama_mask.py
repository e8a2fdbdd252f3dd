"""A LLaMA-like decoder called with an ``attention_mask`` (batch, keys), exported with ``dynamic_shapes`` or at
static sizes, and ``optimize="ort-fusion"``: its causal and padding mask is checked (run at sample sizes on 0/1 masks) and written
in ORT's rotary form for a 2-D padding mask with the dtype's lowest as fill, so ONNX Runtime's optimizer fuses one
``MultiHeadAttention`` per layer for a prompt step (right or left padding) and a step over a KV cache; rows with
a key to attend to match PyTorch, a fully masked row (left padding) averages the values: said at export (ONX008)
and by verify, never NaN."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import onnxsight
from tests.exporter.test_optimize_llama_dynamic import HEADS, HIDDEN, LAYERS, _fused, _stats
from tests.exporter.test_optimize_llama_dynamic import _model as _llama


def _model(name: str = "LlamaModel", *, cache: bool = False, **overrides: Any) -> torch.nn.Module:
    """The dynamic tests' LLaMA, with room for 64 positions (a cache step's past and new keys)."""
    return _llama(name, cache=cache, **{"max_position_embeddings": 64, **overrides})


def _session(fused: Any) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(fused.model.SerializeToString(), providers=["CPUExecutionProvider"])


def _padded(batch: int, keys: int, pads: list[int], left: bool) -> torch.Tensor:
    mask = torch.ones(batch, keys, dtype=torch.int64)
    for row, pad in enumerate(pads):
        if pad:
            mask[row, :pad] = 0 if left else 1
            if not left:
                mask[row, keys - pad:] = 0
    return mask


def _export_prompt(model: torch.nn.Module, tmp_path_factory: Any, mask: torch.Tensor) \
        -> tuple[onnxsight.ONNXProgram, tuple, str]:
    args = (torch.randint(0, 100, tuple(mask.shape)), mask)
    dims = {0: "batch", 1: "seq"}
    program = onnxsight.export(model, args, optimize="ort-fusion",
                               dynamic_shapes={"input_ids": dims, "attention_mask": dims})
    path = str(tmp_path_factory.mktemp("llama-mask") / "model.onnx")
    program.save(path)
    return program, args, path


@pytest.fixture(scope="module")
def prompt(tmp_path_factory: Any) -> tuple[torch.nn.Module, onnxsight.ONNXProgram, tuple, str, Any]:
    model = _model()
    program, args, path = _export_prompt(model, tmp_path_factory, _padded(2, 8, [0, 3], left=False))
    return model, program, args, path, _fused(path)


def test_a_prompt_with_right_padding_fuses_one_attention_per_layer(prompt: Any) -> None:
    _, program, args, _, fused = prompt
    stats = _stats(fused)
    assert stats["MultiHeadAttention"] == LAYERS
    assert stats["RotaryEmbedding"] == 2 * LAYERS
    assert stats["SkipSimplifiedLayerNormalization"] == 2 * LAYERS
    assert onnxsight.verify(program, args).passed
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed


def test_the_export_says_a_fully_masked_row_averages(prompt: Any) -> None:
    _, program, _, _, _ = prompt
    notes = [d for d in program.diagnostics if d.code == "ONX008"]
    assert len(notes) == 1 and "attention_mask" in str(notes[0]) and f"{LAYERS} attention(s)" in str(notes[0])


@pytest.mark.parametrize("batch, length, pads", [(3, 6, [0, 2, 5]), (1, 12, [4]), (2, 1, [0, 0])])
def test_left_padding_matches_pytorch_at_valid_positions(prompt: Any, batch: int, length: int,
                                                         pads: list[int]) -> None:
    model, _, _, _, fused = prompt
    ids, mask = torch.randint(0, 100, (batch, length)), _padded(batch, length, pads, left=True)
    got = _session(fused).run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        expected = model(ids, attention_mask=mask)[0].numpy()
    valid = mask.bool().numpy()
    assert np.isfinite(got).all()   # a padded query row attends to no key: an average, not NaN
    np.testing.assert_allclose(got[valid], expected[valid], rtol=1e-4, atol=1e-4)


def test_a_fully_masked_row_is_flagged_by_verify(prompt: Any) -> None:
    _, program, _, _, fused = prompt
    args = (torch.randint(0, 100, (2, 5)), _padded(2, 5, [0, 2], left=True))
    for onnx_model in (None, fused.model):
        result = onnxsight.verify(program, args, onnx_model=onnx_model)
        assert not result.passed
        assert any(d.code == "ACC002" for d in result.diagnostics)


def test_a_prompt_exported_with_left_padding_fuses_too(tmp_path_factory: Any) -> None:
    model = _model()
    mask = _padded(2, 8, [0, 3], left=True)
    program, args, path = _export_prompt(model, tmp_path_factory, mask)
    fused = _fused(path)
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    right = (args[0], _padded(2, 8, [0, 3], left=False))
    assert onnxsight.verify(program, right, onnx_model=fused.model).passed


# -- a decode step over a KV cache (transformers' DynamicCache) with the mask of past and new keys --------------

def _cache(batch: int, past: int) -> Any:
    from transformers import DynamicCache

    shape = (batch, HEADS, past, HIDDEN // HEADS)
    return DynamicCache([(torch.randn(shape), torch.randn(shape)) for _ in range(LAYERS)])


def _cache_feeds(cache: Any) -> dict[str, np.ndarray]:
    feeds = {}
    for i, layer in enumerate(cache.layers):
        feeds[f"past_key_values.{i}.key"] = layer.keys.numpy().copy()
        feeds[f"past_key_values.{i}.value"] = layer.values.numpy().copy()
    return feeds


@pytest.fixture(scope="module")
def step(tmp_path_factory: Any) -> tuple[torch.nn.Module, onnxsight.ONNXProgram, dict, Any]:
    from torch.export import Dim

    model = _model(cache=True)
    batch, seq, past = Dim("batch"), Dim("seq"), Dim("past", min=1, max=64)
    inputs = {"input_ids": torch.randint(0, 100, (2, 3)), "cache": _cache(2, 5),
              "attention_mask": _padded(2, 8, [0, 2], left=True)}
    dynamic = {"input_ids": {0: batch, 1: seq}, "cache": [{0: batch, 2: past}] * (2 * LAYERS),
               "attention_mask": {0: batch, 1: Dim.DYNAMIC}}
    program = onnxsight.export(model, (), kwargs=inputs, optimize="ort-fusion", dynamic_shapes=dynamic)
    path = str(tmp_path_factory.mktemp("llama-mask-cache") / "model.onnx")
    program.save(path)
    return model, program, inputs, _fused(path)


def test_a_step_over_a_cache_with_padding_fuses_with_past_key_and_value(step: Any) -> None:
    _, program, inputs, fused = step
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    attention = [n for n in fused.model.graph.node if n.op_type == "MultiHeadAttention"]
    assert [list(n.input[6:8]) for n in attention] == \
        [[f"past_key_values.{i}.key", f"past_key_values.{i}.value"] for i in range(LAYERS)]
    assert any(d.code == "ONX008" for d in program.diagnostics)
    assert onnxsight.verify(program, (), kwargs=inputs, onnx_model=fused.model).passed


@pytest.mark.parametrize("batch, length, past", [(3, 1, 6), (1, 4, 2), (2, 2, 9)])
def test_the_fused_padded_step_matches_pytorch(step: Any, batch: int, length: int, past: int) -> None:
    model, _, _, fused = step
    ids, cache = torch.randint(0, 100, (batch, length)), _cache(batch, past)
    mask = _padded(batch, past + length, [min(row, past) for row in range(batch)], left=True)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), **_cache_feeds(cache)}
    got = _session(fused).run(None, feeds)[0]
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, cache=cache)[0].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


# -- masks that are not causal & padding are left as translated ------------------------------------------------

@pytest.mark.parametrize("window", [3, 6, 20, None])
def test_a_sliding_window_with_padding_is_left_as_translated(window: int | None, tmp_path_factory: Any) -> None:
    model = _model("MistralModel", sliding_window=window)
    program, args, path = _export_prompt(model, tmp_path_factory, _padded(2, 8, [0, 3], left=False))
    fused = window is None   # Mistral without a window is LLaMA's causal mask: it fuses
    assert _stats(_fused(path)).get("MultiHeadAttention", 0) == (LAYERS if fused else 0)
    assert any(d.code == "ONX008" for d in program.diagnostics) == fused
    assert onnxsight.verify(program, args).passed


def _mask_graph(batch: int | str, seq: int | str, *, causal: bool) -> Any:
    """``Where(mask[:, None, None, :] broadcast to (B, 1, S, S), 0, -inf)``, the padding of input attention_mask
    alone, or (``causal``, static sizes) combined with a constant causal mask; broadcast to a shape read from
    ``Shape(input_ids)``, or, with static sizes, to a constant one as the translation writes it."""
    from onnx import TensorProto as tp
    from onnx import helper, numpy_helper

    from onnxsight.exporter.optimize._graph import Graph

    nodes = [helper.make_node("Cast", ["attention_mask"], ["bool"], to=tp.BOOL),
             helper.make_node("Unsqueeze", ["bool", "axes"], ["wide"]),
             helper.make_node("Shape", ["input_ids"], ["sizes"]),
             helper.make_node("Gather", ["sizes", "zero"], ["b"], axis=0),
             helper.make_node("Gather", ["sizes", "one"], ["s"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axis0"], ["b1"]),
             helper.make_node("Unsqueeze", ["s", "axis0"], ["s1"]),
             helper.make_node("Concat", ["b1", "ones", "s1", "s1"], ["target"], axis=0),
             helper.make_node("Expand", ["wide", "target"], ["full"])]
    static = isinstance(seq, int)
    if static:
        nodes = nodes[:2] + nodes[-1:]
    if causal:
        nodes.append(helper.make_node("And", ["full", "tril"], ["kept"]))
    nodes.append(helper.make_node("Where", ["kept" if causal else "full", "f0", "finf"], ["mask"]))
    init = [helper.make_tensor("axes", tp.INT64, [2], [1, 2]), helper.make_tensor("zero", tp.INT64, [], [0]),
            helper.make_tensor("one", tp.INT64, [], [1]), helper.make_tensor("axis0", tp.INT64, [1], [0]),
            helper.make_tensor("ones", tp.INT64, [1], [1]), helper.make_tensor("f0", tp.FLOAT, [], [0.0]),
            helper.make_tensor("finf", tp.FLOAT, [], [float("-inf")])]
    if static:
        init.append(helper.make_tensor("target", tp.INT64, [4], [batch, 1, seq, seq]))
    if causal:
        init.append(numpy_helper.from_array(np.tril(np.ones((seq, seq), bool)), "tril"))
    proto = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, tp.INT64, [batch, seq])
                                           for n in ("input_ids", "attention_mask")],
                              [helper.make_tensor_value_info("mask", tp.FLOAT, [batch, 1, seq, seq])])
    constants = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in init}
    return Graph.build(proto, constants, {"": 18}, set())


@pytest.mark.parametrize("batch, seq", [("batch", "seq"), (2, 300)], ids=["dynamic", "static"])
def test_the_check_refuses_a_mask_that_is_not_causal_and_padding(batch: int | str, seq: int | str) -> None:
    from onnxsight.exporter.optimize._rotary_padding import padded_causal_fill

    graph = _mask_graph(batch, seq, causal=False)
    assert padded_causal_fill(graph, "mask", (batch, HEADS, seq, seq)) is None


def test_the_check_takes_a_static_causal_and_padding_mask_of_a_long_sequence() -> None:
    # the sizes fixed at export are constants of the mask's subgraph (its shapes): not refused as too large
    from onnxsight.exporter.optimize._rotary_padding import padded_causal_fill

    graph = _mask_graph(2, 300, causal=True)
    assert padded_causal_fill(graph, "mask", (2, HEADS, 300, 300)) == (float("-inf"), "attention_mask")


# -- static sizes: the length fixed at export, no dynamic_shapes ------------------------------------------------

def _export_static(model: torch.nn.Module, tmp_path_factory: Any, kwargs: dict) \
        -> tuple[onnxsight.ONNXProgram, dict, Any]:
    program = onnxsight.export(model, (), kwargs=kwargs, optimize="ort-fusion")
    path = str(tmp_path_factory.mktemp("llama-mask-static") / "model.onnx")
    program.save(path)
    return program, kwargs, _fused(path)


@pytest.fixture(scope="module")
def static_prompt(tmp_path_factory: Any) -> tuple[torch.nn.Module, onnxsight.ONNXProgram, dict, Any]:
    model = _model()
    inputs = {"input_ids": torch.randint(0, 100, (3, 8)), "attention_mask": _padded(3, 8, [0, 3, 1], left=False)}
    return model, *_export_static(model, tmp_path_factory, inputs)


def test_a_static_prompt_with_padding_fuses_one_attention_per_layer(static_prompt: Any) -> None:
    _, program, inputs, fused = static_prompt
    dims = [[d.dim_value for d in i.type.tensor_type.shape.dim] for i in program.model_proto.graph.input]
    assert dims == [[3, 8], [3, 8]]   # static sizes
    stats = _stats(fused)
    assert stats["MultiHeadAttention"] == LAYERS
    assert stats["RotaryEmbedding"] == 2 * LAYERS
    assert stats["SkipSimplifiedLayerNormalization"] == 2 * LAYERS
    notes = [d for d in program.diagnostics if d.code == "ONX008"]
    assert len(notes) == 1 and "attention_mask" in str(notes[0]) and f"{LAYERS} attention(s)" in str(notes[0])
    assert onnxsight.verify(program, (), kwargs=inputs).passed
    assert onnxsight.verify(program, (), kwargs=inputs, onnx_model=fused.model).passed


def test_a_static_left_padded_batch_matches_pytorch_at_valid_positions(static_prompt: Any) -> None:
    model, _, _, fused = static_prompt
    session = _session(fused)
    for pads in ([0, 2, 5], [7, 0, 4], [1, 1, 1]):
        ids, mask = torch.randint(0, 100, (3, 8)), _padded(3, 8, pads, left=True)
        got = session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
        with torch.no_grad():
            expected = model(ids, attention_mask=mask)[0].numpy()
        valid = mask.bool().numpy()
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got[valid], expected[valid], rtol=1e-4, atol=1e-4)


def test_a_static_fully_masked_row_is_flagged_by_verify(static_prompt: Any) -> None:
    _, program, _, fused = static_prompt
    inputs = {"input_ids": torch.randint(0, 100, (3, 8)), "attention_mask": _padded(3, 8, [0, 2, 0], left=True)}
    for onnx_model in (None, fused.model):
        result = onnxsight.verify(program, (), kwargs=inputs, onnx_model=onnx_model)
        assert not result.passed
        assert any(d.code == "ACC002" for d in result.diagnostics)


@pytest.mark.parametrize("window, fuses", [(3, False), (20, True)])
def test_a_static_sliding_window_fuses_only_where_it_is_causal_at_the_exported_length(
        window: int, fuses: bool, tmp_path_factory: Any) -> None:
    # a window of 20 over 8 positions masks what the causal mask masks: at the one length the graph runs, it is
    # the causal mask; a window of 3 is not
    model = _model("MistralModel", sliding_window=window)
    inputs = {"input_ids": torch.randint(0, 100, (2, 8)), "attention_mask": _padded(2, 8, [0, 3], left=False)}
    program, _, fused = _export_static(model, tmp_path_factory, inputs)
    assert _stats(fused).get("MultiHeadAttention", 0) == (LAYERS if fuses else 0)
    assert any(d.code == "ONX008" for d in program.diagnostics) == fuses
    assert onnxsight.verify(program, (), kwargs=inputs).passed


@pytest.mark.parametrize("new, masked", [(3, True), (1, True), (3, False)], ids=["prompt-mask", "one-token-mask",
                                                                                 "no-mask"])
def test_a_static_step_over_a_cache_fuses_and_matches_pytorch(new: int, masked: bool, tmp_path_factory: Any) -> None:
    # a one-token step's mask is its padding alone: BERT's additive form takes it first, which the rotary form
    # reads as it is (one ONX008 count per layer, not two)
    model, past = _model(cache=True), 5
    inputs = {"input_ids": torch.randint(0, 100, (2, new)), "cache": _cache(2, past)}
    if masked:
        inputs["attention_mask"] = _padded(2, past + new, [0, 2], left=True)
    program, _, fused = _export_static(model, tmp_path_factory, inputs)
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    assert _stats(fused)["RotaryEmbedding"] == 2 * LAYERS
    attention = [n for n in fused.model.graph.node if n.op_type == "MultiHeadAttention"]
    assert [list(n.input[6:8]) for n in attention] == \
        [[f"past_key_values.{i}.key", f"past_key_values.{i}.value"] for i in range(LAYERS)]
    notes = [str(d) for d in program.diagnostics if d.code == "ONX008"]
    assert len(notes) == masked and all(f"{LAYERS} attention(s)" in note for note in notes)
    assert onnxsight.verify(program, (), kwargs=inputs, onnx_model=fused.model).passed
    session = _session(fused)
    for pads in ([0, 2], [5, 1], [3, 0]):   # padded past keys: every new query attends itself
        ids, cache = torch.randint(0, 100, (2, new)), _cache(2, past)
        feeds = {"input_ids": ids.numpy(), **_cache_feeds(cache)}
        kwargs = {}
        if masked:
            kwargs["attention_mask"] = _padded(2, past + new, pads, left=True)
            feeds["attention_mask"] = kwargs["attention_mask"].numpy()
        got = session.run(None, feeds)[0]
        with torch.no_grad():
            expected = model(input_ids=ids, cache=cache, **kwargs)[0].numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_dynamic_batch_alone_fuses_and_matches_pytorch_at_another_batch(tmp_path_factory: Any) -> None:
    # the length fixed at export: the constant cos/sin cache form, the padded mask form, the check run at 5 batches
    model = _model()
    args = (torch.randint(0, 100, (2, 8)), _padded(2, 8, [0, 3], left=False))
    program = onnxsight.export(model, args, optimize="ort-fusion",
                               dynamic_shapes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}})
    path = str(tmp_path_factory.mktemp("llama-mask-batch") / "model.onnx")
    program.save(path)
    fused = _fused(path)
    assert _stats(fused)["MultiHeadAttention"] == LAYERS
    assert onnxsight.verify(program, args, onnx_model=fused.model).passed
    ids, mask = torch.randint(0, 100, (3, 8)), _padded(3, 8, [0, 2, 5], left=True)
    got = _session(fused).run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})[0]
    with torch.no_grad():
        expected = model(ids, attention_mask=mask)[0].numpy()
    valid = mask.bool().numpy()
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[valid], expected[valid], rtol=1e-4, atol=1e-4)
