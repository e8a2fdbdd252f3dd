"""Optimised models verified against PyTorch with the same per-node engine: ONNX Runtime's transformer optimizer,
onnxscript's ``optimize_for_ort`` and ORT's session-level optimisation, values paired by name where they survive, a
broken fusion named."""

from __future__ import annotations

import contextlib
import io
import re
from typing import Any

import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

import onnxsight

LAYERS, HIDDEN, HEADS = 2, 64, 4


def _bert_model() -> Any:
    """A small transformers BERT, random weights (seed 0), in eval mode, returning tuples."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                     num_attention_heads=HEADS, intermediate_size=4 * HIDDEN,
                                     max_position_embeddings=32)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    model.config.return_dict = False
    return model


def _saved(model: Any, args: tuple, factory: Any, name: str) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    """``model`` exported at the defaults and saved: (program, args, path)."""
    program = onnxsight.export(model, args)
    path = str(factory.mktemp(name) / f"{name}.onnx")
    program.save(path)
    return program, args, path


@pytest.fixture(scope="module")
def bert(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    model = _bert_model()
    return _saved(model, (torch.randint(0, 100, (1, 8)),), tmp_path_factory, "bert")


@pytest.fixture(scope="module")
def masked_bert(tmp_path_factory: Any) -> tuple[Any, onnxsight.ONNXProgram, tuple, str]:
    """BERT exported with (input_ids, attention_mask); the second sequence is padded after 5 tokens."""
    model = _bert_model()
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    return model, *_saved(model, (torch.randint(0, 100, (2, 8)), mask), tmp_path_factory, "masked_bert")


@pytest.fixture(scope="module")
def vit(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=16, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                    num_attention_heads=HEADS, intermediate_size=4 * HIDDEN)
    model = transformers.ViTModel(config, add_pooling_layer=False).eval()
    model.config.return_dict = False
    return _saved(model, (torch.randn(1, 3, 32, 32),), tmp_path_factory, "vit")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS)
    model = transformers.GPT2Model(config).eval()
    model.config.return_dict, model.config.use_cache = False, False
    return _saved(model, (torch.randint(0, 100, (2, 8)),), tmp_path_factory, "gpt2")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    """A small transformers LLaMA called with an ``attention_mask`` whose second sequence is padded after 5."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                      num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                      intermediate_size=4 * HIDDEN, max_position_embeddings=32)
    model = transformers.LlamaModel(config).eval()
    model.config.return_dict, model.config.use_cache = False, False
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 5:] = 0
    return _saved(model, (torch.randint(0, 100, (2, 8)), mask), tmp_path_factory, "llama")


class Encoder(nn.Module):
    """A user's own pre-LN encoder (ViT's layout): its lines are where a broken fusion is shown."""

    def __init__(self) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(HIDDEN) for _ in range(LAYERS + 1))
        self.q, self.k, self.v, self.out = (nn.ModuleList(nn.Linear(HIDDEN, HIDDEN) for _ in range(LAYERS))
                                            for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(LAYERS):
            h = self.norms[i](x)
            q, k, v = (p[i](h).view(*x.shape[:2], HEADS, -1).transpose(1, 2) for p in (self.q, self.k, self.v))
            attended = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # the line a fusion names
            x = x + self.out[i](attended.transpose(1, 2).reshape(x.shape))
        return self.norms[-1](x)


def _ort_optimized(path: str, model_type: str = "bert") -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        optimized = optimize_model(path, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN)
    return optimized.model


def _onnxscript_optimized(path: str) -> onnx.ModelProto:
    """onnxscript's ``optimize_for_ort`` at its defaults (what Olive and torch.onnx users run)."""
    ir = pytest.importorskip("onnx_ir")
    ort_fusions = pytest.importorskip("onnxscript.rewriter.ort_fusions")
    model, _ = ort_fusions.optimize_for_ort(ir.load(path))
    return ir.serde.serialize_model(model)


def _break_first_attention(model: onnx.ModelProto) -> None:
    """Scale the first fused Attention's packed weights by 1.5: a fusion that changes the numbers."""
    attention = next(n for n in model.graph.node if n.op_type == "Attention")
    weight = next(t for t in model.graph.initializer if t.name == attention.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))


