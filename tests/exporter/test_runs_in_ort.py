"""Exported models load and run in ONNX Runtime at every opset they claim, and match eager; or the
export fails with a named rule. Never a model that ONNX Runtime refuses, nor a silently changed shape.

Each row: a model, its inputs, the opsets; the check exports, runs ``onnx.checker`` (full), loads the
model in ONNX Runtime, runs it and compares every output with eager PyTorch.
"""

from __future__ import annotations


import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import onnxsight
from onnxsight.exporter.check._type_constraints import find_violations

OPSETS = tuple(range(15, 26))  # 15, 16: converted from 17 (translate/_downgrade.py)


class Fn(torch.nn.Module):
    def __init__(self, fn, **kwargs) -> None:  # noqa: ANN001
        super().__init__()
        self.fn, self.kwargs = fn, kwargs

    def forward(self, *args: torch.Tensor):  # noqa: ANN201
        return self.fn(*args, **self.kwargs)


def _types_ok(model: onnx.ModelProto) -> None:
    inferred = onnx.shape_inference.infer_shapes(model)
    opsets = {o.domain or "": o.version for o in model.opset_import}
    assert find_violations(inferred.graph, opsets) == []


def runs_and_matches(model: torch.nn.Module, args: tuple, opset: int, *, dynamic_shapes=None,  # noqa: ANN001
                     others: tuple = ()) -> onnxsight.ONNXProgram:
    """Export at ``opset``, check, load, run in ORT and compare with eager (on ``args`` and ``others``)."""
    if dynamic_shapes is not None and isinstance(model, Fn):
        dynamic_shapes = (tuple(dynamic_shapes),)          # Fn.forward takes them as one *args
    prog = onnxsight.export(model, args, opset_version=opset, dynamic_shapes=dynamic_shapes)
    proto = prog.model_proto
    onnx.checker.check_model(proto, full_check=True)
    _types_ok(proto)
    assert {o.domain or "": o.version for o in proto.opset_import}[""] == opset
    for inputs in (args, *others):
        expected = model(*inputs)
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        actual = prog(*inputs)
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            got = torch.as_tensor(got)
            assert tuple(got.shape) == tuple(want.shape), f"shape {tuple(got.shape)} vs eager {tuple(want.shape)}"
            assert got.dtype == want.dtype
            tol = {torch.float16: 2e-3, torch.float32: 1e-5, torch.float64: 1e-7}.get(want.dtype, 0)
            torch.testing.assert_close(got, want, atol=tol, rtol=tol, equal_nan=True)
    return prog


def loads_in_ort(prog: onnxsight.ONNXProgram) -> None:
    onnx.checker.check_model(prog.model_proto, full_check=True)
    _types_ok(prog.model_proto)
    ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])


# -- activations whose ONNX op lacks the dtype (Celu: float32 only; bfloat16 only from opset 22) ------
ACTIVATIONS = {
    "celu": lambda x: F.celu(x),
    "celu_alpha": lambda x: F.celu(x, alpha=2.0),
    "elu": lambda x: F.elu(x, alpha=0.7),
    "selu": F.selu,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "mish": F.mish,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "prelu": lambda x: F.prelu(x, torch.tensor([0.25], dtype=x.dtype)),
    "rrelu_eval": lambda x: F.rrelu(x, training=False),
}
RUNNABLE_DTYPES = (torch.float64, torch.float16, torch.float32)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", RUNNABLE_DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_runs_in_its_dtype(name: str, dtype: torch.dtype, opset: int) -> None:
    x = torch.linspace(-4, 4, 24, dtype=torch.float64).reshape(4, 6).to(dtype)
    runs_and_matches(Fn(ACTIVATIONS[name]), (x,), opset)


# prelu and rrelu are left out: torch expands prelu's weight (rrelu's noise) first, and ONNX Runtime
# has no bfloat16 Expand kernel (a shape op, not an activation).
@pytest.mark.parametrize("opset", (17, 21, 22, 23))
@pytest.mark.parametrize("name", sorted(set(ACTIVATIONS) - {"prelu", "rrelu_eval"}))
def test_activation_bfloat16_loads(name: str, opset: int) -> None:
    loads_in_ort(onnxsight.export(Fn(ACTIVATIONS[name]), (torch.randn(4, 6).bfloat16(),), opset_version=opset))


