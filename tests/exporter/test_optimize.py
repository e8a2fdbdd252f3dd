"""The optimize stage: a lean graph (weights in the layout their op reads, no Identity/Constant nodes, constant
masks folded, redundant pairs merged) that computes the same values, with the verifier still pairing them."""

from __future__ import annotations

import json
import operator
from collections import Counter
from typing import Any

import onnx
import pytest
import torch
from torch import nn

import onnxsight
from onnxsight.exporter import OPTIMIZED_AWAY_KEY


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.drop, self.down = nn.Linear(8, 16), nn.Dropout(0.1), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.drop(torch.nn.functional.gelu(self.up(x))))


class MaskedAttention(nn.Module):
    """sdpa with a bool mask built inside forward from sizes known at export; ``dead_row`` masks one query row
    entirely (torch gives zeros there)."""

    def __init__(self, dead_row: bool) -> None:
        super().__init__()
        self.dead_row = dead_row
        self.qkv = nn.Linear(16, 48)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool)
        if self.dead_row:  # query 0 attends to nothing
            mask = mask & (torch.arange(x.shape[1]) > 0)[:, None]
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _ops(program: onnxsight.ONNXProgram) -> Counter:
    return Counter(n.op_type for n in program.model_proto.graph.node)


def _optimized_away(model: onnx.ModelProto) -> dict[str, str]:
    entry = next((e.value for e in model.metadata_props if e.key == OPTIMIZED_AWAY_KEY), "{}")
    return json.loads(entry)


def _export(model: nn.Module, args: tuple, **options: Any) -> onnxsight.ONNXProgram:
    torch.manual_seed(0)
    return onnxsight.export(model.eval(), args, **options)


def test_linear_weights_are_stored_transposed_and_the_graph_is_smaller() -> None:
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(2, 5, 8)
    lean, plain = _export(model, (x,)), _export(model, (x,), optimize=False)
    assert _ops(plain)["Transpose"] == 2 and _ops(plain)["Identity"] >= 1 and _ops(plain)["Constant"] >= 1
    ops = _ops(lean)
    assert not {"Transpose", "Identity", "Constant"} & set(ops)
    assert len(lean.model_proto.graph.node) < len(plain.model_proto.graph.node)
    weights = {t.name: t for t in lean.model_proto.graph.initializer}
    assert list(weights["up.weight.T"].dims) == [8, 16] and "up.weight" not in weights
    torch.testing.assert_close(lean(x)[0], model(x))
    assert lean.record.stages[[s.name for s in lean.record.stages].index("optimize")].detail.startswith(
        f"{len(plain.model_proto.graph.node)} -> {len(lean.model_proto.graph.node)} nodes")


def test_every_fx_value_is_held_by_an_onnx_value_or_listed_as_optimised_away() -> None:
    model, x = Mlp(), torch.randn(2, 5, 8)
    program = _export(model, (x,))
    graph = program.model_proto.graph
    held = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {o for n in graph.node
                                                                                   for o in n.output}
    away = _optimized_away(program.model_proto)
    for node in program.exported_program.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        name = program.value_names[node.name]
        assert name in held or name in away, f"{node.name} -> {name} is neither in the graph nor listed"
    # the dropout (an Identity in eval) is held by the value it copied, and compared through it
    assert program.value_names["dropout"] == "gelu"
    result = onnxsight.verify(program, (x,))
    assert result.passed
    assert set(result.nodes["value"]) >= {"gelu", "linear_1"}
    coverage = result.coverage.set_index("fx_node")["reason"]
    assert coverage["dropout"] == "compared"


def test_a_constant_mask_that_masks_no_row_is_folded_away_with_its_guard() -> None:
    x = torch.randn(2, 6, 16)
    model = MaskedAttention(dead_row=False)
    program = _export(model, (x,))
    ops = _ops(program)
    assert "TopK" not in ops and "Where" not in ops and "Equal" not in ops, ops
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-5, atol=1e-5)
    assert onnxsight.verify(program, (x,)).passed


def test_a_constant_mask_with_a_fully_masked_row_keeps_torch_zeros() -> None:
    x = torch.randn(2, 6, 16)
    model = MaskedAttention(dead_row=True)
    program = _export(model, (x,))
    assert "IsNaN" in _ops(program)  # the guard stays (as torch.onnx writes it): that row is all -inf
    expected = model(x)
    assert torch.all(expected[:, :, 0] == 0)
    torch.testing.assert_close(program(x)[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("external_data", [False, True])
def test_saved_lean_model_runs_and_keeps_small_constants_in_the_model(tmp_path: Any, external_data: bool) -> None:
    import onnxruntime as ort

    model, x = Mlp().eval(), torch.randn(2, 5, 8)
    program = _export(model, (x,))
    path = tmp_path / "m.onnx"
    program.save(path, external_data=external_data)
    loaded = onnx.load(path, load_external_data=False)
    external = {t.name for t in loaded.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    assert ("up.weight.T" in external) == external_data
    assert not any(t.name.startswith("_const") for t in loaded.graph.initializer if t.name in external)
    out = ort.InferenceSession(str(path)).run(None, {"x": x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), model(x), rtol=1e-5, atol=1e-5)


def test_fake_export_saved_with_a_checkpoint_transposes_its_weights(tmp_path: Any) -> None:
    import onnxruntime as ort

    torch.manual_seed(1)
    real, x = Mlp().eval(), torch.randn(2, 5, 8)
    with onnxsight.fake_mode():
        fake = Mlp().eval()
    program = onnxsight.export(fake, (x,))
    assert "up.weight.T" in program.initializers
    path = tmp_path / "m.onnx"
    program.save(path, weights=real.state_dict())
    out = ort.InferenceSession(str(path)).run(None, {"x": x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), real(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value", ["fast", 2, None])
def test_an_optimize_value_that_is_no_choice_is_refused_naming_the_choices(value: Any) -> None:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Mlp().eval(), (torch.randn(2, 8),), optimize=value)
    [diagnostic] = [d for d in info.value.diagnostics if d.code == "ARG005"]
    assert diagnostic.message == f"invalid value for optimize: expected True, False or 'ort-fusion', got {value!r}"


class BFloat16Slopes(nn.Module):
    """Falcon's and Bloom's ALiBi: slopes computed in the graph, rounded to bfloat16 (a constant subgraph)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        slopes = torch.pow(2.0, -torch.arange(1, 5, dtype=torch.float32) / 3)
        return x * (slopes.to(torch.bfloat16) * 8).to(x.dtype)   # folded through bfloat16 values


def test_a_constant_subgraph_rounded_to_bfloat16_is_folded() -> None:
    x = torch.randn(2, 4)
    program = _export(BFloat16Slopes(), (x,))
    assert _ops(program) == Counter({"Mul": 1}), _ops(program)  # every constant folded, bfloat16 steps included
    (constant,) = [onnx.numpy_helper.to_array(i) for i in program.model_proto.graph.initializer]
    expected = (torch.pow(2.0, -torch.arange(1, 5, dtype=torch.float32) / 3).to(torch.bfloat16) * 8).float()
    assert constant.tolist() == expected.tolist()   # rounded to bfloat16 as eager rounds it
    assert onnxsight.verify(program, (x,)).passed