def _assert_fused_and_verified(program: Any, args: tuple, fused: Any) -> None:
    """One ``Attention`` and two ``SkipLayerNormalization`` per layer, and the fused model verifies."""
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("Attention") == LAYERS
    assert ops.count("SkipLayerNormalization") >= 2 * LAYERS   # onnxscript: the embeddings' norm too
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert result.passed
    assert result.info["compared"] >= 2 * LAYERS  # the values that survive fusion are still compared


def test_ort_transformer_optimizer_fuses_attention_and_skip_layer_norms(bert: Any) -> None:
    program, args, path = bert
    fused = _ort_optimized(path)
    _assert_fused_and_verified(program, args, fused)


def test_a_broken_fusion_is_named_by_its_fused_op_and_the_nodes_it_replaced(bert: Any) -> None:
    program, args, path = bert
    fused = _ort_optimized(path)
    _break_first_attention(fused)
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert not result.passed
    (root,) = result.root_causes.itertuples()
    assert root.onnx_op == "Attention"
    assert root.value == "reshape_1"  # the first layer's attention output: the value the fused node makes
    diagnostic = next(d for d in result.diagnostics if d.code == "ACC002")
    assert "reshape_1 (aten.reshape.default -> Attention, which replaced 18 ONNX nodes (MatMul, Add, Reshape, " \
           "Transpose, Div, Softmax) of FX nodes linear, view, transpose," in diagnostic.message
    assert diagnostic.message.endswith("in encoder.layer.0.attention.self) is the first value to diverge: "
                                       f"max abs diff {diagnostic.properties['max_abs_diff']:.3g} while all its "
                                       "inputs match")
    replaced = diagnostic.properties["replaced_fx_nodes"]
    assert {"linear", "linear_1", "linear_2", "scaled_dot_product_attention", "reshape_1"} <= set(replaced)
    assert "Softmax _Softmax_" in " ".join(diagnostic.properties["replaced_onnx_nodes"])
    # the second layer's fused Attention is right: it is not named
    assert not any("encoder.layer.1" in d.message for d in result.diagnostics if d.code == "ACC002")


