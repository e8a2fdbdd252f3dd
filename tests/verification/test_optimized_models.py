"""Optimised models verified against PyTorch with the same per-node engine: ONNX Runtime's transformer optimizer
and its session-level optimisation, values paired by name where they survive, a broken fusion named."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import onnx
import pytest
import torch
from onnx import numpy_helper

import onnxsight

LAYERS, HIDDEN, HEADS = 2, 64, 4


@pytest.fixture(scope="module")
def bert(tmp_path_factory: Any) -> tuple[onnxsight.ONNXProgram, tuple, str]:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                     num_attention_heads=HEADS, intermediate_size=4 * HIDDEN,
                                     max_position_embeddings=32)
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    model.config.return_dict = False
    args = (torch.randint(0, 100, (1, 8)),)
    program = onnxsight.export(model, args)
    path = str(tmp_path_factory.mktemp("bert") / "bert.onnx")
    program.save(path)
    return program, args, path


def _ort_optimized(path: str) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        optimized = optimize_model(path, model_type="bert", num_heads=HEADS, hidden_size=HIDDEN)
    return optimized.model


def test_ort_transformer_optimizer_fuses_attention_and_skip_layer_norms(bert: Any) -> None:
    program, args, path = bert
    fused = _ort_optimized(path)
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("Attention") == LAYERS
    assert ops.count("SkipLayerNormalization") == 2 * LAYERS
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert result.passed
    assert result.info["compared"] >= 2 * LAYERS  # the values that survive fusion are still compared


def test_a_broken_fusion_is_named_by_its_fused_op(bert: Any) -> None:
    program, args, path = bert
    fused = _ort_optimized(path)
    attention = next(n for n in fused.graph.node if n.op_type == "Attention")
    weight = next(t for t in fused.graph.initializer if t.name == attention.input[1])
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * 1.5, weight.name))
    result = onnxsight.verify(program, args, onnx_model=fused)
    assert not result.passed
    (root,) = result.root_causes.itertuples()
    assert root.onnx_op == "Attention"
    assert root.value == "reshape_1"  # the first layer's attention output: the value the fused node makes
    message = next(d.message for d in result.diagnostics if d.code == "ACC002")
    assert "Attention" in message and "reshape_1" in message


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
