"""Attention shaped for the fusers: at the defaults, the form onnxscript's rewriter and ONNX Runtime's transformer
optimizer both fuse (BERT's padding mask from an input with a finite fill, ONX008; any other guard as torch.onnx
writes it); with ``optimize="ort-fusion"``, a pre-LN
block's projection biases stored as [1, N] rows (so ORT's level-1 MatMulAddFusion leaves the block to the Python
fusers), the same numbers, and a fake-mode export saved with a checkpoint writes them right."""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Any

import onnx
import pytest
import torch
from torch import nn

import onnxsight

HIDDEN, HEADS = 32, 4


class PreLNBlock(nn.Module):
    """ViT's attention, written out: LayerNorm, then Q/K/V, sdpa, the output projection, the residual, and the
    next LayerNorm (ORT's fuser starts from it)."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.next_norm = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        heads = [p(h).view(x.shape[0], x.shape[1], HEADS, -1).transpose(1, 2) for p in (self.q, self.k, self.v)]
        attended = torch.nn.functional.scaled_dot_product_attention(*heads)
        return self.next_norm(x + self.o(attended.transpose(1, 2).reshape(x.shape)))


class MaskedPreLNBlock(PreLNBlock):
    """The same block with a key-padding mask from an input."""

    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        h = self.norm(x)
        heads = [p(h).view(x.shape[0], x.shape[1], HEADS, -1).transpose(1, 2) for p in (self.q, self.k, self.v)]
        attended = torch.nn.functional.scaled_dot_product_attention(*heads, attn_mask=keys[:, None, None, :])
        return self.next_norm(x + self.o(attended.transpose(1, 2).reshape(x.shape)))


def _fused(path: str, model_type: str = "vit", **options: Any) -> Counter:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        optimized = optimize_model(path, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN, **options)
    return Counter(n.op_type for n in optimized.model.graph.node)


def _rewritten(path: str) -> tuple[Counter, Any]:
    """onnxscript's ``optimize_for_ort`` at its defaults: the op counts, and an ORT session of the model it gives."""
    import onnx_ir as ir
    import onnxruntime as ort
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, _ = optimize_for_ort(ir.load(path))
    out = path.replace(".onnx", "-rewritten.onnx")
    ir.save(model, out)
    return Counter(n.op_type for n in model.graph), ort.InferenceSession(out, providers=["CPUExecutionProvider"])


def test_a_pre_ln_block_fuses_into_one_attention_with_onnxscript(tmp_path: Any) -> None:
    # 1-D biases: onnxscript packs the Q/K/V biases of a fused Attention along axis 0, which [1, N] rows break
    torch.manual_seed(0)
    model, x = PreLNBlock().eval(), torch.randn(2, 6, HIDDEN)
    program = onnxsight.export(model, (x,))
    assert not [t.name for t in program.model_proto.graph.initializer if t.name.endswith(".row")]
    program.save(tmp_path / "m.onnx")
    ops, session = _rewritten(str(tmp_path / "m.onnx"))
    assert ops["Attention"] == 1, ops
    torch.testing.assert_close(torch.from_numpy(session.run(None, {"x": x.numpy()})[0]), model(x), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("opt_level", [None, 0], ids=["default", "opt_level-0"])
def test_a_pre_ln_block_fuses_into_one_attention(tmp_path: Any, opt_level: int | None) -> None:
    torch.manual_seed(0)
    model, x = PreLNBlock().eval(), torch.randn(2, 6, HIDDEN)
    program = onnxsight.export(model, (x,), optimize="ort-fusion")
    rows = {t.name: list(t.dims) for t in program.model_proto.graph.initializer if t.name.endswith(".bias.row")}
    assert rows == {f"{p}.bias.row": [1, HIDDEN] for p in "qkvo"}
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)
    program.save(tmp_path / "m.onnx")
    assert _fused(str(tmp_path / "m.onnx"), opt_level=opt_level)["Attention"] == 1
    plain = onnxsight.export(model, (x,), optimize=False)
    plain.save(tmp_path / "plain.onnx")
    assert _fused(str(tmp_path / "plain.onnx"))["Attention"] == 0  # what the rows are for


