"""Drive op tests from PyTorch's OpInfo database, for onnxsight and for torch.onnx alike.

For each OpInfo sample: wrap the call in a tiny module (tensors become inputs,
everything else is baked in), run it eagerly, export it with one of
``EXPORTERS`` at the same opset, run the model in ONNX Runtime's CPU provider
(the same session options for every exporter) and compare with eager at
torch.testing's tolerances (``op_tolerances.py``). Used by the per-family
tests (a curated list each, run by `make test`) and by `coverage.py` (every
OpInfo, `make test-ops` and `make test-ops-parity`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
import warnings
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree

from onnxsight.verification._coverage import UNINITIALISED_OPS
from tests.exporter.ops.exporters import EXPORTERS, DEFAULT_OPSET, CaptureFailed, run_onnx
from tests.exporter.ops.op_tolerances import CURATED, Tolerance, tolerance_for

DTYPE = torch.float32
SEED = 0
# Statuses: passed | skipped (nothing the exporters can be asked: no tensor, empty or complex input,
# eager fails) | capture (torch.export cannot capture it) | export | no-kernel (ONNX Runtime's CPU
# provider has no kernel for an op at this dtype: a runtime gap, not the exporter's) | runtime | mismatch.
FAILURES = ("export", "runtime", "mismatch", "error")
_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\)")


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
    status: str            # see the statuses above
    detail: str = ""
    exporter: str = "onnxsight"
    seconds: float = 0.0   # export time


@dataclasses.dataclass
class Prepared:
    """One sample made ready for the exporters: the module, its tensor inputs and eager's outputs."""

    module: OpModule
    tensors: tuple[torch.Tensor, ...]
    expected: list[torch.Tensor]


def samples(info: Any, limit: int, dtype: torch.dtype = DTYPE) -> Iterator[Any]:
    """The first ``limit`` samples of ``info`` at ``dtype`` (seeded: every exporter gets the same)."""
    if dtype not in info.dtypes:
        return
    torch.manual_seed(SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, sample in enumerate(info.sample_inputs("cpu", dtype, requires_grad=False)):
            if index >= limit:
                return
            yield sample


def prepare(info: Any, sample: Any) -> Prepared | str:
    """The sample as a module and inputs with eager's outputs, or why it is skipped."""
    leaves, spec = pytree.tree_flatten(((sample.input, *sample.args), sample.kwargs))
    tensors = tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))
    if not tensors or any(t.numel() == 0 for t in tensors) or any(t.is_complex() for t in tensors):
        return "no tensor inputs, empty or complex tensors"
    module = OpModule(info.op, spec, leaves)
    try:
        with torch.no_grad():
            expected = module(*[t.clone() for t in tensors])  # clones: an in-place op leaves the inputs be
    except Exception as exc:  # noqa: BLE001 - eager's own refusal: nothing to compare with
        return f"eager failed: {type(exc).__name__}: {str(exc)[:200]}"
    return Prepared(module, tensors, [t.detach() for t in pytree.tree_leaves(expected) if isinstance(t, torch.Tensor)])


