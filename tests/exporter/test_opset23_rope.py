"""From opset 23, transformers' rotary embedding (``q * cos + rotate_half(q) * sin``) is one ONNX ``RotaryEmbedding``
where it computes exactly what the graph did, and ``repeat_kv`` before an ``Attention`` is dropped (the op takes fewer
key/value heads than query heads): LLaMA with 4 and 2 key/value heads, static and dynamic sizes, a decode step over a
KV cache; rotaries the op does not compute (unequal halves, the other layout, a mutated rotate_half) left alone."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from torch import nn

import onnxsight

transformers = pytest.importorskip("transformers")

LAYERS = 2


def _ops(program: onnxsight.ONNXProgram) -> Counter:
    return Counter(n.op_type for n in program.model_proto.graph.node if not n.domain)


def _key_value_heads(program: onnxsight.ONNXProgram) -> list[int]:
    """The heads of each Attention node's K and V inputs, from ONNX's shape inference over the saved graph."""
    graph = onnx.shape_inference.infer_shapes(program.model_proto).graph
    shapes = {v.name: v.type.tensor_type.shape.dim for v in (*graph.value_info, *graph.input, *graph.output)}
    return [shapes[name][1].dim_value for node in graph.node if node.op_type == "Attention" for name in node.input[1:3]]


def _llama(kv_heads: int, dtype: torch.dtype = torch.float32) -> Any:
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                                      num_key_value_heads=kv_heads, intermediate_size=128, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).to(dtype).eval()
    model.config.use_cache = False
    return model


def _ids(batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(length))


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_llama_static_at_23_has_rotary_embeddings_and_no_repeat_kv(kv_heads: int) -> None:
    model, ids = _llama(kv_heads), _ids(2, 9)
    program = onnxsight.export(model, (ids,), opset_version=23)
    ops = _ops(program)
    assert ops["RotaryEmbedding"] == 2 * LAYERS and ops["Neg"] == 0 and ops["Slice"] == 0, ops
    assert ops["Expand"] <= 2 and ops["Attention"] == LAYERS, ops   # cos/sin to the batch (2): no repeat_kv
    assert _key_value_heads(program) == [kv_heads] * 2 * LAYERS
    with torch.no_grad():
        expected = model(ids).last_hidden_state
    torch.testing.assert_close(program(ids)[0], expected, rtol=1e-4, atol=1e-4)
    result = onnxsight.verify(program, (ids,))
    assert result.passed, result.root_causes
    # the rotary's outputs (q_embed, k_embed: the Add of each) are still compared with PyTorch's
    compared = set(result.nodes.loc[result.nodes["onnx_op"] == "RotaryEmbedding", "value"])
    assert len(compared) == 2 * LAYERS, compared
    metadata = {p.key: p.value for p in program.model_proto.metadata_props}
    removed = json.loads(metadata["pkg.onnxsight.optimized_away"])
    assert Counter(removed.values())["rotary embeddings"] == 6 * 2 * LAYERS, removed


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_llama_dynamic_at_23_verifies_at_several_sizes(kv_heads: int) -> None:
    model = _llama(kv_heads)
    batch, seq = torch.export.Dim("batch", max=8), torch.export.Dim("seq", min=2, max=64)
    program = onnxsight.export(model, (_ids(2, 9),), opset_version=23, dynamic_shapes=({0: batch, 1: seq},))
    ops = _ops(program)
    assert ops["RotaryEmbedding"] == 2 * LAYERS and ops["Neg"] == 0, ops
    assert _key_value_heads(program) == [kv_heads] * 2 * LAYERS
    for size in ((1, 4), (2, 9), (3, 30)):
        ids = _ids(*size)
        with torch.no_grad():
            expected = model(ids).last_hidden_state
        torch.testing.assert_close(program(ids)[0], expected, rtol=1e-4, atol=1e-4)
        result = onnxsight.verify(program, (ids,))
        assert result.passed, (size, result.root_causes)


def test_llama_decode_step_over_a_kv_cache_at_23() -> None:
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

    from onnxsight.zoo.suites.transformers import cache_argument

    cache_name = cache_argument(LlamaForCausalLM)
    config = LlamaConfig(vocab_size=128, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64, use_cache=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()

    def inputs(batch: int, past: int) -> dict[str, Any]:
        generator = torch.Generator().manual_seed(batch * 100 + past)
        layers = [(torch.randn(batch, 2, past, 16, generator=generator),
                   torch.randn(batch, 2, past, 16, generator=generator)) for _ in range(LAYERS)]
        return {"input_ids": torch.randint(1, 128, (batch, 1), generator=generator),
                "attention_mask": torch.ones(batch, past + 1, dtype=torch.long), cache_name: DynamicCache(layers)}

    batch, past = torch.export.Dim("batch"), torch.export.Dim("past", min=1, max=60)
    shapes = {"input_ids": {0: batch}, "attention_mask": {0: batch, 1: past + 1},
              cache_name: [{0: batch, 2: past}] * (2 * LAYERS)}
    program = onnxsight.export(model, (), kwargs=inputs(2, 6), dynamic_shapes=shapes, opset_version=23)
    ops = _ops(program)
    assert ops["RotaryEmbedding"] == 2 * LAYERS and ops["Neg"] == 0, ops
    assert _key_value_heads(program) == [2] * 2 * LAYERS
    for batch_size, past_length in ((2, 6), (1, 1), (3, 20)):
        result = onnxsight.verify(program, (), inputs(batch_size, past_length))
        assert result.passed, ((batch_size, past_length), result.root_causes)


def test_half_precision_llama_at_23() -> None:
    model, ids = _llama(2, torch.float16), _ids(1, 7)
    program = onnxsight.export(model, (ids,), opset_version=23)
    assert _ops(program)["RotaryEmbedding"] == 2 * LAYERS
    with torch.no_grad():
        expected = model(ids).last_hidden_state.float()
    got = program(ids)[0].float()
    torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("opset, optimize", [(22, True), (23, "ort-fusion")])
def test_before_23_and_under_ort_fusion_the_rotary_and_repeat_kv_stay(opset: int, optimize: Any) -> None:
    program = onnxsight.export(_llama(2), (_ids(1, 9),), opset_version=opset, optimize=optimize)
    ops = _ops(program)
    assert ops["RotaryEmbedding"] == 0 and ops["Neg"] == 2 * LAYERS and ops["Expand"] >= 2 * LAYERS, ops


class Rotary(nn.Module):
    """One head-split projection and a rotary embedding written as transformers writes it, or mutated: ``form``
    picks the frequencies (``equal``: cat(f, f); ``unequal``: cat(f, 2f)), the layout, the rotated width, the half
    that is negated."""

    def __init__(self, form: str, dim: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.form, self.heads, self.head_dim = form, heads, dim // heads
        self.proj = nn.Linear(dim, dim, bias=False)
        self.rotated = self.head_dim // 2 if form == "partial" else self.head_dim
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, self.rotated, 2).float() / self.rotated)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.proj(x).view(b, s, self.heads, self.head_dim)
        inv_freq = self.inv_freq
        if self.form.startswith("constant"):   # computed in forward, not a buffer: cos/sin fold to constant tables
            inv_freq = 1.0 / (10000 ** (torch.arange(0, self.rotated, 2).float() / self.rotated))
        freqs = torch.arange(s, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, 2 * freqs if self.form.endswith("unequal") else freqs), dim=-1)[None]
        cos, sin = emb.cos() * 0.5, emb.sin() * 0.5   # attention_scaling of the rope types that have it
        if self.form == "mixed":   # cos as the op takes it, sin not
            sin = torch.cat((freqs, 2 * freqs), dim=-1)[None].sin()
        if self.form == "heads_last":   # (B, S, H, D): cos/sin broadcast over axis 2, a layout the op does not take
            return q * cos.unsqueeze(2) + _rotate_half(q, False) * sin.unsqueeze(2)
        q = q.transpose(1, 2)
        if self.form == "interleaved":   # GPT-J's rotate_every_two over pairs of neighbours, cos/sin repeated so
            cos, sin = (t[..., : self.head_dim // 2].repeat_interleave(2, -1) for t in (cos, sin))
            rotated = torch.stack((-q[..., 1::2], q[..., ::2]), dim=-1).flatten(-2)
            return q * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)
        if self.form == "partial":   # GPT-NeoX/Phi: the first half of the head rotated, the rest passed through
            half = self.head_dim // 2
            rot, rest = q[..., :half], q[..., half:]
            return torch.cat((rot * cos.unsqueeze(1) + _rotate_half(rot, False) * sin.unsqueeze(1), rest), dim=-1)
        return q * cos.unsqueeze(1) + _rotate_half(q, self.form == "wrong_half") * sin.unsqueeze(1)


def _rotate_half(x: torch.Tensor, wrong: bool) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x2, -x1) if wrong else (-x2, x1), dim=-1)


@pytest.mark.parametrize("form, rotaries", [("equal", 1), ("constant", 1), ("partial", 1), ("unequal", 0),
                                            ("constant_unequal", 0), ("mixed", 0), ("interleaved", 0),
                                            ("heads_last", 0), ("wrong_half", 0)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_only_a_rotary_the_op_computes_becomes_one(form: str, rotaries: int, dynamic: bool) -> None:
    """cat(f, f).cos() * scale has equal halves (the cache is cos(f) * scale; with static sizes and no buffer a
    constant table, whose halves are compared); a partial rotary is one with rotary_embedding_dim; unequal halves (of sin alone too), GPT-J's interleaved rotary, heads on axis 2, and -x1
    in place of -x2 are something else."""
    torch.manual_seed(0)
    model, x = Rotary(form).eval(), torch.randn(2, 7, 32)
    seq = torch.export.Dim("seq", min=2, max=64)
    program = onnxsight.export(model, (x,), opset_version=23, dynamic_shapes=({1: seq},) if dynamic else None)
    assert _ops(program)["RotaryEmbedding"] == rotaries, _ops(program)
    if form == "partial":   # rotary_embedding_dim: the rotated part and the rest are not sliced apart
        assert _ops(program)["Slice"] == 0 and _ops(program)["Concat"] == 0, _ops(program)
    if not rotaries:   # nothing made for a rotary that was not rewritten (cos's half-size cache of "mixed")
        assert not [o for n in program.model_proto.graph.node for o in n.output if o.endswith("_half")]
    for length in ((7, 12) if dynamic else (7,)):
        x = torch.randn(2, length, 32)
        torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)
        assert onnxsight.verify(program, (x,)).passed


def test_onnx_attention_groups_key_value_heads_as_repeat_kv_does() -> None:
    """ONNX Attention with 4 query heads over 2 key/value heads pairs query head h with key/value head h // 2 (onnx's
    reference implementation and ONNX Runtime alike): repeat_kv's order, each head repeated consecutively."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in (("q", [1, 4, 5, 8]), ("k", [1, 2, 5, 8]), ("v", [1, 2, 5, 8]))]
    graph = helper.make_graph([helper.make_node("Attention", ["q", "k", "v"], ["y"])], "gqa", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(*s, generator=generator) for s in ((1, 4, 5, 8), (1, 2, 5, 8), (1, 2, 5, 8)))
    repeated = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1))
    feeds = {"q": q.numpy(), "k": k.numpy(), "v": v.numpy()}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, feeds)[0], repeated.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ReferenceEvaluator(model).run(None, feeds)[0], repeated.numpy(), rtol=1e-5, atol=1e-6)