def test_a_pre_ln_block_with_a_padding_mask_fuses_into_one_attention(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model, x = MaskedPreLNBlock().eval(), torch.randn(2, 6, HIDDEN)
    keys = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    program = onnxsight.export(model, (x, keys), optimize="ort-fusion")
    assert {t.name for t in program.model_proto.graph.initializer if t.name.endswith(".row")} == \
        {f"{p}.bias.row" for p in "qkvo"}
    torch.testing.assert_close(program(x, keys)[0], model(x, keys), rtol=1e-5, atol=1e-5)
    program.save(tmp_path / "m.onnx")
    assert _fused(str(tmp_path / "m.onnx"), "bert")["Attention"] == 1


def test_fake_export_saved_with_a_checkpoint_writes_the_bias_rows(tmp_path: Any) -> None:
    import onnxruntime as ort

    torch.manual_seed(1)
    real, x = PreLNBlock().eval(), torch.randn(2, 6, HIDDEN)
    with onnxsight.fake_mode():
        fake = PreLNBlock().eval()
    program = onnxsight.export(fake, (x,), optimize="ort-fusion")
    assert "q.bias.row" in program.initializers
    path = tmp_path / "m.onnx"
    program.save(path, weights=real.state_dict())
    assert [list(t.dims) for t in onnx.load(path, load_external_data=False).graph.initializer
            if t.name == "q.bias.row"] == [[1, HIDDEN]]
    out = ort.InferenceSession(str(path)).run(None, {"x": x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), real(x), rtol=1e-5, atol=1e-5)


def test_a_post_ln_block_keeps_its_biases_as_they_are() -> None:
    """BERT's layout (LayerNorm after the residual Add): ORT recognises it already, and a [1, N] bias would keep
    the output projection's bias out of SkipLayerNormalization."""

    class PostLN(PreLNBlock):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.norm(x)
            heads = [p(h).view(x.shape[0], x.shape[1], HEADS, -1).transpose(1, 2) for p in (self.q, self.k, self.v)]
            attended = torch.nn.functional.scaled_dot_product_attention(*heads)
            return self.next_norm(h + self.o(attended.transpose(1, 2).reshape(x.shape)))

    program = onnxsight.export(PostLN().eval(), (torch.randn(2, 6, HIDDEN),), optimize="ort-fusion")
    assert not [t.name for t in program.model_proto.graph.initializer if t.name.endswith(".row")]


class PaddedAttention(nn.Module):
    """sdpa with a key-padding mask from an input: ``keys`` (batch, seq) bool, or a full (batch, 1, L, S) mask."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(*x.shape[:2], HEADS, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        full = mask[:, None, None, :] if mask.dim() == 2 else mask
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=full)


def test_a_key_padding_mask_from_an_input_takes_berts_additive_form() -> None:
    torch.manual_seed(0)
    model, x = PaddedAttention().eval(), torch.randn(2, 6, HIDDEN)
    keys = torch.tensor([[True] * 6, [True, False, True, True, False, False]])
    exact = onnxsight.export(model, (x, keys), optimize=False)  # torch's guard kept: no ONX008, zeros for padding
    assert "TopK" in Counter(n.op_type for n in exact.model_proto.graph.node)
    assert not [d for d in exact.diagnostics if d.code == "ONX008"]
    program = onnxsight.export(model, (x, keys))
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert "TopK" not in ops and ops["Unsqueeze"] == 2 and ops["Expand"] == 1 and ops["Sub"] == 1, ops  # no guard
    torch.testing.assert_close(program(x, keys)[0], model(x, keys), rtol=1e-5, atol=1e-5)
    note = next(d for d in program.diagnostics if d.code == "ONX008")
    assert note.message.startswith("1 attention(s) read their mask from input mask with float32's lowest")
    # a sequence of padding only: torch gives zeros, the additive form the mean of the values
    dead = keys.clone()
    dead[1] = False
    torch.testing.assert_close(exact(x, dead)[0], model(x, dead), rtol=1e-5, atol=1e-5)
    expected, got = model(x, dead), program(x, dead)[0]
    assert torch.all(expected[1] == 0)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)
    v = model.qkv(x).chunk(3, dim=-1)[2].view(2, 6, HEADS, -1).transpose(1, 2)
    torch.testing.assert_close(got[1], v[1].mean(dim=-2, keepdim=True).expand_as(got[1]), rtol=1e-5, atol=1e-5)


def test_a_full_mask_from_an_input_keeps_torchs_zeros_under_the_guard_torch_onnx_writes(tmp_path: Any) -> None:
    """Not a key-padding mask (no BERT form): the guard stays, written as torch.onnx writes it,
    ``Where(IsNaN(Softmax), 0, Softmax)``, which onnxscript's attention rule takes in; no TopK."""
    torch.manual_seed(0)
    model, x = PaddedAttention().eval(), torch.randn(2, 6, HIDDEN)
    full = torch.rand(2, 1, 6, 6) > 0.3
    full[0, 0, 2] = False  # a fully masked row: torch's zeros
    program = onnxsight.export(model, (x, full))
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert "TopK" not in ops and ops["IsNaN"] == 1, ops
    assert not [d for d in program.diagnostics if d.code == "ONX008"]
    torch.testing.assert_close(program(x, full)[0], model(x, full), rtol=1e-5, atol=1e-5)
    program.save(tmp_path / "m.onnx")
    assert _rewritten(str(tmp_path / "m.onnx"))[0]["MultiHeadAttention"] == 1


def test_bert_with_a_padding_mask_fuses_its_residual_layer_norms_with_torchs_guard(tmp_path: Any) -> None:
    # NOTE: optimize=False keeps torch's fully-masked-row guard; its row maximum must leave ONNX Runtime's
    # symbolic shape inference the shapes (opset 18's ReduceMax did not), or no SkipLayerNormalization fuses.
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    layers = 2
    config = transformers.BertConfig(vocab_size=100, max_position_embeddings=32, num_hidden_layers=layers,
                                     hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=4 * HIDDEN)
    model = transformers.BertModel(config, add_pooling_layer=False)
    model.config.return_dict = False
    model.eval()
    ids, mask = torch.randint(0, 100, (2, 8)), torch.ones(2, 8, dtype=torch.int64)
    mask[:, 4:] = 0
    program = onnxsight.export(model, (ids, mask), optimize=False)
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert ops["TopK"] == layers and "ReduceMax" not in ops, ops  # the guard is kept, exact
    path = str(tmp_path / "bert-mask.onnx")
    program.save(path)
    fused = _fused(path, "bert")
    assert fused["SkipLayerNormalization"] == 2 * layers and fused["LayerNormalization"] == 1, fused
    assert onnxsight.verify(program, (ids, mask)).passed
    # a sequence of padding only: torch's zeros in attention, the model's output as eager's
    padding = mask.clone()
    padding[1] = 0
    with torch.no_grad():
        expected = model(ids, padding)[0]
    torch.testing.assert_close(program(ids, padding)[0], expected, rtol=1e-4, atol=1e-4)
    assert not torch.isnan(program(ids, padding)[0]).any()



class MaskedSdpa(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keys[:, None, None, :])


@pytest.mark.parametrize("position", range(6))
def test_the_guard_keeps_nan_where_torch_does(position: int) -> None:
    # torch zeros a row only when every score is -inf; a masked NaN score (NaN + -inf) keeps the row NaN.
    # (ORT's ReduceMax, the row maximum before, skips NaN at some positions and zeroed such rows.)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    keys = torch.tensor([[True] * 6, [False] * 6])
    model = MaskedSdpa()
    program = onnxsight.export(model, (q, k, v, keys), optimize=False)   # the translation's guard
    poisoned = k.clone()
    poisoned[1, :, position, 0] = float("nan")
    expected = model(q, poisoned, v, keys)
    assert torch.isnan(expected[1]).all() and not torch.isnan(expected[0]).any()
    torch.testing.assert_close(program(q, poisoned, v, keys)[0], expected, rtol=1e-5, atol=1e-5, equal_nan=True)
    zeros = model(q, k, v, keys)  # without NaN: torch's zeros for the sequence of padding only
    assert torch.all(zeros[1] == 0)
    torch.testing.assert_close(program(q, k, v, keys)[0], zeros, rtol=1e-5, atol=1e-5)
    finite = onnxsight.export(model, (q, k, v, keys))   # the default's finite fill keeps the NaN too
    torch.testing.assert_close(finite(q, poisoned, v, keys)[0][0], expected[0], rtol=1e-5, atol=1e-5)
    assert torch.isnan(finite(q, poisoned, v, keys)[0][1]).all()


class EncoderDecoderAttention(nn.Module):
    """DETR's two attentions over the same padded keys: the encoder's self-attention (as many queries as keys)
    and the decoder's cross-attention from a fixed number of object queries."""

    def __init__(self, queries: int = 5) -> None:
        super().__init__()
        self.qkv, self.objects = nn.Linear(HIDDEN, 3 * HIDDEN), nn.Parameter(torch.randn(queries, HIDDEN))

    def forward(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q, k, v = (t.view(*x.shape[:2], HEADS, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        mask = keys[:, None, None, :]
        memory = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)
        objects = self.objects.expand(x.shape[0], -1, -1).reshape(x.shape[0], -1, HEADS, HIDDEN // HEADS)
        memory = memory.reshape(*x.shape[:2], HEADS, -1).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(objects.transpose(1, 2), memory, memory,
                                                                attn_mask=mask)


@pytest.mark.parametrize("dynamic", [False, True])
def test_one_padding_mask_read_by_attentions_of_other_query_counts_gets_one_additive_mask_each(dynamic: bool) -> None:
    """Conditional DETR's encoder (4 queries) and decoder cross-attention (5) read one pixel mask: the additive
    mask has the queries' axis, so one made for the encoder's 4 queries broke the decoder's Add (ORT refused
    to load the model: "Incompatible dimensions")."""
    torch.manual_seed(0)
    model, x = EncoderDecoderAttention().eval(), torch.randn(2, 4, HIDDEN)
    keys = torch.tensor([[True] * 4, [True, True, False, False]])
    shapes = {"x": {0: "batch", 1: "keys"}, "keys": {0: "batch", 1: "keys"}} if dynamic else None
    program = onnxsight.export(model, (x, keys), dynamic_shapes=shapes, verify=True)
    assert next(d for d in program.diagnostics if d.code == "ONX008").fields["count"] == 2
    assert program.verification.passed
    torch.testing.assert_close(program(x, keys)[0], model(x, keys), rtol=1e-5, atol=1e-5)
