"""Opset-23 graphs (the standard's ``Attention``) in ONNX Runtime's transformer optimizer.

ORT's symbolic shape inference (``onnxruntime/tools/symbolic_shape_infer.py``, run by ``optimize_model``) looks
its shape functions up by op type alone: ONNX's own ``Attention`` (domain ``""``, opset 23) goes to the one of
ORT's contrib ``com.microsoft.Attention``, whose third input is a 1-D bias, and fails an assertion on the
4-D ``V``; the optimizer then fuses no ``SkipLayerNormalization``. Nothing in the graph can avoid it (the script
drops the graph's value_info and dispatches by op type), so docs/optimization.md documents ORT's bug and the
optimizer's ``enable_shape_inference=False`` fusion option, which these tests hold to: the residual norms fuse
two per layer and the fused model matches PyTorch per node. ``optimize="ort-fusion"`` at opset 23 writes
attention and RMS norms as before opset 23, which ORT's optimizer fuses into its own ops as it does at opset 18.
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Any

import pytest
import torch

import onnxsight

HIDDEN, HEADS, LAYERS = 32, 4, 2


def _bert() -> tuple[Any, tuple]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, max_position_embeddings=32, num_hidden_layers=LAYERS,
                                     hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=4 * HIDDEN)
    model = transformers.BertModel(config, add_pooling_layer=False)
    model.config.return_dict = False
    return model.eval(), (torch.randint(0, 100, (2, 8)),)


@pytest.fixture(scope="module")
def bert23(tmp_path_factory: Any) -> tuple[Any, tuple, Any, str]:
    """A 2-layer BERT exported at opset 23 (one ONNX Attention per layer), saved."""
    pytest.importorskip("onnxruntime")
    model, args = _bert()
    program = onnxsight.export(model, args, opset_version=23)
    path = str(tmp_path_factory.mktemp("opset23") / "bert23.onnx")
    program.save(path)
    return model, args, program, path


def _optimize(path: str, model_type: str = "bert", opt_level: int | None = None, **fusion: Any) -> Any:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions(model_type)
    for name, value in fusion.items():
        setattr(options, name, value)
    with contextlib.redirect_stdout(io.StringIO()):
        return optimize_model(path, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN,
                              optimization_options=options, opt_level=opt_level)


def _ops(model: Any) -> Counter:
    return Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node)


def _matches_pytorch(model: Any, args: tuple, program: Any, fused: Any) -> None:
    """The fused model per node (onnxsight.verify) and its output against eager PyTorch."""
    import onnxruntime as ort

    result = onnxsight.verify(program, args, onnx_model=fused)
    assert result.passed, result.root_causes
    session = ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})[0]
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), model(*args)[0], rtol=1e-4, atol=1e-4)


def test_the_default_export_holds_onnx_attention(bert23: tuple) -> None:
    ops = _ops(bert23[2].model_proto)
    assert ops[("ai.onnx", "Attention")] == LAYERS, ops


def test_ort_shape_inference_takes_onnx_attention_for_its_contrib_op(bert23: tuple) -> None:
    """Pins ORT's bug as docs/optimization.md describes it: when this fails, ORT has fixed it; update the docs."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    graph = bert23[2].model_proto.graph
    declared = {v.name for v in graph.value_info if v.type.tensor_type.HasField("shape")}
    assert all(n.output[0] in declared for n in graph.node if n.op_type == "Attention")   # the script drops them
    with pytest.raises(AssertionError) as caught:
        SymbolicShapeInference.infer_shapes(onnx.load(bert23[3]), auto_merge=True)
    assert caught.traceback[-1].name == "_infer_Attention"
    fused = Counter(n.op_type for n in _optimize(bert23[3]).model.graph.node)
    assert fused["SkipLayerNormalization"] == 0, fused


def test_without_ort_shape_inference_the_residual_norms_fuse_and_match_pytorch(bert23: tuple) -> None:
    model, args, program, path = bert23
    fused = _optimize(path, enable_shape_inference=False).model
    ops = _ops(fused)
    assert ops[("com.microsoft", "SkipLayerNormalization")] == 2 * LAYERS, ops
    assert ops[("ai.onnx", "Attention")] == LAYERS, ops   # the standard's op, kept as exported
    _matches_pytorch(model, args, program, fused)


def _ort_fusion_23(model: Any, args: tuple, tmp_path: Any) -> tuple[Any, str]:
    program = onnxsight.export(model, args, opset_version=23, optimize="ort-fusion")
    assert program.model_proto.opset_import[0].version == 23
    path = str(tmp_path / "model.onnx")
    program.save(path)
    return program, path


def test_ort_fusion_at_opset_23_gets_ort_attention_and_skip_layer_norms(tmp_path: Any) -> None:
    pytest.importorskip("onnxruntime")
    model, args = _bert()
    program, path = _ort_fusion_23(model, args, tmp_path)
    assert ("ai.onnx", "Attention") not in _ops(program.model_proto)
    fused = _optimize(path).model
    ops = _ops(fused)
    assert ops[("com.microsoft", "Attention")] == LAYERS, ops
    assert ops[("com.microsoft", "SkipLayerNormalization")] == 2 * LAYERS, ops
    _matches_pytorch(model, args, program, fused)


def test_ort_fusion_at_opset_23_gets_llama_attention_and_skip_rms_norms(tmp_path: Any) -> None:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                      num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                      intermediate_size=2 * HIDDEN, max_position_embeddings=32)
    model = transformers.LlamaModel(config)
    model.config.use_cache, model.config.return_dict = False, False
    model.eval()
    args = (torch.randint(0, 100, (1, 8)),)
    program, path = _ort_fusion_23(model, args, tmp_path)
    exported = _ops(program.model_proto)
    assert ("ai.onnx", "Attention") not in exported and ("ai.onnx", "RMSNormalization") not in exported, exported
    fused = _optimize(path, model_type="gpt2", opt_level=0).model
    ops = _ops(fused)
    assert ops[("com.microsoft", "MultiHeadAttention")] == LAYERS, ops
    assert ops[("com.microsoft", "SkipSimplifiedLayerNormalization")] == 2 * LAYERS, ops
    _matches_pytorch(model, args, program, fused)


def test_a_users_translation_still_wins_over_the_ort_fusion_forms() -> None:
    from onnxsight.exporter.ops import attention

    model, args = _bert()
    table = {torch.ops.aten.scaled_dot_product_attention.default: attention.aten_scaled_dot_product_attention_23}
    program = onnxsight.export(model, args, opset_version=23, optimize="ort-fusion", custom_translations=table)
    assert _ops(program.model_proto)[("ai.onnx", "Attention")] == LAYERS


class NormAndAttention(torch.nn.Module):
    """F.rms_norm and causal sdpa called directly: opset 23's RMSNormalization and Attention at the defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
        return (torch.nn.functional.rms_norm(x, (16,), self.weight, 1e-6),
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))


@pytest.mark.parametrize("optimize, standard", [(True, 1), ("ort-fusion", 0)])
def test_ort_fusion_translates_the_ops_themselves_as_before_opset_23(optimize: Any, standard: int) -> None:
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    args = (torch.randn(2, 5, 16), *(torch.randn(1, 2, 5, 8) for _ in range(3)))
    program = onnxsight.export(NormAndAttention(), args, opset_version=23, optimize=optimize)
    ops = _ops(program.model_proto)
    assert ops[("ai.onnx", "RMSNormalization")] == ops[("ai.onnx", "Attention")] == standard, ops
    assert onnxsight.verify(program, args).passed
