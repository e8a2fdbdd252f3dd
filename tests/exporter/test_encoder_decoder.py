"""Encoder-decoders' decode step (BART, T5, Marian, Whisper, mBART, Pegasus) with an EncoderDecoderCache, as peer tools
build it: models from local configs (random weights, the default attention), the cache's dynamic shapes per tensor
or grouped per cache part, dynamic batch, new-token length, past length (down to 0) and encoder length.

Issue 32: the grouped layout failed with ``ValueError: Node arity mismatch; expected 8, but got 2`` (CAP006), and
T5 with the mask's length and the cross-attention cache's named apart with ``RuntimeError: Attempting to broadcast
a dimension of length s26`` (CAP006); the outputs were named ``add_21``/``linear_16``.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import pytest
import torch
from torch.export import Dim

import onnxsight
from onnxsight.exporter import cache_pairs

transformers = pytest.importorskip("transformers")

LAYERS, HEADS, WIDTH = 2, 4, 32
SMALL = dict(vocab_size=128, d_model=WIDTH, encoder_layers=LAYERS, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
             decoder_attention_heads=HEADS, encoder_ffn_dim=64, decoder_ffn_dim=64)


def _bart() -> Any:
    return transformers.BartForConditionalGeneration(transformers.BartConfig(
        **SMALL, max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2))


def _t5() -> Any:
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=128, d_model=WIDTH, d_kv=WIDTH // HEADS, d_ff=64, num_layers=LAYERS, num_decoder_layers=LAYERS,
        num_heads=HEADS, decoder_start_token_id=0, pad_token_id=0))


def _marian() -> Any:
    return transformers.MarianMTModel(transformers.MarianConfig(**SMALL, max_position_embeddings=64, pad_token_id=1,
                                                                decoder_start_token_id=1))


def _whisper() -> Any:
    return transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        **SMALL, num_mel_bins=8, max_source_positions=16, max_target_positions=64, pad_token_id=1,
        decoder_start_token_id=2, bos_token_id=0, eos_token_id=2))


def _mbart() -> Any:
    return transformers.MBartForConditionalGeneration(transformers.MBartConfig(**SMALL, max_position_embeddings=64,
                                                                               pad_token_id=1))


def _pegasus() -> Any:
    return transformers.PegasusForConditionalGeneration(transformers.PegasusConfig(
        **SMALL, max_position_embeddings=64, pad_token_id=0, decoder_start_token_id=0))


MODELS: dict[str, Callable[[], Any]] = {"bart": _bart, "t5": _t5, "marian": _marian, "whisper": _whisper,
                                        "mbart": _mbart, "pegasus": _pegasus}


def _model(name: str) -> Any:
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _step(batch: int, new: int, past: int, encoder: int, *, cross: int | None = None, seed: int = 0,
          encoder_ids: bool = False) -> dict[str, Any]:
    """One decode step's keyword arguments: new tokens over ``past`` cached ones, cross-attention over the encoder's
    ``encoder`` positions (``cross``: the cross-attention cache's length where it is given apart)."""
    from transformers import DynamicCache, EncoderDecoderCache

    generator = torch.Generator().manual_seed(seed)

    def layers(length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        shape = (batch, HEADS, length, WIDTH // HEADS)
        return [(torch.randn(*shape, generator=generator), torch.randn(*shape, generator=generator))
                for _ in range(LAYERS)]

    # the encoder runs in the step too where ``encoder_ids`` (onnx-diagnostic's text2text-generation inputs, in its order)
    step = {"input_ids": torch.randint(3, 100, (batch, encoder), generator=generator)} if encoder_ids else {}
    step.update(decoder_input_ids=torch.randint(3, 100, (batch, new), generator=generator),
                attention_mask=torch.ones(batch, encoder, dtype=torch.long),
                cache=EncoderDecoderCache(DynamicCache(layers(past)), DynamicCache(layers(cross or encoder))))
    if not encoder_ids:
        step["encoder_outputs"] = (torch.randn(batch, encoder, WIDTH, generator=generator),)
    return step


BATCH, NEW, PAST, ENCODER = Dim("batch"), Dim("decoder_sequence_length"), Dim("past_decoder_sequence_length", min=0), \
    Dim("encoder_sequence_length")
OWN, CROSS = {0: BATCH, 2: PAST}, {0: BATCH, 2: ENCODER}
LAYOUTS: dict[str, Any] = {   # the cache's entry as peer tools write it
    "per tensor": [OWN] * (2 * LAYERS) + [CROSS] * (2 * LAYERS),
    "[keys, values] per part": [[[OWN] * LAYERS, [OWN] * LAYERS], [[CROSS] * LAYERS, [CROSS] * LAYERS]],
    "per tensor per part": [[OWN] * (2 * LAYERS), [CROSS] * (2 * LAYERS)],
    "(key, value) per layer per part": [[(OWN, OWN)] * LAYERS, [(CROSS, CROSS)] * LAYERS],
    "keys and values as dicts": {"self_attention_cache": {"key_cache": [OWN] * LAYERS, "value_cache": [OWN] * LAYERS},
                                 "cross_attention_cache": {"key_cache": [CROSS] * LAYERS,
                                                           "value_cache": [CROSS] * LAYERS}},
}


def _shapes(cache: Any) -> dict[str, Any]:
    return {"decoder_input_ids": {0: BATCH, 1: NEW}, "attention_mask": {0: BATCH, 1: ENCODER},
            "encoder_outputs": ({0: BATCH, 1: ENCODER},), "cache": cache}


def _eager(model: Any, step: dict[str, Any]) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(**copy.deepcopy(step))
    cache = out.past_key_values
    return [out.logits, *(t for part in (cache.self_attention_cache, cache.cross_attention_cache)
                          for layer in part.layers for t in (layer.keys, layer.values))]


def _check_at_other_sizes(model: Any, program: onnxsight.ONNXProgram) -> None:
    """The step at another batch, new-token, past (0 included) and encoder length, against eager PyTorch."""
    for sizes in [(3, 1, 0, 4), (1, 2, 9, 11)]:
        step = _step(*sizes, seed=sum(sizes))
        expected = _eager(model, step)
        actual = program(**step)
        assert len(actual) == len(expected) + 1      # + encoder_last_hidden_state
        for want, got in zip(expected, actual):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def _dims(program: onnxsight.ONNXProgram, name: str) -> list[Any]:
    value = {v.name: v for v in [*program.model_proto.graph.input, *program.model_proto.graph.output]}[name]
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


@pytest.fixture(scope="module")
def bart() -> tuple[Any, onnxsight.ONNXProgram]:
    model = _model("bart")
    return model, onnxsight.export(model, (), kwargs=_step(2, 3, 5, 7), dynamic_shapes=_shapes(LAYOUTS["per tensor"]))


def test_the_decode_step_is_named_as_runtimes_feed_it(bart: Any) -> None:
    _, program = bart
    cache = [f"{layer}.{part}.{kind}" for part in ("decoder", "encoder") for layer in range(LAYERS)
             for kind in ("key", "value")]
    assert program.input_names == ["decoder_input_ids", "attention_mask", *(f"past_key_values.{name}" for name in cache),
                                   "encoder_outputs_0"]
    assert program.output_names == ["logits", *(f"present.{name}" for name in cache), "encoder_last_hidden_state"]
    assert _dims(program, "past_key_values.1.decoder.value") == ["batch", HEADS, "past_decoder_sequence_length",
                                                                 WIDTH // HEADS]
    assert _dims(program, "past_key_values.0.encoder.key")[2] == "encoder_sequence_length"
    assert _dims(program, "logits") == ["batch", "decoder_sequence_length", 128]
    pairs = cache_pairs(program.input_names, program.output_names)
    assert pairs["past_key_values.1.decoder.value"] == "present.1.decoder.value"
    assert pairs["past_key_values.0.encoder.key"] == "present.0.encoder.key"


def test_the_decode_step_matches_eager_at_other_sizes_and_an_empty_past(bart: Any) -> None:
    _check_at_other_sizes(*bart)


def test_the_cache_grouped_per_part_exports_as_per_tensor() -> None:
    """onnx-diagnostic's layout: [[self keys], [self values]], [[cross keys], [cross values]] (was CAP006), with the
    ``encoder_outputs`` tuple's entry written as a list, as JSON-built specs are (torch.export refuses the
    difference: ARG003)."""
    model = _model("bart")
    shapes = _shapes(LAYOUTS["[keys, values] per part"])
    shapes["encoder_outputs"] = list(shapes["encoder_outputs"])
    program = onnxsight.export(model, (), kwargs=_step(2, 3, 5, 7), dynamic_shapes=shapes)
    assert _dims(program, "encoder_outputs_0")[:2] == ["batch", "encoder_sequence_length"]
    assert _dims(program, "past_key_values.1.decoder.key")[2] == "past_decoder_sequence_length"
    step = _step(3, 1, 0, 4, seed=1)
    for want, got in zip(_eager(model, step), program(**step)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_dynamic_axes_keyed_by_the_graph_input_names_as_optimum_writes_them() -> None:
    """torch.onnx's ``dynamic_axes`` keyed by the names the graph gives the cache's tensors and a tuple's tensor
    (``past_key_values.0.decoder.key``, ``encoder_outputs_0``), without ``input_names``: was ARG016 (ignored)."""
    axes: dict[str, Any] = {"decoder_input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
                            "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
                            "encoder_outputs_0": {0: "batch_size", 1: "encoder_sequence_length"}}
    for layer in range(LAYERS):
        for kind in ("key", "value"):
            axes[f"past_key_values.{layer}.decoder.{kind}"] = {0: "batch_size", 2: "past_decoder_sequence_length"}
            axes[f"past_key_values.{layer}.encoder.{kind}"] = {0: "batch_size", 2: "encoder_sequence_length_out"}
    model = _model("bart")
    program = onnxsight.export(model, (), kwargs=_step(2, 3, 5, 7), dynamic_axes=axes)
    assert not [d for d in program.diagnostics if d.code == "ARG016"]
    assert _dims(program, "past_key_values.0.decoder.key")[::2] == ["batch_size", "past_decoder_sequence_length"]
    assert _dims(program, "encoder_outputs_0")[0] == "batch_size"
    step = _step(3, 1, 0, 4, seed=4)
    for want, got in zip(_eager(model, step), program(**step)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cache, given", [
    ([[OWN] * 4, [CROSS] * 3], "[[dict, dict, dict, dict], [dict, dict, dict]]"),
    ([OWN] * 6, "[6 x dict]"),
    ({"cache": [OWN] * 8}, "dict"),
])
def test_a_cache_layout_that_matches_nothing_names_the_argument_and_the_layouts(cache: Any, given: str) -> None:
    with pytest.raises(onnxsight.InvalidArgumentError) as caught:
        onnxsight.export(_model("bart"), (), kwargs=_step(2, 3, 5, 7), dynamic_shapes=_shapes(cache))
    (found,) = [d for d in caught.value.diagnostics if d.code == "ARG027"]
    assert found.message.startswith(f"dynamic_shapes['cache'] gives the EncoderDecoderCache (2 self-attention layers "
                                    f"and 2 cross-attention layers, 8 tensors) {given}, which matches none")
    assert "a list of 8 (one per tensor: past_key_values.0.decoder.key, ..., past_key_values.1.encoder.value)" \
        in found.message
    assert "[self-attention, cross-attention], each part a list of 4 (one per tensor), [keys, values] of 2 each or " \
           "one (key, value) per layer (2)" in found.message


def _peer_shapes(cache_length2: Any) -> dict[str, Any]:
    """onnx-diagnostic's text2text-generation dynamic shapes: the encoder runs in the step, the mask's length is
    Dim.DYNAMIC, the cross-attention cache's length a Dim of its own."""
    batch, seq, own = Dim("batch", min=1, max=1024), Dim("seq_length", min=1, max=4096), Dim("cache_length")
    return {"input_ids": {0: batch, 1: seq}, "decoder_input_ids": {0: batch, 1: Dim.DYNAMIC},
            "attention_mask": {0: batch, 1: Dim.DYNAMIC},
            "cache": [[[{0: batch, 2: own}] * LAYERS] * 2, [[{0: batch, 2: cache_length2}] * LAYERS] * 2]}


def test_dims_named_apart_that_t5_ties_are_one_dim_with_a_warning() -> None:
    """The example has the mask's, the encoder's and the cross-attention cache's lengths equal: one dim,
    named after the first, with CAP007 naming each axis tied and T5's line."""
    model = _model("t5")
    program = onnxsight.export(model, (), kwargs=_step(2, 3, 5, 7, encoder_ids=True),
                               dynamic_shapes=_peer_shapes(Dim("cache_length2", min=1, max=4096)))
    assert _dims(program, "attention_mask")[1] == _dims(program, "past_key_values.1.encoder.value")[2] == "seq_length"
    (warning,) = [d for d in program.diagnostics if d.code == "CAP007"]
    assert "input `attention_mask` axis 1 (Dim.DYNAMIC)" in warning.message
    assert "input `past_key_values.0.encoder.key` axis 2 (cache_length2)" in warning.message
    assert "cache_length2 = seq_length" in warning.message and "sdpa_attention.py" in warning.message
    step = _step(3, 1, 4, 5, seed=3, encoder_ids=True)
    for want, got in zip(_eager(model, step), program(**step)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_dims_named_apart_that_t5_broadcasts_name_both_inputs_axes_and_the_line() -> None:
    """The example has the mask at 7 and the cross-attention cache at 3 (T5 slices the mask in eager): torch.export
    failed inside broadcasting with `Attempting to broadcast a dimension of length s26` (CAP006)."""
    with pytest.raises(onnxsight.CaptureError) as caught:
        onnxsight.export(_model("t5"), (), kwargs=_step(2, 3, 5, 7, cross=3, encoder_ids=True),
                         dynamic_shapes=_peer_shapes(Dim("cache_length2", min=1, max=4096)))
    (error,) = [d for d in caught.value.diagnostics if d.level.name == "ERROR"]
    assert error.code == "CAP023"
    assert "input `past_key_values.0.encoder.key` axis 2 (cache_length2)" in error.message
    assert "input `attention_mask` axis 1 (Dim.DYNAMIC)" in error.message
    assert "the example gives them 3 and 7" in error.message
    assert error.location is not None and error.location.file.endswith(".py") and error.location.line > 0
    assert " s26" not in error.message


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(MODELS))
def test_every_encoder_decoder_exports_its_decode_step_in_every_layout(name: str, layout: str) -> None:
    model = _model(name)
    program = onnxsight.export(model, (), kwargs=_step(2, 3, 5, 7), dynamic_shapes=_shapes(LAYOUTS[layout]))
    assert program.output_names[0] == "logits" and program.output_names[-1] == "encoder_last_hidden_state"
    _check_at_other_sizes(model, program)


@pytest.mark.slow
@pytest.mark.parametrize("past", [0, 1])
def test_the_decode_step_exports_from_an_empty_or_one_token_past(past: int) -> None:
    """The first steps' example (a past of 0 or 1, which torch.export specialises): kept dynamic, CAP009 naming the
    cache input."""
    model = _model("bart")
    program = onnxsight.export(model, (), kwargs=_step(2, 3, past, 7), dynamic_shapes=_shapes(LAYOUTS["per tensor"]))
    notes = [d for d in program.diagnostics if d.code == "CAP009"]
    assert notes and notes[0].fields["input"] == "past_key_values.0.decoder.key" and notes[0].fields["axis"] == 2
    _check_at_other_sizes(model, program)