# -- opset-23 Attention with every mask torch broadcasts ------------------------------------------
B, H, L, S, E = 2, 4, 5, 6, 8
_PAD = torch.ones(B, 1, 1, S, dtype=torch.bool)
_PAD[1, ..., 3:] = False
_DEAD_ROW = torch.ones(L, S, dtype=torch.bool)
_DEAD_ROW[2] = False
MASKS = {
    "float_b11s": torch.randn(B, 1, 1, S),
    "bool_b11s_padding": _PAD,
    "float_1s": torch.randn(1, S),
    "float_ls": torch.randn(L, S),
    "bool_ls": torch.rand(L, S) > 0.3,
    "float_hls": torch.randn(H, L, S),
    "float_bhls": torch.randn(B, H, L, S),
    "float_b1l1": torch.randn(B, 1, L, 1),
    "bool_all_masked_row": _DEAD_ROW,
}


def _sdpa(q, k, v, mask=None, **kwargs):  # noqa: ANN001, ANN202
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("mask", sorted(MASKS))
def test_sdpa_mask_runs_in_ort(mask: str, opset: int) -> None:
    q, k, v = torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, H, S, E)
    runs_and_matches(Fn(_sdpa), (q, k, v, MASKS[mask]), opset)


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("q_len", (L, S, S + 2))
def test_sdpa_causal_runs_in_ort(q_len: int, opset: int) -> None:
    q, k = torch.randn(B, H, q_len, E), torch.randn(B, H, S, E)
    runs_and_matches(Fn(_sdpa, is_causal=True), (q, k, k.clone()), opset)


@pytest.mark.parametrize("opset", (18, 23))
def test_sdpa_broadcast_mask_with_dynamic_batch(opset: int) -> None:
    q, k, mask = torch.randn(B, H, L, E), torch.randn(B, H, S, E), torch.randn(B, 1, 1, S)
    batch = Dim("batch", min=1, max=16)
    others = ((torch.randn(3, H, L, E), torch.randn(3, H, S, E), torch.randn(3, H, S, E), torch.randn(3, 1, 1, S)),)
    runs_and_matches(Fn(_sdpa), (q, k, k.clone(), mask), opset, others=others,
                     dynamic_shapes=({0: batch}, {0: batch}, {0: batch}, {0: batch}))


class MHA(torch.nn.Module):
    def __init__(self, with_attn_mask: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
        self.with_attn_mask = with_attn_mask

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        causal = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), 1) if self.with_attn_mask else None
        return self.mha(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)[0]


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("with_attn_mask", (False, True), ids=("key_padding_mask", "key_padding_and_causal"))
def test_multihead_attention_key_padding_mask(with_attn_mask: bool, opset: int) -> None:
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    runs_and_matches(MHA(with_attn_mask).eval(), (torch.randn(2, 7, 16), padding), opset)


# -- arange with float bounds and a dtype: torch's length and values ---------------------------------
ARANGE = [
    ((0.5, 4.5, 0.5), torch.float32), ((0.5, 4.5, 0.5), torch.float16), ((0.5, 4.5, 0.5), torch.float64),
    ((0, 1.0, 0.1), torch.float16), ((0.1, 1.0, 0.1), torch.float32), ((1, 0, -0.3), torch.float32),
    ((-0.5, 4), torch.int64), ((-0.5, 4), torch.int32), ((0.5, 4.5), torch.int64), ((2.5,), torch.int64),
    ((-2.5, 3.7, 1.5), torch.int32), ((0.5, 4.5, 1.5), torch.int8), ((0.5, 4.5, 1.5), torch.int16),
    ((4.5, -0.5, -1.5), torch.int32), ((0, 10, 3), torch.float32),
]


class Arange(torch.nn.Module):
    def __init__(self, bounds: tuple, dtype: torch.dtype) -> None:
        super().__init__()
        self.bounds, self.dtype = bounds, dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.arange(*self.bounds, dtype=self.dtype) + x.to(self.dtype)


