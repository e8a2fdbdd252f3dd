"""F.interpolate's output sizes exactly as torch computes them (issue 13), with eager's values.

torch sizes an upsampled axis as floor(in * scale) in double and ONNX Runtime, given
float32 ``scales``, as floor(float32(in) * scale) in float32: 30 x 2.1 is 63 in torch and
62 in ONNX Runtime. Each case exports, runs in ONNX Runtime and compares shape (exactly),
and values (nearest: equal; linear/cubic: float32 tolerance) with eager, static and with
dynamic spatial dims run at several sizes.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import onnxsight
from onnxsight.exporter.ops import _resize_exact as exact
from tests.exporter.ops.op_tolerances import CURATED

RTOL, ATOL = CURATED.rtol, CURATED.atol

MODES = {1: ["nearest", "linear"], 2: ["nearest", "bilinear", "bicubic"], 3: ["nearest", "trilinear"]}


class Interpolate(torch.nn.Module):
    def __init__(self, **kwargs: object) -> None:
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, **self.kwargs)


class Aten(torch.nn.Module):
    """Calls an upsample overload directly (the ``.default`` forms take torch's output_size)."""

    def __init__(self, op: object, *args: object) -> None:
        super().__init__()
        self.op, self.args = op, args

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, *self.args)


def _assert_matches(module: torch.nn.Module, program: onnxsight.ONNXProgram, x: torch.Tensor, exact_values: bool) -> None:
    with torch.no_grad():
        want = module(x)
    got = program(x)[0]
    assert tuple(got.shape) == tuple(want.shape), f"input {tuple(x.shape)}: ONNX {tuple(got.shape)}, torch {tuple(want.shape)}"
    if exact_values:
        assert torch.equal(got, want), f"input {tuple(x.shape)}: {int((got != want).sum())} elements differ"
    else:  # the op tests' float32 tolerance; a scale moved by an ulp shifts samples by ~1e-7 of a pixel
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def _x(spatial: tuple[int, ...]) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(1, 2, *spatial)


# (in size, scale): floor(in * scale) in float32 and in double differ for the first ones.
DIFFERING = [(30, 2.1), (50, 2.3), (45, 1.4), (60, 1.05)]
# 7 x 1.3 -> 9: in/out (Resize's mapping with sizes) is not 1/1.3, torch's mapping.
ORDINARY = [(7, 1.3), (6, 2.0), (9, 0.5), (20, 0.35)]


@pytest.mark.parametrize("in_size,scale", DIFFERING)
def test_the_table_cases_do_differ_in_float32(in_size: int, scale: float) -> None:
    assert exact.torch_output_size(in_size, scale) != exact.ort_output_size(in_size, np.float32(scale))


CASES = [(dims, mode, ac, n, s) for dims, modes in MODES.items() for mode in modes
         for ac in ([False] if mode == "nearest" else [False, True]) for n, s in DIFFERING + ORDINARY
         if dims < 3 or n < 46]


@pytest.mark.parametrize("dims,mode,align_corners,in_size,scale", CASES)
def test_static_scale_factor(dims: int, mode: str, align_corners: bool, in_size: int, scale: float) -> None:
    kwargs = dict(scale_factor=scale, mode=mode) | ({} if mode == "nearest" else dict(align_corners=align_corners))
    module, x = Interpolate(**kwargs), _x((in_size,) * dims)
    program = onnxsight.export(module, (x,))
    _assert_matches(module, program, x, exact_values=mode == "nearest")
    # ONNX's shape inference computes floor(in * scale) in double, ONNX Runtime in float32: both must agree
    assert [d.message for d in program.diagnostics if d.code == "ONX002"] == []


DYNAMIC = [(dims, mode, ac, s) for dims, modes in MODES.items() for mode in modes if dims < 3 or mode == "nearest"
           for ac in ([False] if mode == "nearest" else [False, True]) for s in (2.1, 2.3, 1.4, 1.3, 0.35, 2.0)]


