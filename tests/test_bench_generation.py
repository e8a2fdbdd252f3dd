"""``bench/generation.py``'s parts that need no model: torch.onnx's inputs and outputs renamed to onnxsight's by
position, the medians and the table (a tool that does not export is a cell saying so)."""

from __future__ import annotations

import os
import sys
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import generation  # noqa: E402


def _step(inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [i], [o]) for i, o in zip(inputs, outputs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1]) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_torch_onnx_names_become_onnxsights_by_position(tmp_path: Any) -> None:
    path = str(tmp_path / "step.onnx")
    onnx.save(_step(["input_ids", "cache_0"], ["linear_14", "cat_3"]), path)
    generation._rename_like(path, _step(["input_ids", "past_key_values.0.key"], ["logits", "present.0.key"]))
    model = onnx.load(path)
    assert [i.name for i in model.graph.input] == ["input_ids", "past_key_values.0.key"]
    assert [o.name for o in model.graph.output] == ["logits", "present.0.key"]
    assert [list(n.input) + list(n.output) for n in model.graph.node] == [
        ["input_ids", "logits"], ["past_key_values.0.key", "present.0.key"]]
    with pytest.raises(ValueError, match="2 inputs and 2 outputs, onnxsight's 1 and 2"):
        generation._rename_like(path, _step(["input_ids"], ["logits", "present.0.key"]))


def test_table_and_medians() -> None:
    assert generation.median_spread([1.0, 2.0, 3.0]) == (2.0, 1.0)
    row = {"model": "t5", "notes": {"torch.onnx": "does not export: ConversionError: ..."},
           "eager": {"per_token_ms": (10.0, 0.1), "prompt_ms": (20.0, 0.1)},
           "onnxsight": {"per_token_ms": (2.5, 0.25), "prompt_ms": (8.0, 0.1)},
           "onnxsight/eager": (0.25, 0.2, 0.3)}
    line = generation.table([row]).splitlines()[-1]
    assert line == ("| t5 | 10.00 ±10% | 2.50 ±25% | does not export: ConversionError: ... | - | 0.25 (0.20-0.30) "
                    "| 20.00 / 8.00 |")