@pytest.mark.parametrize("bounds, dtype", ARANGE, ids=[f"{b}-{d}" for b, d in ARANGE])
def test_arange_float_bounds(bounds: tuple, dtype: torch.dtype) -> None:
    runs_and_matches(Arange(bounds, dtype), (torch.zeros((), dtype=dtype),), 18)


SYMBOLIC_ARANGE = {
    "int32_from_float": lambda x: torch.arange(-0.5, x.shape[0] + 0.25, dtype=torch.int32),
    "int64_from_float": lambda x: torch.arange(-0.5, x.shape[0] + 0.25, dtype=torch.int64),
    "float16_half_steps": lambda x: torch.arange(0.5, x.shape[0] * 0.5 + 0.5, 0.5, dtype=torch.float16),
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC_ARANGE))
def test_arange_symbolic_float_bounds(name: str) -> None:
    runs_and_matches(Fn(SYMBOLIC_ARANGE[name]), (torch.randn(9),), 18,
                     dynamic_shapes=({0: Dim("n", min=2, max=64)},), others=((torch.randn(4),), (torch.randn(13),)))


# -- refusals with a named rule -----------------------------------------------------------------
NO_TENSOR_OUTPUTS = {
    "python_numbers": (lambda x: (x.shape[0] * 2, 3.0), ["[0] = 4", "[1] = 3.0"]),
    "one_number": (lambda x: x.shape[0] + 1, ["output = 3"]),
    "nothing": (lambda x: None, ["output = None"]),
}


@pytest.mark.parametrize("name", sorted(NO_TENSOR_OUTPUTS))
def test_model_without_tensor_outputs_is_refused(name: str, tmp_path) -> None:
    fn, shown = NO_TENSOR_OUTPUTS[name]
    path = tmp_path / "m.onnx"
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Fn(fn), (torch.randn(2),), path)
    codes = [d.code for d in info.value.diagnostics if d.level.name == "ERROR"]
    assert codes == ["IO006"]
    message = next(d.message for d in info.value.diagnostics if d.code == "IO006")
    assert all(part in message for part in shown), message
    assert not path.exists()                               # a graph with zero outputs is never written


def _celu_as_is(b, x, alpha=1.0):  # noqa: ANN001, ANN202 - a custom translation that ignores Celu's float32-only T
    return b.op("Celu", x, alpha=float(alpha))


class CeluTwice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.celu(x) * 2                               # the line ONX004 must point at


def test_type_constraint_violation_is_onx004_at_the_users_line() -> None:
    line = CeluTwice.forward.__code__.co_firstlineno + 1
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(CeluTwice(), (torch.randn(3, dtype=torch.float64),),
                         custom_translations={torch.ops.aten.celu.default: _celu_as_is})
    found = [d for d in info.value.diagnostics if d.code == "ONX004"]
    assert len(found) == 1
    assert "Celu" in found[0].message and "tensor(double)" in found[0].message and "tensor(float)" in found[0].message
    assert found[0].location.file == __file__ and found[0].location.line == line


def test_schema_check_walks_subgraphs() -> None:
    inner = onnx.helper.make_graph([onnx.helper.make_node("Celu", ["x"], ["y"])], "body", [],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, [2])])
    outer = onnx.helper.make_graph(
        [onnx.helper.make_node("If", ["c"], ["out"], then_branch=inner, else_branch=inner)], "g",
        [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
         onnx.helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [2])],
        [onnx.helper.make_tensor_value_info("out", onnx.TensorProto.DOUBLE, [2])])
    found = find_violations(outer, {"": 18})
    inputs = [(v.node.op_type, v.dtype) for v in found if v.role == "input"]
    assert inputs == [("Celu", "tensor(double)")] * 2      # then_branch and else_branch


class _BFloat16Out(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (x * 2).to(torch.bfloat16), y.float() + 1


def test_a_program_with_bfloat16_inputs_and_outputs_runs() -> None:
    """InferenceSession.run cannot return bfloat16: prog(...) goes through OrtValues for it."""
    import onnxsight

    x, y = torch.randn(3), torch.randn(3, dtype=torch.bfloat16)
    prog = onnxsight.export(_BFloat16Out(), (x, y))
    got, expected = prog(x, y), _BFloat16Out()(x, y)
    assert got[0].dtype == torch.bfloat16 and torch.equal(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
