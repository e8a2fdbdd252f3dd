"""The float32 ops torch.onnx exported and onnxsight did not (docs/op-parity.md, issue 12).

Each is held to torch.testing's default tolerances (op_tolerances.DTYPE_TOLERANCES), as the
parity sweep holds it: the OpInfo samples the sweep runs, then the cases they do not reach
(broadcasting, batches, NaN and edge values, windows that overlap, lengths that are not a
power of two).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight
from onnxsight import rules
from tests.exporter.ops.eager_check import FunctionModule
from tests.exporter.ops.op_tolerances import CURATED
from tests.exporter.ops.opinfo_harness import check_op, compare

aten = torch.ops.aten

# OpInfo name -> samples run (the sweep runs 3; more where the later samples reach other variants).
OPINFO: dict[str, int] = {
    "angle": 3, "complex": 3, "polar": 3, "histc": 8, "linalg.det": 6, "logdet": 6, "linalg.slogdet": 6,
    "fft.ifft": 4, "fft.hfft": 4, "fft.ihfft": 4, "fft.irfft": 4, "max_pool2d_with_indices_backward": 3,
}


@pytest.mark.parametrize("name", list(OPINFO))
def test_opinfo_at_default_tolerance(name: str) -> None:
    results = check_op(name, limit=OPINFO[name])
    failures = [r for r in results if r.status not in ("passed", "capture", "skipped")]
    assert any(r.status == "passed" for r in results), f"{name}: no sample passed: {results}"
    assert not failures, "\n".join(f"{r.op}[{r.index}] {r.status}: {r.detail}" for r in failures)


# float16/bfloat16 ops torch.onnx passed and onnxsight did not: IsInf takes half types only from opset 20
# (it was emitted on them at opset 18: ONX004), renorm's decomposition leaves prims.convert_element_type, and
# embedding_bag summed float16 rows with a ScatterND add ONNX Runtime's CPU provider has no kernel for.
HALF: dict[str, tuple[torch.dtype, ...]] = {
    "isinf": (torch.float16, torch.bfloat16), "isfinite": (torch.float16,),
    "logsumexp": (torch.float16,), "atan2": (torch.float16,), "expm1": (torch.float16,),
    "log1p": (torch.float16,), "logcumsumexp": (torch.float16,), "masked.logsumexp": (torch.float16,),
    "renorm": (torch.float16,), "nn.functional.embedding_bag": (torch.float16,),
}


@pytest.mark.parametrize("name,dtype", [(n, d) for n, dtypes in HALF.items() for d in dtypes])
def test_half_precision_opinfo_at_default_tolerance(name: str, dtype: torch.dtype) -> None:
    results = check_op(name, limit=3, dtype=dtype)
    failures = [r for r in results if r.status not in ("passed", "capture", "skipped")]
    assert any(r.status == "passed" for r in results), f"{name}: no sample passed: {results}"
    assert not failures, "\n".join(f"{r.op}[{r.index}] {r.status}: {r.detail}" for r in failures)


@pytest.mark.parametrize("name", ["isfinite", "logsumexp"])
def test_bfloat16_models_are_valid_where_onnx_runtime_has_no_kernel(name: str) -> None:
    # valid ONNX now (they failed the checker with ONX004); ONNX Runtime's CPU provider has no bfloat16
    # IsNaN/ReduceMax kernel, which the sweep counts as no-kernel, not as a failure of the export
    results = check_op(name, limit=3, dtype=torch.bfloat16)
    assert {r.status for r in results} <= {"no-kernel", "skipped"} and any(r.status == "no-kernel" for r in results)


@pytest.mark.parametrize("opset,casts", [(18, 1), (20, 0)])
def test_isinf_on_float16_is_widened_only_below_opset_20(opset: int, casts: int) -> None:
    module = FunctionModule(torch.isinf)
    x = torch.tensor([1.0, float("inf"), -float("inf"), float("nan"), 65504.0], dtype=torch.float16)
    program = onnxsight.export(module, (x,), opset_version=opset)
    ops = [node.op_type for node in program.model_proto.graph.node]
    assert ops.count("Cast") == casts and "IsInf" in ops
    assert program(x)[0].tolist() == [False, True, True, False, False]


def _check(fn: Callable[..., Any], *tensors: torch.Tensor) -> list[str]:
    """Export ``fn``, compare ONNX Runtime's outputs with eager at the default tolerance; the graph's op types."""
    module = FunctionModule(fn)
    expected = [t for t in pytree.tree_leaves(module(*tensors)) if isinstance(t, torch.Tensor)]
    program = onnxsight.export(module, tensors)
    actual = program(*tensors)
    assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        problem = compare(want, got)
        assert not problem, f"output {index}: {problem}\nexpected {want}\ngot      {got}"
    return [node.op_type for node in program.model_proto.graph.node]


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


EDGES = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan"), float("inf"), -float("inf"), -1e-30])

CASES: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...]]] = {
    # angle of a real tensor: pi below zero, 0 otherwise (-0.0 included), NaN stays NaN
    "angle_edges": (torch.angle, (EDGES,)),
    "angle_plus": (lambda x: torch.angle(x) + x, (_randn(3, 4),)),
    "angle_complex": (lambda a, b: torch.angle(torch.complex(a, b)), (_randn(3, 4), _randn(3, 4, seed=1))),
    # complex/polar build (real, imaginary) pairs; broadcasting as torch
    "complex_broadcast": (lambda a, b: torch.view_as_real(torch.complex(a, b)), (_randn(4, 1), _randn(3))),
    "complex_abs": (lambda a, b: torch.complex(a, b).abs(), (_randn(2, 3), _randn(2, 3, seed=1))),
    "complex_output": (lambda a, b: torch.complex(a, b) * 2, (_randn(2, 3), _randn(1, 3, seed=1))),
    "polar_broadcast": (lambda r, t: torch.view_as_real(torch.polar(r, t)), (_randn(2, 1).abs(), _randn(5) * 4)),
    "polar_product": (lambda r, t: (torch.polar(r, t) * torch.polar(t.abs(), r)).abs(),
                      (_randn(3, 4).abs(), _randn(3, 4, seed=1))),
    # histc: explicit range (values outside it and on both edges), the data's range, a constant input
    "histc_range": (lambda x: torch.histc(x, bins=7, min=-1.0, max=1.5),
                    (torch.cat([_randn(50), torch.tensor([-1.0, 1.5, 2.0, -3.0])]),)),
    "histc_data_range": (lambda x: torch.histc(x, bins=10), (_randn(4, 25) * 3,)),
    "histc_constant": (lambda x: torch.histc(x, bins=4), (torch.full((6,), 2.5),)),
    "histc_one_bin": (lambda x: torch.histc(x, bins=1, min=0, max=1), (_randn(20).abs(),)),
    # determinants: batched, singular, 1x1, a negative determinant's log is NaN
    "det_batched": (torch.linalg.det, (_randn(2, 3, 4, 4),)),
    "det_singular": (torch.linalg.det, (torch.tensor([[1.0, 2.0], [2.0, 4.0]]),)),
    "det_one": (torch.linalg.det, (_randn(3, 1, 1),)),
    "slogdet": (torch.linalg.slogdet, (_randn(3, 5, 5),)),
    "logdet_signs": (torch.logdet, (torch.stack([torch.eye(3) * 2, torch.diag(torch.tensor([-1.0, 2.0, 3.0]))]),)),
    # det itself overflows float32 here (|det| near 1e90); torch's logabsdet, a sum of logs, does not
    "slogdet_large": (torch.linalg.slogdet, (_randn(2, 60, 60) * 10,)),
    "slogdet_zero_row": (torch.linalg.slogdet, (torch.tensor([[1.0, 2.0], [0.0, 0.0]]),)),
    # complex conjugates from the FFTs of real inputs
    "ifft_real": (lambda x: torch.fft.ifft(x), (_randn(3, 10),)),
    "ifft_view_as_real": (lambda x: torch.view_as_real(torch.fft.ifft(x, n=16, norm="forward").resolve_conj()),
                          (_randn(3, 10),)),
    "hfft_odd": (lambda x: torch.fft.hfft(x, n=9), (_randn(4, 5),)),
    "ihfft_dim0": (lambda x: torch.fft.ihfft(x, dim=0, norm="ortho"), (_randn(11, 3),)),
    "conj_physical": (lambda x: torch.view_as_real(torch.conj_physical(torch.fft.rfft(x))), (_randn(2, 8),)),
    "resolve_conj": (lambda x: torch.view_as_real(torch.conj(torch.fft.fft(x)).resolve_conj()), (_randn(2, 6),)),
    # the inverse real DFT of lengths that are not a power of two, at float32's tolerance
    "irfft_12_ortho": (lambda x: torch.fft.irfft(x, norm="ortho"), (_randn(5, 6, 7) * 9,)),
    "irfft_10_dim1": (lambda x: torch.fft.irfft(x, n=10, dim=1, norm="ortho"), (_randn(5, 6, 7, seed=2) * 9,)),
    "irfft_30_complex_bins": (lambda x: torch.fft.irfft(torch.view_as_complex(x), n=30), (_randn(2, 16, 2) * 9,)),
    "irfft_500_dim0": (lambda x: torch.fft.irfft(x, n=500, dim=0), (_randn(251, 3) * 9,)),
    # ... and over several dims: the complex inverses over the others are static lengths too
    "irfft2_12x7": (lambda x: torch.fft.irfft2(torch.view_as_complex(x)), (_randn(12, 7, 2) * 9,)),
    "hfft2_10x6": (lambda x: torch.fft.hfft2(x, s=(10, 9), norm="ortho"), (_randn(3, 10, 6) * 9,)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_case(case: str) -> None:
    fn, tensors = CASES[case]
    _check(fn, *tensors)


def _pool_backward(kernel: list[int], stride: list[int], padding: list[int], dilation: list[int],
                   ceil_mode: bool) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor, grad_scale: torch.Tensor) -> torch.Tensor:
        out, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
        grad = out * grad_scale
        return aten.max_pool2d_with_indices_backward(grad, x, kernel, stride, padding, dilation, ceil_mode, indices)
    return fn


POOLS: dict[str, tuple[tuple[list[int], list[int], list[int], list[int], bool], tuple[int, ...]]] = {
    "overlapping": (([3, 3], [1, 1], [0, 0], [1, 1], False), (2, 3, 6, 7)),   # one input is many windows' max
    "padded": (([3, 3], [2, 2], [1, 1], [1, 1], False), (1, 2, 7, 7)),
    "dilated_ceil": (([2, 3], [2, 1], [0, 1], [2, 1], True), (2, 1, 8, 9)),
    "no_batch": (([2, 2], [2, 2], [0, 0], [1, 1], False), (3, 4, 6)),
}


def _pool3d_backward(x: torch.Tensor, grad_scale: torch.Tensor) -> torch.Tensor:
    out, indices = aten.max_pool3d_with_indices(x, [2, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1], False)
    return aten.max_pool3d_with_indices_backward(out * grad_scale, x, [2, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1],
                                                 False, indices)


@pytest.mark.parametrize("pool", list(POOLS))
def test_max_pool2d_backward(pool: str) -> None:
    arguments, shape = POOLS[pool]
    x = _randn(*shape)
    grad_scale = _randn(*shape[:-2], 1, 1, seed=1)
    assert "ScatterElements" in _check(_pool_backward(*arguments), x, grad_scale)


def test_max_pool3d_backward() -> None:
    assert "ScatterElements" in _check(_pool3d_backward, _randn(2, 3, 4, 5, 4), _randn(2, 3, 1, 1, 1, seed=1))


# Static lengths run as a MatMul with a float64 basis (ops/_dft_basis.py); symbolic lengths, and
# those whose basis passes 2**20 elements, run ONNX's DFT, whose float32 error (about 5e-7 of the
# output's scale for these powers of two, _dft_basis.py's NOTE) is why those two compare at CURATED.
DFT_CHOICE: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int, bool]] = {
    "rfft_static": (lambda x: torch.view_as_real(torch.fft.rfft(x)), 100, False),
    "fft_static": (lambda x: torch.view_as_real(torch.fft.fft(x.to(torch.complex64))), 100, False),
    "irfft_static": (lambda x: torch.fft.irfft(torch.fft.rfft(x), n=100), 100, False),
    "rfft_long": (lambda x: torch.view_as_real(torch.fft.rfft(x)), 2048, True),
    "fft_long": (lambda x: torch.view_as_real(torch.fft.fft(x.to(torch.complex64))), 1024, True),
}


@pytest.mark.parametrize("case", list(DFT_CHOICE))
def test_dft_basis_or_onnx_dft(case: str) -> None:
    fn, length, onnx_dft = DFT_CHOICE[case]
    x = _randn(2, length)
    program = onnxsight.export(FunctionModule(fn), (x,))
    op_types = {node.op_type for node in program.model_proto.graph.node}
    assert ("DFT" in op_types) == onnx_dft and ("MatMul" in op_types) != onnx_dft
    problem = compare(fn(x), program(x)[0], tolerance=CURATED if onnx_dft else None)
    assert not problem, problem


# OPS010 names the FFTs left to ONNX's DFT at a length that is not a power of two (or symbolic).
OPS010_CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], int, bool, bool]] = {
    # name: (fn, length, dynamic length, warned)
    "rfft_basis": (lambda x: torch.fft.rfft(x).abs(), 100, False, False),
    "rfft_long_odd": (lambda x: torch.fft.rfft(x).abs(), 1100, False, True),
    "rfft_long_power_of_two": (lambda x: torch.fft.rfft(x).abs(), 2048, False, False),
    "fft_dynamic": (lambda x: torch.fft.fft(x).abs(), 64, True, True),
    "irfft_long_odd": (lambda x: torch.fft.irfft(x, n=1500), 751, False, True),
    "stft_dynamic_samples": (lambda x: torch.stft(x, 16, return_complex=True).abs(), 200, True, False),
}


class _OneInput(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@pytest.mark.parametrize("case", list(OPS010_CASES))
def test_ops010_names_ffts_left_to_onnx_dft(case: str) -> None:
    fn, length, dynamic, warned = OPS010_CASES[case]
    dims = {"x": {1: torch.export.Dim("t", min=32, max=4096)}} if dynamic else None
    program = onnxsight.export(_OneInput(fn), (_randn(2, length),), dynamic_shapes=dims)
    found = [d for d in program.diagnostics if d.rule is rules.IMPRECISE_RUNTIME_DFT]
    assert bool(found) == warned, [str(d) for d in program.diagnostics]
    op_types = {node.op_type for node in program.model_proto.graph.node}
    assert ("DFT" in op_types) == (warned or length == 2048)
    if found:
        assert "aten._fft_" in found[0].message and "dim 1 of length" in found[0].message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_max_pool2d_half_types(dtype: torch.dtype) -> None:
    """MaxPool takes no bfloat16 and ScatterElements(add) no half type in ONNX Runtime: both run in float32."""
    x = _randn(2, 3, 6, 7).to(dtype)
    _check(lambda x: aten.max_pool2d_with_indices(x, [3, 3], [1, 1], [0, 0], [1, 1], False)[0], x)
    if dtype == torch.float16:   # (bfloat16: ONNX Runtime has no bfloat16 Mul for the gradient)
        _check(_pool_backward([3, 3], [1, 1], [0, 0], [1, 1], False), x, _randn(2, 3, 1, 1, seed=1).to(dtype))


# A dynamic batch: shapes taken at run time (Expand, the MatMul basis's Reshapes, Det, the scatter).
DYNAMIC: dict[str, tuple[Callable[[torch.Tensor], Any], tuple[int, ...]]] = {
    "complex": (lambda x: torch.view_as_real(torch.complex(x, x.flip(-1))), (3, 5)),
    "polar": (lambda x: torch.view_as_real(torch.polar(x.abs(), x)), (3, 5)),
    "angle": (lambda x: torch.angle(x), (3, 5)),
    "det": (torch.linalg.det, (3, 4, 4)),
    "slogdet": (torch.linalg.slogdet, (3, 4, 4)),
    "histc_data_range": (lambda x: torch.histc(x, bins=6), (3, 5)),
    "ifft": (lambda x: torch.view_as_real(torch.fft.ifft(x).resolve_conj()), (3, 10)),
    "hfft2": (lambda x: torch.fft.hfft2(x), (3, 6, 5)),
    "max_pool2d_backward": (lambda x: _pool_backward([2, 2], [1, 1], [0, 0], [1, 1], False)(x, x.new_ones(())),
                            (3, 2, 5, 6)),
}


@pytest.mark.parametrize("case", list(DYNAMIC))
def test_dynamic_batch(case: str) -> None:
    fn, shape = DYNAMIC[case]
    module = _OneInput(fn)
    program = onnxsight.export(module, (_randn(*shape),), dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    for batch in (2, 5):
        x = _randn(batch, *shape[1:], seed=batch)
        expected = [t for t in pytree.tree_leaves(module(x)) if isinstance(t, torch.Tensor)]
        for index, (want, got) in enumerate(zip(expected, program(x), strict=True)):
            problem = compare(want, got)
            assert not problem, f"batch {batch}, output {index}: {problem}"