def test_a_broken_fusion_in_the_users_own_code_names_their_line(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model, args = Encoder().eval(), (torch.randn(1, 6, HIDDEN),)
    program = onnxsight.export(model, args, optimize="ort-fusion")   # a pre-LN block's biases as ORT fuses them
    program.save(tmp_path / "encoder.onnx")
    fused = _ort_optimized(str(tmp_path / "encoder.onnx"), "vit")
    assert [n.op_type for n in fused.graph.node].count("Attention") == LAYERS
    assert onnxsight.verify(program, args, onnx_model=fused).passed
    _break_first_attention(fused)
    result = onnxsight.verify(program, args, onnx_model=fused)
    diagnostic = next(d for d in result.diagnostics if d.code == "ACC002")
    line = next(i for i, text in enumerate(open(__file__), 1) if "# the line a fusion names" in text)
    assert re.search(rf"test_optimized_models\.py:(\d+, )*{line}\b", diagnostic.message), diagnostic.message
    assert "scaled_dot_product_attention" in diagnostic.properties["replaced_fx_nodes"]


@pytest.mark.parametrize("fixture", ["bert", "masked_bert", "vit"])
def test_onnxscript_fuses_one_attention_per_layer_and_the_fused_model_verifies(fixture: str, request: Any) -> None:
    program, args, path = request.getfixturevalue(fixture)[-3:]
    fused = _onnxscript_optimized(path)
    assert [n.op_type for n in fused.graph.node].count("BiasGelu") == LAYERS
    _assert_fused_and_verified(program, args, fused)


def test_onnxscript_fuses_gpt2_into_a_model_ort_runs_and_it_verifies(gpt2: Any) -> None:
    # GPT-2's Conv1D (view, addmm, view) is exported as MatMul + Add on the 3-D input: onnxscript's attention rule
    # takes the heads' merge for a 3-D Reshape and, with the Gemm form, fed its 3-D output to the 2-D Gemm
    import onnxruntime as ort

    program, args, path = gpt2
    assert "Gemm" not in {n.op_type for n in program.model_proto.graph.node}
    fused = _onnxscript_optimized(path)
    assert [n.op_type for n in fused.graph.node].count("MultiHeadAttention") == LAYERS
    ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert result.passed and result.info["compared"] >= 2 * LAYERS


def test_onnxscript_fuses_a_llama_with_an_attention_mask_and_the_fused_model_verifies(llama: Any) -> None:
    program, args, path = llama
    assert not any(d.code == "ONX008" for d in program.diagnostics)   # torch's guard kept, as torch.onnx writes it
    fused = _onnxscript_optimized(path)
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("MultiHeadAttention") == LAYERS and ops.count("SkipSimplifiedLayerNormalization") == 2 * LAYERS
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert result.passed and result.info["compared"] >= 2 * LAYERS


def test_ort_session_optimized_model_is_verified_per_node(bert: Any, tmp_path: Any) -> None:
    import onnxruntime as ort

    program, args, path = bert
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "session.onnx")
    ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    result = onnxsight.verify(program, args, onnx_model=str(tmp_path / "session.onnx"))
    assert result.passed
    assert result.info["compared"] > 0


def test_bert_with_an_attention_mask_fuses_one_attention_per_layer(masked_bert: Any) -> None:
    _, program, args, path = masked_bert
    assert any(d.code == "ONX008" for d in program.diagnostics)
    assert onnxsight.verify(program, args).passed
    fused = _ort_optimized(path)
    _assert_fused_and_verified(program, args, fused)


def test_a_mask_with_a_hole_is_exact_as_exported_and_named_where_ort_reads_it_as_a_length(masked_bert: Any) -> None:
    """ORT's fused BERT Attention takes the mask as a length per sequence (model_type="bert": ReduceSum of
    the mask): a padding token in the middle is attended to there. The exported model is exact."""
    _, program, (ids, mask), path = masked_bert
    holed = mask.clone()
    holed[0, 2] = 0
    assert onnxsight.verify(program, (ids, holed)).passed
    result = onnxsight.verify(program, (ids, holed), onnx_model=_ort_optimized(path))
    assert not result.passed
    (root,) = result.root_causes.itertuples()
    assert (root.value, root.onnx_op) == ("reshape_1", "Attention")


def test_a_sequence_of_padding_only_is_a_named_divergence_never_a_silent_one(masked_bert: Any) -> None:
    """torch gives zeros for a fully masked attention row; the exported model (and ORT's fused one) the mean of
    the values: verify names the first attention output, in the exported and in the fused model."""
    _, program, (ids, mask), path = masked_bert
    padding = mask.clone()
    padding[1] = 0
    exported = onnxsight.verify(program, (ids, padding))
    assert not exported.passed
    assert [r.value for r in exported.root_causes.itertuples()] == ["scaled_dot_product_attention"]
    fused = onnxsight.verify(program, (ids, padding), onnx_model=_ort_optimized(path))
    assert not fused.passed
    message = next(d.message for d in fused.diagnostics if d.code == "ACC002")
    assert message.startswith("reshape_1 (aten.reshape.default -> Attention, which replaced")
    assert "scaled_dot_product_attention" in next(d for d in fused.diagnostics
                                                  if d.code == "ACC002").properties["replaced_fx_nodes"]


