"""Drive op tests from PyTorch's OpInfo database.

For each OpInfo sample: wrap the call in a tiny module (tensors become
inputs, everything else is baked in), export it with onnxsight, run it in ONNX
Runtime and compare with eager. Used by the per-family tests (a curated list
each, run by `make test`) and by `coverage.py` (every OpInfo, `make test-ops`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree

import onnxsight
from onnxsight.exporter import CaptureError

DTYPE = torch.float32
ATOL, RTOL = 1e-4, 1e-3


@functools.lru_cache(maxsize=1)
def opinfo_table() -> dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    table: dict[str, Any] = {}
    for info in op_db:
        key = info.name + (f".{info.variant_test_name}" if info.variant_test_name else "")
        table.setdefault(key, info)
    return table


class OpModule(torch.nn.Module):
    """Calls ``op(*args, **kwargs)`` with the tensors taken from forward()'s inputs."""

    def __init__(self, op: Any, spec: pytree.TreeSpec, leaves: list[Any]) -> None:
        super().__init__()
        self.op, self.spec, self.leaves = op, spec, leaves

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        leaves = [next(it) if isinstance(leaf, torch.Tensor) else leaf for leaf in self.leaves]
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.op(*args, **kwargs)


@dataclasses.dataclass
class SampleResult:
    op: str
    index: int
    status: str            # passed | capture | export | runtime | mismatch
    detail: str = ""


def samples(info: Any, limit: int, dtype: torch.dtype = DTYPE) -> Iterator[Any]:
    if dtype not in info.dtypes:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
            if index >= limit:
                return
            yield sample


def run_sample(name: str, info: Any, index: int, sample: Any, *, opset: int | None = None) -> SampleResult:
    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
    if not tensors or any(t.numel() == 0 for t in tensors) or any(t.is_complex() for t in tensors):
        return SampleResult(name, index, "skipped", "no tensor inputs, empty or complex tensors")
    module = OpModule(info.op, spec, leaves)
    try:
        expected = module(*tensors)
    except Exception as exc:  # noqa: BLE001
        return SampleResult(name, index, "skipped", f"eager failed: {exc}")
    try:
        program = onnxsight.export(module, tuple(tensors), opset_version=opset)
    except CaptureError as exc:
        return SampleResult(name, index, "capture", str(exc).splitlines()[0])
    except onnxsight.ExportError as exc:
        return SampleResult(name, index, "export", str(exc)[:400])
    try:
        actual = program(*tensors)
    except Exception as exc:  # noqa: BLE001
        return SampleResult(name, index, "runtime", f"{type(exc).__name__}: {str(exc)[:300]}")
    expected_flat = [t for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)]
    if len(expected_flat) != len(actual):
        return SampleResult(name, index, "mismatch", f"{len(actual)} outputs, expected {len(expected_flat)}")
    for i, (want, got) in enumerate(zip(expected_flat, actual)):
        problem = compare(want, got)
        if problem:
            return SampleResult(name, index, "mismatch", f"output {i}: {problem}")
    return SampleResult(name, index, "passed")


def compare(want: torch.Tensor, got: torch.Tensor) -> str:
    want = want.detach()
    if tuple(want.shape) != tuple(got.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if want.dtype != got.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.is_floating_point:
        if not torch.allclose(got.to(want.dtype), want, atol=ATOL, rtol=RTOL, equal_nan=True):
            diff = (got.double() - want.double()).abs()
            diff = diff[~torch.isnan(diff)]
            return f"max abs diff {diff.max().item() if diff.numel() else math.nan:.3g}"
        return ""
    if not torch.equal(got, want):
        return f"{int((got != want).sum())} of {want.numel()} elements differ"
    return ""


def check_op(name: str, *, limit: int = 4, opset: int | None = None) -> list[SampleResult]:
    """Run up to ``limit`` float32 samples of OpInfo ``name``; results per sample."""
    info = opinfo_table()[name]
    return [run_sample(name, info, i, s, opset=opset) for i, s in enumerate(samples(info, limit))]


def assert_op_passes(name: str, *, limit: int = 4, opset: int | None = None) -> None:
    """Every sample must pass, except ones torch.export cannot capture or that the harness skips."""
    results = check_op(name, limit=limit, opset=opset)
    failures = [r for r in results if r.status not in ("passed", "capture", "skipped")]
    assert any(r.status == "passed" for r in results), f"{name}: no sample passed: {results}"
    assert not failures, "\n".join(f"{r.op}[{r.index}] {r.status}: {r.detail}" for r in failures)
