"""From opset 23, attention is one ONNX ``Attention`` node and RMS norms (LLaMA's written-out form too) one
``RMSNormalization``: the exported models match eager PyTorch at several sequence lengths with a dynamic sequence,
and the verifier pairs the Attention node with the sdpa FX node."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import onnxsight


class WrittenRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm, as it writes it (not F.rms_norm)."""

    def __init__(self, width: int, weighted: bool = True, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width)) if weighted else None
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x if self.weight is not None else x


class NotRMS(nn.Module):
    """The same arithmetic over the wrong axis, or with another power: not an RMS norm over the last axis."""

    def __init__(self, axis: int, power: float) -> None:
        super().__init__()
        self.axis, self.power = axis, power

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(self.power).mean(self.axis, keepdim=True) + 1e-6)


class DecoderBlock(nn.Module):
    """A LLaMA-shaped block written out: RMS norms, grouped-query causal attention through sdpa, SiLU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, scale: float | None = None) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.scale = heads, kv_heads, dim // heads, scale
        self.norm1, self.norm2 = WrittenRMSNorm(dim), WrittenRMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.up, self.gate, self.down = nn.Linear(dim, 2 * dim), nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale,
                                              enable_gqa=True)
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def _ops(program: onnxsight.ONNXProgram) -> Counter:
    return Counter(n.op_type for n in program.model_proto.graph.node)


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("opset", [18, 23])
def test_written_out_rms_norm_is_one_node_from_opset_23(opset: int, weighted: bool) -> None:
    torch.manual_seed(0)
    model, x = WrittenRMSNorm(16, weighted).eval(), torch.randn(2, 5, 16)
    seq = torch.export.Dim("seq", min=2, max=64)
    program = onnxsight.export(model, (x,), opset_version=opset, dynamic_shapes=({1: seq},))
    ops = _ops(program)
    if opset >= 23:
        # the Identity is x.to(float32) of the graph input: an FX value of its own, kept to be compared
        assert ops == Counter({"RMSNormalization": 1, "Identity": 1}), ops
    else:
        assert "RMSNormalization" not in ops and "ReduceMean" in ops
    for length in (1, 5, 33):
        x = torch.randn(2, length, 16)
        torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)
    result = onnxsight.verify(program, (x,))
    assert result.passed
    if opset >= 23:
        reasons = result.coverage.set_index("fx_node")["reason"]
        last = [n.name for n in program.exported_program.graph.nodes if n.op == "call_function"][-1]
        assert reasons[last] == "compared"
        assert "optimised away" in set(reasons), reasons


@pytest.mark.parametrize(("axis", "power"), [(1, 2.0), (-1, 3.0)])
def test_other_arithmetic_is_not_taken_for_an_rms_norm(axis: int, power: float) -> None:
    model, x = NotRMS(axis, power), torch.randn(2, 5, 16).abs() + 0.1
    program = onnxsight.export(model, (x,), opset_version=23)
    assert "RMSNormalization" not in _ops(program)
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [None, 0.2])
def test_decoder_block_at_23_matches_eager_at_several_lengths(scale: float | None) -> None:
    torch.manual_seed(0)
    model, x = DecoderBlock(scale=scale).eval(), torch.randn(2, 7, 32)
    seq = torch.export.Dim("seq", min=2, max=128)
    program = onnxsight.export(model, (x,), opset_version=23, dynamic_shapes={"x": {1: seq}})
    ops = _ops(program)
    assert ops["Attention"] == 1 and ops["RMSNormalization"] == 2, ops
    assert "Softmax" not in ops and "ReduceMean" not in ops
    sdpa = next(n.name for n in program.exported_program.graph.nodes
                if n.target is torch.ops.aten.scaled_dot_product_attention.default)
    for length in (2, 7, 40):
        x = torch.randn(2, length, 32)
        result = onnxsight.verify(program, (x,))
        assert result.passed, result.root_causes
        row = result.nodes.set_index("fx_node").loc[sdpa]
        assert row["onnx_op"] == "Attention" and bool(row["passed"])


def test_decoder_block_with_a_float_mask_at_23() -> None:
    torch.manual_seed(0)
    model = DecoderBlock().eval()
    x = torch.randn(2, 6, 32)
    mask = torch.zeros(2, 1, 6, 6)
    mask[:, :, :, 4:] = torch.finfo(torch.float32).min   # padding at the end, as transformers builds it
    seq = torch.export.Dim("seq", min=2, max=64)
    program = onnxsight.export(model, (x, mask), opset_version=23,
                               dynamic_shapes=({1: seq}, {2: seq, 3: seq}))
    assert _ops(program)["Attention"] == 1
    for length in (3, 6, 20):
        x, mask = torch.randn(2, length, 32), torch.zeros(2, 1, length, length)
        mask[1, :, :, length - 2:] = torch.finfo(torch.float32).min
        assert onnxsight.verify(program, (x, mask)).passed


def _key_value_heads(program: onnxsight.ONNXProgram) -> list[int]:
    """The heads of each Attention node's K and V inputs, from the graph's declared shapes."""
    graph = program.model_proto.graph
    shapes = {v.name: v.type.tensor_type.shape.dim for v in (*graph.value_info, *graph.input)}
    return [shapes[name][1].dim_value for node in graph.node if node.op_type == "Attention" for name in node.input[1:3]]


@pytest.mark.parametrize("force_gqa", [False, True])
def test_llama_from_transformers_at_23_uses_the_direct_ops_and_verifies(force_gqa: bool, monkeypatch: Any) -> None:
    """Under torch.export transformers always builds LLaMA's causal mask, and with a mask its sdpa path repeats the
    2 key/value heads to the 4 query heads (repeat_kv) unless TRANSFORMERS_SDPA_FORCE_GQA=1 has it call sdpa with
    enable_gqa=True. Either way each Attention node takes K and V with their 2 heads: the optimize stage drops
    repeat_kv before the standard's Attention (which groups the heads itself), and the rotary embeddings are the
    standard's RotaryEmbedding."""
    transformers = pytest.importorskip("transformers")
    if force_gqa:
        monkeypatch.setenv("TRANSFORMERS_SDPA_FORCE_GQA", "1")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    model.config.use_cache = False
    ids = torch.randint(0, 128, (1, 9))
    seq = torch.export.Dim("seq", min=2, max=64)
    program = onnxsight.export(model, (ids,), opset_version=23, dynamic_shapes=({1: seq},))
    ops = _ops(program)
    assert ops["Attention"] == 2 and ops["RMSNormalization"] == 5 and ops["RotaryEmbedding"] == 4, ops
    assert _key_value_heads(program) == [2] * 4
    for length in (4, 9, 30):
        ids = torch.randint(0, 128, (1, length))
        result = onnxsight.verify(program, (ids,))
        assert result.passed, result.root_causes


