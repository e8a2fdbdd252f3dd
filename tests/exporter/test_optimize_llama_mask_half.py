"""A half-precision LLaMA called with an ``attention_mask`` (batch and sequence dynamic, or static),
``optimize="ort-fusion"``:
the causal and padding mask is written with the dtype's own lowest as fill (float16's -65504, bfloat16's
-3.39e38: not float32's, which float16 cannot hold, and not -inf, which gives NaN in ORT's fused attention), the
note ONX008 names that dtype, ONNX Runtime's optimizer fuses one ``MultiHeadAttention`` per layer, and the float16
graph matches eager PyTorch at the positions that are not padding, unfused and fused, on ONNX Runtime's CPU
provider. ONNX Runtime 1.32.0's CPU provider does not run bfloat16 (``Mul`` has no bfloat16 kernel there): the
bfloat16 export is checked for its structure only."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import onnxsight
from tests.exporter.test_optimize_llama_dynamic import LAYERS, _fused, _stats
from tests.exporter.test_optimize_llama_mask import _model, _padded

DIMS = {0: "batch", 1: "seq"}
LEFT_PADDED = [(3, 6, [0, 2, 5]), (1, 12, [4]), (2, 9, [0, 8])]


@pytest.fixture(scope="module", params=[(torch.float16, True), (torch.bfloat16, True), (torch.float16, False),
                                        (torch.bfloat16, False)],
                ids=["float16", "bfloat16", "float16-static", "bfloat16-static"])
def half(request: Any, tmp_path_factory: Any) \
        -> tuple[torch.dtype, torch.nn.Module, onnxsight.ONNXProgram, Any, list[tuple[int, int, list[int]]]]:
    dtype, dynamic = request.param
    model = _model().to(dtype)
    mask = _padded(2, 8, [0, 3], left=False)
    program = onnxsight.export(model, (torch.randint(0, 100, (2, 8)), mask), optimize="ort-fusion",
                               dynamic_shapes={"input_ids": DIMS, "attention_mask": DIMS} if dynamic else None)
    path = str(tmp_path_factory.mktemp("llama-mask-half") / "model.onnx")
    program.save(path)
    sizes = LEFT_PADDED if dynamic else [(2, 8, [0, 5]), (2, 8, [7, 1])]
    return dtype, model, program, _fused(path), sizes


def _mask_fills(proto: onnx.ModelProto) -> list[tuple[int, float]]:
    """(elem type, value) of every scalar float constant a ``Where`` selects as its second input: the masks' fills."""
    constants = {t.name: t for t in proto.graph.initializer}
    fills = []
    for node in proto.graph.node:
        tensor = constants.get(node.input[1]) if node.op_type == "Where" else None
        if tensor is not None and tensor.data_type != onnx.TensorProto.BOOL and not tensor.dims:
            fills.append((tensor.data_type, float(numpy_helper.to_array(tensor).astype(np.float32))))
    return fills


def test_the_mask_fill_is_the_dtypes_lowest(half: Any) -> None:
    dtype, _, program, _, _ = half
    elem = onnx.TensorProto.FLOAT16 if dtype == torch.float16 else onnx.TensorProto.BFLOAT16
    assert _mask_fills(program.model_proto) == [(elem, torch.finfo(dtype).min)]
    assert not {"TopK", "ReduceMax"} & {n.op_type for n in program.model_proto.graph.node}   # no guard left


def test_onx008_names_the_dtype_and_its_lowest(half: Any) -> None:
    dtype, _, program, _, _ = half
    notes = [str(d) for d in program.diagnostics if d.code == "ONX008"]
    name = str(dtype).removeprefix("torch.")
    assert len(notes) == 1 and f"{name}'s lowest {torch.finfo(dtype).min:.8g}" in notes[0]
    assert f"{LAYERS} attention(s)" in notes[0] and "attention_mask" in notes[0]


def test_a_half_precision_llama_fuses_one_attention_per_layer(half: Any) -> None:
    _, _, _, fused, _ = half
    stats = _stats(fused)
    assert stats["MultiHeadAttention"] == LAYERS
    assert stats["RotaryEmbedding"] == 2 * LAYERS


def _session(proto: onnx.ModelProto) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