@pytest.mark.parametrize("dims,mode,align_corners,scale", DYNAMIC)
def test_dynamic_scale_factor(dims: int, mode: str, align_corners: bool, scale: float) -> None:
    kwargs = dict(scale_factor=scale, mode=mode) | ({} if mode == "nearest" else dict(align_corners=align_corners))
    module = Interpolate(**kwargs)
    dims_spec = {2 + i: torch.export.Dim(f"d{i}", min=6, max=64) for i in range(dims)}
    program = onnxsight.export(module, (_x((12,) * dims),), dynamic_shapes=(dims_spec,))
    sizes = [30, 50, 45, 60, 7, 13] if dims < 3 else [30, 45, 7]
    for n in sizes:
        _assert_matches(module, program, _x((n,) * dims), exact_values=mode == "nearest")


@pytest.mark.parametrize("mode,align_corners", [("nearest", None), ("bilinear", False), ("bilinear", True),
                                                 ("bicubic", False)])
@pytest.mark.parametrize("size", [(63, 9), (5, 7), (12, 1)])
def test_size_static_and_dynamic(mode: str, align_corners: bool | None, size: tuple[int, int]) -> None:
    module = Interpolate(size=size, mode=mode, align_corners=align_corners)
    x = _x((30, 7))
    _assert_matches(module, onnxsight.export(module, (x,)), x, exact_values=mode == "nearest")
    h, w = torch.export.Dim("h", min=2, max=64), torch.export.Dim("w", min=2, max=64)
    program = onnxsight.export(module, (x,), dynamic_shapes=({2: h, 3: w},))
    for shape in [(30, 7), (7, 30), (9, 13)]:
        _assert_matches(module, program, _x(shape), exact_values=mode == "nearest")


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_recompute_scale_factor(mode: str) -> None:
    module = Interpolate(scale_factor=2.1, mode=mode, recompute_scale_factor=True)
    h = torch.export.Dim("h", min=3, max=64)
    program = onnxsight.export(module, (_x((12, 12)),), dynamic_shapes=({2: h, 3: h},))
    for n in [30, 7, 10]:
        _assert_matches(module, program, _x((n, n)), exact_values=mode == "nearest")


aten = torch.ops.aten
DEFAULTS = [
    (aten.upsample_nearest2d.default, ([63, 15], 2.1, 2.1)),
    (aten.upsample_nearest2d.default, ([9, 15], None, None)),
    (aten.upsample_bilinear2d.default, ([63, 14], False, 2.1, 2.1)),
    (aten.upsample_bilinear2d.default, ([63, 15], True, None, None)),
    (aten.upsample_bicubic2d.default, ([63, 14], False, 2.1, 2.1)),
    (aten.upsample_nearest1d.default, ([63], 2.1)),
    (aten.upsample_linear1d.default, ([63], False, 2.1)),
    (aten.upsample_nearest2d.vec, ([63, 15], None)),
    (aten.upsample_bilinear2d.vec, ([63, 15], False, None)),
]


@pytest.mark.parametrize("op,args", DEFAULTS, ids=lambda v: str(v) if not isinstance(v, tuple) else None)
def test_default_overloads_keep_torch_output_size(op: object, args: tuple) -> None:
    module = Aten(op, *args)
    x = _x((30,) if "1d" in str(op) else (30, 7))
    _assert_matches(module, onnxsight.export(module, (x,)), x, exact_values="nearest" in str(op))


