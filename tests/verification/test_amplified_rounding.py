"""A value whose every input matched within tolerance but which differs beyond it, while its ONNX nodes fed
PyTorch's exact inputs give PyTorch's value: the op amplifies its inputs' rounding (a half-precision LLaMA's
float32 ``rsqrt`` of a variance computed from float16 hidden states). That is no translation error (ACC014,
a warning, not ACC002), the run passes when every graph output matches, and a real error in the same op is
still ACC002."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import onnxsight
from onnxsight.exporter.ops.elementwise_math import _unary

transformers = pytest.importorskip("transformers")


def _half_llama() -> tuple[Any, tuple]:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                      intermediate_size=128, num_hidden_layers=2, vocab_size=100,
                                      max_position_embeddings=64)
    return transformers.LlamaModel(config).eval().half(), (torch.randint(0, 100, (1, 8)),)


def _codes(result: Any) -> list[str]:
    return [d.code for d in result.diagnostics]


def test_a_half_precision_llama_verifies_and_names_the_amplifying_ops(tmp_path: Any) -> None:
    model, args = _half_llama()
    prog = onnxsight.export(model, args, str(tmp_path / "m.onnx"))
    result = onnxsight.verify(prog)
    assert result.passed, [str(d) for d in result.diagnostics]
    assert "ACC002" not in _codes(result)
    amplified = [d for d in result.diagnostics if d.code == "ACC014"]
    assert amplified, "the float32 rsqrt of a float16 model's variance differs beyond float32 tolerance"
    assert all("rsqrt" in str(d) and "PyTorch's inputs" in str(d) for d in amplified), [str(d) for d in amplified]
    # every graph output was compared and matched: the excuse never covers an output
    outputs = result.nodes[result.nodes["value"].isin(list(result.output_names))]
    assert len(outputs) == len(result.output_names) and outputs["passed"].all()


def test_a_wrong_rsqrt_in_the_same_model_is_still_the_root_cause(tmp_path: Any) -> None:
    def wrong_rsqrt(b: Any, self: Any) -> Any:  # 2 % off: wrong on PyTorch's own inputs too
        scaled = b.op("Mul", self, b.scalar(1.02, self))
        return b.op("Reciprocal", _unary(b, "Sqrt", scaled))

    model, args = _half_llama()
    prog = onnxsight.export(model, args, str(tmp_path / "m.onnx"),
                            custom_translations={torch.ops.aten.rsqrt.default: wrong_rsqrt})
    result = onnxsight.verify(prog)
    assert not result.passed
    roots = [d for d in result.diagnostics if d.code == "ACC002"]
    assert roots and "rsqrt" in str(roots[0]), [str(d) for d in result.diagnostics]
    # the wrong op is never excused: it is wrong on PyTorch's own inputs too
    assert not [d for d in result.diagnostics if d.code == "ACC014" and "rsqrt" in str(d)]