class GQA(nn.Module):
    def __init__(self, scale: float | None) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale, enable_gqa=True)


@pytest.mark.parametrize("scale", [None, 0.1])
@pytest.mark.parametrize("mask", ["bool", "padding", "float_per_head"])
def test_grouped_query_attention_with_masks_is_one_attention_node(mask: str, scale: float | None) -> None:
    """8 query heads over 2 key/value heads, query length 5 over 7 keys, each mask form ONNX Runtime takes."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 5, 16, generator=generator)
    k, v = torch.randn(2, 2, 7, 16, generator=generator), torch.randn(2, 2, 7, 16, generator=generator)
    masks = {"bool": torch.rand(5, 7, generator=generator) > 0.3,
             "padding": torch.where(torch.arange(7) < 5, 0.0, float("-inf")).expand(2, 1, 1, 7).contiguous(),
             "float_per_head": torch.randn(2, 8, 5, 7, generator=generator)}
    args = (q, k, v, masks[mask])
    model = GQA(scale)
    program = onnxsight.export(model, args, opset_version=23)
    assert _ops(program)["Attention"] == 1 and "Softmax" not in _ops(program)
    torch.testing.assert_close(program(*args)[0], model(*args), rtol=1e-5, atol=1e-5)
    assert onnxsight.verify(program, args).passed


class HalfRMSNorm(nn.Module):
    """LlamaRMSNorm as transformers writes it, for a half-precision model: float32 inside, the weight after."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * x.to(dtype)


def test_half_precision_rms_norm_keeps_the_float32_stash() -> None:
    torch.manual_seed(0)
    model, x = HalfRMSNorm(16).half().eval(), torch.randn(2, 5, 16).half() * 4
    program = onnxsight.export(model, (x,), opset_version=23)
    nodes = program.model_proto.graph.node
    assert [n.op_type for n in nodes] == ["RMSNormalization"]
    assert onnx_attribute(nodes[0], "stash_type") == 1
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-3, atol=1e-3)
    assert onnxsight.verify(program, (x,)).passed


def onnx_attribute(node: object, name: str) -> object:
    import onnx

    return next(onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name)