def _compare(model: torch.nn.Module, run: Any, sizes: list[tuple[int, int, list[int]]]) -> None:
    """``run``'s float16 outputs against eager PyTorch's at the positions that are not padding, left-padded batches.

    NOTE: both are float16 computations rounded in another order (ORT's MatMul, Softmax and the RMS norms' float32
    parts are not PyTorch's), so they agree to a few float16 steps, not exactly: float16 has 11 significant bits,
    a step of 2**-9 (0.002) for outputs between 2 and 4, and the outputs here reach about 4. The bound is 4 such
    steps (8e-3); and the graph must be no further from the float32 model's outputs (the same weights) than eager
    float16 is, within one step: it may round otherwise, not worse."""
    reference = _model()   # the same seed: the float32 weights the float16 model was rounded from
    for batch, length, pads in sizes:
        ids, mask = torch.randint(0, 100, (batch, length)), _padded(batch, length, pads, left=True)
        got = run({"input_ids": ids.numpy(), "attention_mask": mask.numpy()}).astype(np.float32)
        with torch.no_grad():
            eager = model(ids, attention_mask=mask)[0].float().numpy()
            exact = reference(ids, attention_mask=mask)[0].numpy()
        valid = mask.bool().numpy()
        assert np.isfinite(got).all()   # a padded query row attends to no key: an average, not NaN
        np.testing.assert_allclose(got[valid], eager[valid], rtol=0, atol=8e-3)
        step = 2.0 ** -9
        assert np.abs(got - exact)[valid].max() <= np.abs(eager - exact)[valid].max() + step


def test_the_float16_graph_matches_pytorch_at_valid_positions_on_cpu(half: Any) -> None:
    dtype, model, program, _, sizes = half
    if dtype != torch.float16:
        pytest.skip("ONNX Runtime 1.32.0's CPU provider runs no bfloat16 Mul")
    session = _session(program.model_proto)
    _compare(model, lambda feeds: session.run(None, feeds)[0], sizes)


def test_the_fused_float16_model_runs_on_cpu_once_its_rotary_caches_are_float16(half: Any) -> None:
    # ONNX Runtime 1.32.0's FusionRotaryEmbeddings writes its cos/sin caches in float32 whatever the model's dtype
    # (create_cos_sin_cache_from_on_the_fly_rope), so RotaryEmbedding's T is bound to float16 and float32 and the
    # fused model does not load; cast to float16, the caches make a model ORT's CPU provider runs
    dtype, model, program, fused, sizes = half
    if dtype != torch.float16:
        pytest.skip("ONNX Runtime 1.32.0's CPU provider runs no bfloat16 Mul")
    caches = {t.name: t for t in fused.model.graph.initializer if t.name in ("cos_cache", "sin_cache")}
    assert {t.data_type for t in caches.values()} == {onnx.TensorProto.FLOAT}
    with pytest.raises(Exception, match="RotaryEmbedding"):
        _session(fused.model)
    repaired = onnx.ModelProto()
    repaired.CopyFrom(fused.model)
    for tensor in repaired.graph.initializer:
        if tensor.name in caches:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), tensor.name))
    session = _session(repaired)
    _compare(model, lambda feeds: session.run(None, feeds)[0], sizes)
    # per node too, on a mask without fully masked rows, judged against PyTorch's own float16 rounding (the
    # float64 noise floor): the outputs differ from float16 PyTorch by float16 rounding (up to 0.0039, two steps,
    # on elements near zero), beyond the plain float16 atol of 1e-3
    args = (torch.randint(0, 100, (2, 8)), _padded(2, 8, [0, 3], left=False))
    for onnx_model in (None, repaired):
        result = onnxsight.verify(program, args, onnx_model=onnx_model, reference="float64")
        assert result.passed, [str(d) for d in result.diagnostics if d.level.name == "ERROR"]
        assert {d.code for d in result.diagnostics} & {"ACC002", "ACC001"} == set()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("masked", [True, False], ids=["mask", "no-mask"])
def test_a_static_half_precision_step_over_a_cache_fuses(dtype: torch.dtype, masked: bool,
                                                         tmp_path_factory: Any) -> None:
    # bfloat16's causal mask is left unfolded by the constant folding: the pass evaluates it to check it
    from tests.exporter.test_optimize_llama_mask import _cache

    model, cache = _model(cache=True).to(dtype), _cache(2, 5)
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
    inputs = {"input_ids": torch.randint(0, 100, (2, 3)), "cache": cache}
    if masked:
        inputs["attention_mask"] = _padded(2, 8, [0, 2], left=True)
    program = onnxsight.export(model, (), kwargs=inputs, optimize="ort-fusion")
    path = str(tmp_path_factory.mktemp("llama-cache-half") / "model.onnx")
    program.save(path)
    attention = [n for n in _fused(path).model.graph.node if n.op_type == "MultiHeadAttention"]
    assert [list(n.input[6:8]) for n in attention] == \
        [[f"past_key_values.{i}.key", f"past_key_values.{i}.value"] for i in range(LAYERS)]
    if masked:
        assert {fill for _, fill in _mask_fills(program.model_proto)} == {torch.finfo(dtype).min}