class RepeatedKV(nn.Module):
    """sdpa over K/V repeated to the query heads, by repeat_kv (``interleave``) or by tiling the heads (``tile``:
    head h reads key/value head h % 2, which ONNX Attention's grouping does not compute); ``reused``: the repeated
    K is an output too."""

    def __init__(self, form: str) -> None:
        super().__init__()
        self.form = form

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        b, h, s, d = k.shape
        if self.form == "tile":
            k, v = k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1)
        else:
            k = k[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
            v = v[:, :, None].expand(b, h, 2, s, d).reshape(b, 2 * h, s, d)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return (out, k) if self.form == "reused" else out


@pytest.mark.parametrize("form, direct", [("interleave", True), ("reused", True), ("tile", False)])
def test_repeat_kv_is_dropped_only_where_attention_groups_the_same(form: str, direct: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    args = (torch.randn(2, 4, 6, 8, generator=generator), torch.randn(2, 2, 6, 8, generator=generator),
            torch.randn(2, 2, 6, 8, generator=generator))
    model = RepeatedKV(form)
    program = onnxsight.export(model, args, opset_version=23)
    assert _key_value_heads(program) == ([2, 2] if direct else [4, 4])
    expected = model(*args)
    for got, want in zip(program(*args), expected if isinstance(expected, tuple) else (expected,)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert onnxsight.verify(program, args).passed


def test_phi_partial_rotary_is_one_rotary_embedding_with_its_dim() -> None:
    """transformers' Phi rotates the first partial_rotary_factor of each head and passes the rest through."""
    config = transformers.PhiConfig(vocab_size=128, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                                    intermediate_size=128, max_position_embeddings=64, partial_rotary_factor=0.5)
    torch.manual_seed(0)
    model = transformers.PhiModel(config).eval()
    model.config.use_cache = False
    batch, seq = torch.export.Dim("batch", max=8), torch.export.Dim("seq", min=2, max=64)
    program = onnxsight.export(model, (_ids(2, 9),), opset_version=23, dynamic_shapes=({0: batch, 1: seq},))
    rotaries = [n for n in program.model_proto.graph.node if n.op_type == "RotaryEmbedding"]
    assert len(rotaries) == 2 * LAYERS and _ops(program)["Neg"] == 0
    assert {onnx.helper.get_attribute_value(a) for n in rotaries for a in n.attribute} == {8}   # half of head 16
    for size in ((1, 5), (3, 20)):
        result = onnxsight.verify(program, (_ids(*size),))
        assert result.passed, (size, result.root_causes)