# -- the float32 arithmetic _resize_exact assumes of ONNX Runtime, checked against it -------------------------------
def _resize_session(kind: str) -> ort.InferenceSession:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "n"])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT if kind == "scales" else TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, "m"])
    inputs = ["x", "", "s"] if kind == "scales" else ["x", "", "", "s"]
    node = helper.make_node("Resize", inputs, ["y"], mode="nearest", coordinate_transformation_mode="asymmetric",
                            nearest_mode="floor")
    model = helper.make_model(helper.make_graph([node], "g", [x, s], [y]), opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_onnxruntime_computes_sizes_and_nearest_indices_as_assumed() -> None:
    by_scales, by_sizes = _resize_session("scales"), _resize_session("sizes")
    for in_size in range(1, 41):
        x = np.arange(in_size, dtype=np.float32).reshape(1, 1, in_size)
        for scale in [0.35, 0.7, 1.1, 1.3, 1.7, 2.1, 2.3, 2.9, 1 / 3]:
            for scale32 in exact.scale_candidates(scale)[:3]:
                got = by_scales.run(None, {"x": x, "s": np.array([1, 1, scale32], np.float32)})[0]
                assert got.shape[2] == exact.ort_output_size(in_size, scale32), (in_size, float(scale32))
        for out_size in range(1, 90):
            got = by_sizes.run(None, {"x": x, "s": np.array([1, 1, out_size], np.int64)})[0]
            assert np.array_equal(got[0, 0].astype(np.int64), exact.ort_nearest_indices(in_size, out_size))


NEAREST = {1: aten.upsample_nearest1d.default, 2: aten.upsample_nearest2d.default, 3: aten.upsample_nearest3d.default}


@pytest.mark.parametrize("dims", [1, 2, 3])
@pytest.mark.parametrize("in_size,out_size,scale", [(10, 10, 1.01), (10, 20, 2.05), (7, 9, 1.3), (30, 63, 2.1)])
def test_nearest_indices_are_torchs(dims: int, in_size: int, out_size: int, scale: float | None) -> None:
    for axis in range(dims):
        shape = [1] * dims
        shape[axis] = in_size
        x = torch.arange(in_size, dtype=torch.float32).reshape(1, 1, *shape).repeat(
            2, 3, *[1 if a == axis else 4 for a in range(dims)])
        sizes = [out_size if a == axis else 4 for a in range(dims)]
        got = NEAREST[dims](x, sizes, *[scale if a == axis else 1.0 for a in range(dims)])
        want = got[(1, 2, *[slice(None) if a == axis else 0 for a in range(dims)])].long().numpy()
        assert np.array_equal(exact.torch_nearest_indices(in_size, out_size, scale, shortcuts=dims == 2), want)


class ToSizeOf(torch.nn.Module):
    """The U-Net pattern: upsample to the (dynamic) size of a skip connection."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, size=skip.shape[-2:], mode=self.mode) + skip


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_size_of_another_dynamic_input(mode: str) -> None:
    module = ToSizeOf(mode)
    h, w, sh, sw = (torch.export.Dim(n, min=2, max=64) for n in ("h", "w", "sh", "sw"))
    program = onnxsight.export(module, (_x((5, 6)), _x((11, 13))),
                               dynamic_shapes=({2: h, 3: w}, {2: sh, 3: sw}))
    for small, big in [((5, 6), (11, 13)), ((7, 30), (9, 63)), ((30, 7), (63, 15))]:
        x, skip = _x(small), _x(big)
        with torch.no_grad():
            want = module(x, skip)
        got = program(x, skip)[0]
        assert tuple(got.shape) == tuple(want.shape)
        if mode == "nearest":
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("in_size,scale", [(20, 0.35), (30, 2.1), (50, 2.3), (45, 1.4), (7, 1.3)])
def test_onnx_shape_inference_computes_sizes_in_double(in_size: int, scale: float) -> None:
    for scale32 in exact.scale_candidates(scale)[:3]:
        scales = helper.make_tensor("s", TensorProto.FLOAT, [3], [1.0, 1.0, float(scale32)])
        node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, in_size])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[scales])
        model = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
        inferred = model.graph.output[0].type.tensor_type.shape.dim[2].dim_value
        assert inferred == exact.double_output_size(in_size, scale32), (in_size, float(scale32))


def test_a_scale_within_a_few_ulps_gives_torchs_size_in_both_arithmetics() -> None:
    scales = [k / 20 for k in range(1, 100)] + [2.1, 1.3, 1 / 3, 2 / 3, 1.15]
    missing = [(n, s) for n in range(1, 400) for s in scales
               if exact.exact_scale32(n, exact.torch_output_size(n, s), s) is None]
    assert missing == []
