"""transformers' DynamicCache as an input (and output) of a decode step: flattened for the export only,
named past_key_values.{layer}.key/value and present.{layer}.key/value, batch and past length dynamic.

The cache argument is spelled as the installed transformers spells it: ``past_key_values`` (4.x, early
5.x), ``cache`` (5.24 here); the ONNX inputs are ``past_key_values.*`` either way."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight
from onnxsight import rules
from onnxsight.zoo.suites.transformers import cache_argument

transformers = pytest.importorskip("transformers")

LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 2, 2, 8, 128
CACHE = cache_argument(transformers.LlamaForCausalLM)


def _model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                         num_key_value_heads=KV_HEADS, intermediate_size=64, max_position_embeddings=64,
                         use_cache=True, pad_token_id=0)  # a local config, random weights: never the hub
    return LlamaForCausalLM(config).eval()


def _inputs(batch: int, past: int, seed: int = 1) -> dict[str, Any]:
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(seed)
    layers = [(torch.randn(batch, KV_HEADS, past, HEAD_DIM, generator=generator),
               torch.randn(batch, KV_HEADS, past, HEAD_DIM, generator=generator)) for _ in range(LAYERS)]
    return {"input_ids": torch.randint(1, VOCAB, (batch, 1), generator=generator),
            "attention_mask": torch.ones(batch, past + 1, dtype=torch.long),
            CACHE: DynamicCache(layers)}


def _dynamic_shapes() -> dict[str, Any]:
    batch, past = torch.export.Dim("batch"), torch.export.Dim("past", min=1, max=1024)
    return {"input_ids": {0: batch}, "attention_mask": {0: batch, 1: past + 1},
            CACHE: [{0: batch, 2: past}] * (2 * LAYERS)}


def _eager(model: Any, inputs: dict[str, Any]) -> list[torch.Tensor]:
    from transformers import DynamicCache

    copy = dict(inputs)
    copy[CACHE] = DynamicCache([(k.clone(), v.clone()) for k, v, *_ in inputs[CACHE]])
    with torch.no_grad():
        out = model(**copy)
    cache = out.cache if "cache" in out else out.past_key_values
    return [out.logits] + [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.fixture(scope="module")
def exported() -> tuple[Any, onnxsight.ONNXProgram]:
    model = _model()
    program = onnxsight.export(model, (), kwargs=_inputs(2, 6), dynamic_shapes=_dynamic_shapes())
    return model, program


def test_cache_inputs_and_outputs_are_named_per_layer(exported: Any) -> None:
    _, program = exported
    cache = [f"{layer}.{kind}" for layer in range(LAYERS) for kind in ("key", "value")]
    assert program.input_names == ["input_ids", "attention_mask"] + [f"past_key_values.{c}" for c in cache]
    assert program.output_names == ["logits"] + [f"present.{c}" for c in cache]   # was linear_14 (an FX name)
    graph_input = {i.name: i for i in program.model_proto.graph.input}["past_key_values.1.value"]
    dims = graph_input.type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[2].dim_param and [d.dim_value for d in dims[1::2]] == [KV_HEADS, HEAD_DIM]


@pytest.mark.parametrize("batch, past", [(2, 6), (3, 9), (1, 1)])
def test_decode_step_matches_eager_at_other_sizes(exported: Any, batch: int, past: int) -> None:
    model, program = exported
    inputs = _inputs(batch, past, seed=batch + past)
    expected = _eager(model, inputs)
    actual = program(**inputs)
    assert len(actual) == len(expected) == 1 + 2 * LAYERS
    for want, got in zip(expected, actual):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_verify_passes_per_node(exported: Any) -> None:
    _, program = exported
    result = onnxsight.verify(program, (), _inputs(2, 6))
    assert result.passed and len(result.nodes) > 50


def test_flattening_is_reported(exported: Any) -> None:
    _, program = exported
    notes = [d for d in program.diagnostics if d.rule is rules.LIBRARY_CONTAINER_FLATTENED]
    assert [d.message for d in notes] == [
        f"input past_key_values (DynamicCache, {LAYERS} layers) was flattened to {2 * LAYERS} ONNX inputs "
        "past_key_values.0.key ... past_key_values.1.value",
        f"output present (DynamicCache, {LAYERS} layers) was flattened to {2 * LAYERS} ONNX outputs "
        "present.0.key ... present.1.value"]


def test_no_registration_is_left_behind(exported: Any) -> None:
    from transformers import DynamicCache, EncoderDecoderCache

    assert DynamicCache not in pytree.SUPPORTED_NODES and EncoderDecoderCache not in pytree.SUPPORTED_NODES


def test_a_registration_of_the_users_own_is_set_aside_and_restored() -> None:
    """transformers' own registration rebuilds the cache with new tensors while tracing, which
    decomposition refuses (DEC001): ours replaces it for the export and for prog(...), then it is back."""
    from transformers import DynamicCache
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()
    theirs = pytree.SUPPORTED_NODES[DynamicCache]
    try:
        model = _model()
        inputs = _inputs(1, 4)
        program = onnxsight.export(model, (), kwargs=inputs)
        assert pytree.SUPPORTED_NODES[DynamicCache] is theirs
        assert program.input_names[2:4] == ["past_key_values.0.key", "past_key_values.0.value"]
        expected = _eager(model, inputs)
        for want, got in zip(expected, program(**inputs)):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
        assert pytree.SUPPORTED_NODES[DynamicCache] is theirs
    finally:
        pytree._deregister_pytree_node(DynamicCache)
        import torch.fx._pytree as fx_pytree
        fx_pytree.SUPPORTED_NODES.pop(DynamicCache, None)
        fx_pytree.SUPPORTED_NODES_EXACT_MATCH.pop(DynamicCache, None)


def test_user_input_names_win(exported: Any) -> None:
    model, _ = exported
    names = ["ids", "mask"] + [f"kv{i}" for i in range(2 * LAYERS)]
    program = onnxsight.export(model, (), kwargs=_inputs(1, 3), input_names=names)
    assert program.input_names == names


def test_a_guard_torch_cannot_prove_is_captured_size_oblivious() -> None:
    """The cache built inside forward() from tensors concatenates onto an empty tensor: torch.export raises
    min(8 + 8*past, 16 + 16*past) == 8 + 8*past, true for every past but unprovable (CAP004 before).
    Captured again size-oblivious, and checked at the example, it exports and runs at other sizes."""
    from onnxsight.zoo.suites.transformers import DecodeStep

    model = DecodeStep(_model())
    batch, past = torch.export.Dim("batch"), torch.export.Dim("past", min=1, max=1024)
    kv = ({0: batch, 2: past},) * LAYERS

    def inputs(b: int, p: int) -> tuple:
        cache = _inputs(b, p)
        keys = tuple(layer.keys for layer in cache[CACHE].layers)
        values = tuple(layer.values for layer in cache[CACHE].layers)
        return cache["input_ids"], cache["attention_mask"], keys, values

    program = onnxsight.export(model, inputs(2, 6), dynamic_shapes=({0: batch}, {0: batch, 1: past + 1}, kv, kv))
    assert not [d for d in program.diagnostics if d.rule.code == "CAP004"]
    example = inputs(3, 9)
    with torch.no_grad():
        expected = pytree.tree_leaves(model(*example))
    for want, got in zip(expected, program(*example)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(CACHE == "past_key_values", reason="this transformers' forward() declares past_key_values itself")
def test_the_deprecated_spelling_exports_with_the_same_names(exported: Any) -> None:
    """transformers 5.24 still takes past_key_values= through **kwargs (renamed to cache= at run time):
    the ONNX inputs are the same; a dynamic_shapes entry for it is refused, naming forward()'s spelling."""
    model, _ = exported
    inputs = _inputs(2, 6)
    expected = _eager(model, inputs)
    inputs["past_key_values"] = inputs.pop(CACHE)
    program = onnxsight.export(model, (), kwargs=inputs)
    assert program.input_names[2:] == [f"past_key_values.{layer}.{kind}" for layer in range(LAYERS)
                                       for kind in ("key", "value")]
    for want, got in zip(expected, program(**inputs)):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    shapes = _dynamic_shapes()
    shapes["past_key_values"] = shapes.pop(CACHE)
    with pytest.raises(onnxsight.ExportError) as failure:
        onnxsight.export(model, (), kwargs=inputs, dynamic_shapes=shapes)
    assert "pass them by the name forward() declares (transformers 5.24 calls the KV cache `cache`)" in \
        str(failure.value)


@pytest.mark.parametrize("spelling", ["past_key_values", "cache"])
def test_either_spelling_of_the_argument_names_the_inputs_past_key_values(exported: Any, spelling: str) -> None:
    """Whatever transformers is installed: a forward() taking the cache as ``past_key_values`` (4.x) or
    ``cache`` (5.24) exports the same ONNX inputs."""
    model, _ = exported
    namespace: dict[str, Any] = {}
    exec(f"def forward(self, input_ids, attention_mask, {spelling}):\n"
         f"    return self.inner(input_ids=input_ids, attention_mask=attention_mask, **{{CACHE: {spelling}}})\n",
         dict(globals()), namespace)
    wrapper = type("Decoder", (torch.nn.Module,), {"forward": namespace["forward"]})()
    wrapper.inner = model
    inputs = _inputs(1, 3)
    program = onnxsight.export(wrapper, (), kwargs={"input_ids": inputs["input_ids"],
                                                    "attention_mask": inputs["attention_mask"],
                                                    spelling: inputs[CACHE]})
    assert program.input_names[2:] == [f"past_key_values.{layer}.{kind}" for layer in range(LAYERS)
                                       for kind in ("key", "value")]