def check_exported(name: str, index: int, prepared: Prepared, *, exporter: str = "onnxsight",
                   opset: int | None = None, tolerance: Tolerance | None = None) -> SampleResult:
    """Export ``prepared`` with ``exporter``, run it in ONNX Runtime and compare with eager."""
    start = time.perf_counter()
    try:
        model, input_names = EXPORTERS[exporter](prepared.module, prepared.tensors, opset or DEFAULT_OPSET)
    except CaptureFailed as exc:
        return SampleResult(name, index, "capture", str(exc)[:300], exporter, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - any other export failure is the exporter's
        return SampleResult(name, index, "export", f"{type(exc).__name__}: {str(exc)[:400]}", exporter,
                            time.perf_counter() - start)
    seconds = time.perf_counter() - start
    try:
        actual = run_onnx(model, input_names, prepared.tensors)
    except Exception as exc:  # noqa: BLE001
        text = f"{type(exc).__name__}: {exc}"
        missing = _NO_KERNEL.search(text)
        if missing:
            return SampleResult(name, index, "no-kernel", f"{missing.group(1)}({missing.group(2)})", exporter, seconds)
        return SampleResult(name, index, "runtime", text[:300], exporter, seconds)
    if len(prepared.expected) != len(actual):
        return SampleResult(name, index, "mismatch", f"{len(actual)} outputs, expected {len(prepared.expected)}",
                            exporter, seconds)
    for i, (want, got) in enumerate(zip(prepared.expected, actual)):
        problem = compare(want, got, op=name, tolerance=tolerance)
        if problem:
            return SampleResult(name, index, "mismatch", f"output {i}: {problem}", exporter, seconds)
    return SampleResult(name, index, "passed", "", exporter, seconds)


def run_sample(name: str, info: Any, index: int, sample: Any, *, opset: int | None = None,
               exporter: str = "onnxsight", tolerance: Tolerance | None = None) -> SampleResult:
    prepared = prepare(info, sample)
    if isinstance(prepared, str):
        return SampleResult(name, index, "skipped", prepared, exporter)
    return check_exported(name, index, prepared, exporter=exporter, opset=opset, tolerance=tolerance)


# Ops whose output is uninitialised memory (verification's list): only its shape and dtype mean anything
# (torch's own OpInfo tests skip their values too). Comparing the bytes passes or fails by chance.
UNINITIALISED = UNINITIALISED_OPS


def compare(want: torch.Tensor, got: torch.Tensor, *, op: str | None = None,
            tolerance: Tolerance | None = None) -> str:
    """Why ``got`` does not match ``want`` ("" when it does).

    Same shape and dtype; values within ``tolerance`` (default: torch.testing's for the dtype,
    widened only by ``op``'s entry in OVERRIDES), exact for integers and bools, NaN where eager has NaN.
    A complex ``want`` accepts a real ``got`` with a trailing dimension of 2 (real, imaginary).
    """
    want = want.detach()
    if want.is_complex() and not got.is_complex() and got.dim() and got.shape[-1] == 2:
        got = torch.view_as_complex(got.contiguous())
    if tuple(want.shape) != tuple(got.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if want.dtype != got.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if op in UNINITIALISED:
        return ""
    if want.dtype.is_floating_point or want.is_complex():
        tol = tolerance or tolerance_for(op, want.dtype)
        close = torch.isclose(got, want, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        if not bool(close.all()):
            return _describe(want, got, close, tol)
        return ""
    if not torch.equal(got, want):
        return f"{int((got != want).sum())} of {want.numel()} elements differ"
    return ""


def _describe(want: torch.Tensor, got: torch.Tensor, close: torch.Tensor, tol: Tolerance) -> str:
    wide = torch.complex128 if want.is_complex() else torch.float64
    diff = (got.to(wide) - want.to(wide)).abs()
    finite = diff[torch.isfinite(diff)]
    rel = (diff / want.to(wide).abs())[torch.isfinite(diff) & (want != 0)]
    bad = int((~close).sum())
    return (f"{bad} of {want.numel()} elements differ: max abs diff "
            f"{finite.max().item() if finite.numel() else float('nan'):.3g}, max rel diff "
            f"{rel.max().item() if rel.numel() else float('nan'):.3g} (rtol {tol.rtol:g}, atol {tol.atol:g})")


def check_op(name: str, *, limit: int = 4, opset: int | None = None, dtype: torch.dtype = DTYPE,
             exporter: str = "onnxsight", tolerance: Tolerance | None = None) -> list[SampleResult]:
    """Run up to ``limit`` samples of OpInfo ``name`` at ``dtype`` with ``exporter``; results per sample."""
    info = opinfo_table()[name]
    return [run_sample(name, info, i, s, opset=opset, exporter=exporter, tolerance=tolerance)
            for i, s in enumerate(samples(info, limit, dtype))]


def assert_op_passes(name: str, *, limit: int = 4, opset: int | None = None) -> None:
    """Every sample must pass (at CURATED), except ones torch.export cannot capture or the harness skips."""
    results = check_op(name, limit=limit, opset=opset, tolerance=CURATED)
    failures = [r for r in results if r.status not in ("passed", "capture", "skipped")]
    assert any(r.status == "passed" for r in results), f"{name}: no sample passed: {results}"
    assert not failures, "\n".join(f"{r.op}[{r.index}] {r.status}: {r.detail}" for r in failures)