class Transposed(nn.Module):
    """A transposed value read by a sum over both axes: the sum is the same in either layout."""

    def __init__(self, output_transposed: bool = False) -> None:
        super().__init__()
        self.output_transposed = output_transposed

    def forward(self, x: torch.Tensor) -> Any:
        t = (x * 2).transpose(1, 2)
        total = t.sum(dim=(1, 2))
        return (total, t) if self.output_transposed else total


def _transposed(output_transposed: bool = False) -> tuple[onnxsight.ONNXProgram, tuple, onnx.NodeProto]:
    args = (torch.randn(1, 3, 5),)
    program = onnxsight.export(Transposed(output_transposed).eval(), args)
    (transpose,) = (n for n in program.model_proto.graph.node if n.op_type == "Transpose")
    return program, args, transpose


def _relaid(program: onnxsight.ONNXProgram, transpose: onnx.NodeProto, fused: bool) -> onnx.ModelProto:
    """A copy whose Transpose keeps its output's name but not PyTorch's layout: ``fused``, an Identity stands in
    for it (a node the exported graph does not have, as a fusion's); else the exported node itself, perm undone."""
    model = onnx.ModelProto()
    model.CopyFrom(program.model_proto)
    node = next(n for n in model.graph.node if n.output[0] == transpose.output[0])
    if fused:
        node.CopyFrom(onnx.helper.make_node("Identity", [node.input[0]], [node.output[0]], name="fused"))
    else:
        next(a for a in node.attribute if a.name == "perm").ints[:] = [0, 1, 2]
    return model


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_a_fused_op_holding_a_value_in_another_layout_lists_it_and_compares_what_reads_it(mode: str) -> None:
    program, args, transpose = _transposed()
    result = onnxsight.verify(program, args, onnx_model=_relaid(program, transpose, fused=True), mode=mode)
    assert result.passed
    coverage = result.coverage.set_index("value")
    assert coverage.loc[transpose.output[0], "reason"] == \
        "held by Identity in another layout: [1, 3, 5], PyTorch [1, 5, 3]"
    assert not coverage.loc[transpose.output[0], "compared"]
    assert result.coverage_summary["held by a fused op in another layout"] == 1
    assert transpose.output[0] not in set(result.nodes["value"])
    assert result.outputs["passed"].astype(bool).all() and len(result.outputs) == 1  # the sum reading it


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_a_shape_mismatch_of_a_node_the_exported_graph_has_stays_an_error(mode: str) -> None:
    # the exported graph's own Transpose with another perm is a wrong model, never a value in another layout
    program, args, transpose = _transposed()
    result = onnxsight.verify(program, args, onnx_model=_relaid(program, transpose, fused=False), mode=mode)
    assert not result.passed
    assert list(result.root_causes["value"]) == [transpose.output[0]]
    assert result.root_causes["shape_mismatch"].astype(bool).all()
    assert "ACC004" in {d.code for d in result.diagnostics}
    assert not result.coverage["reason"].str.startswith("held by ").any()


def test_a_shape_mismatch_in_a_plain_verify_stays_an_error() -> None:
    program, args, transpose = _transposed()
    next(a for a in transpose.attribute if a.name == "perm").ints[:] = [0, 1, 2]  # the program's own model
    result = onnxsight.verify(program, args)
    assert not result.passed
    assert list(result.root_causes["value"]) == [transpose.output[0]]
    assert "ACC004" in {d.code for d in result.diagnostics}


def test_a_graph_output_a_fused_op_holds_in_another_layout_fails() -> None:
    program, args, transpose = _transposed(output_transposed=True)
    result = onnxsight.verify(program, args, onnx_model=_relaid(program, transpose, fused=True))
    assert not result.passed
    (missing,) = (d for d in result.diagnostics if d.code == "ACC009")
    assert "held by Identity in another layout: [1, 3, 5], PyTorch [1, 5, 3]" in missing.message
