"""The tolerances the OpInfo harness compares ONNX Runtime's outputs with eager's at.

Defaults are torch.testing's (`torch.testing.assert_close` with no rtol/atol): for float32
rtol 1.3e-6 and atol 1e-5, i.e. a few float32 ulps. Integers and bools compare exactly.

An override widens one op's tolerance and must say why: the reason is a fact about the
runtime or the op (a different but valid algorithm in ONNX Runtime's kernel), never "our
translation is a little off". Overrides are keyed by OpInfo name and apply to every
exporter alike, so the parity figures compare translations, not tolerances.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """``|got - want| <= atol + rtol * |want|`` elementwise (torch.isclose), NaN equal to NaN."""

    rtol: float
    atol: float


# torch.testing._comparison's defaults (pinned by tests/exporter/ops/test_harness.py).
DTYPE_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-5),
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
    torch.complex64: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.complex128: Tolerance(rtol=1e-7, atol=1e-7),
}
EXACT = Tolerance(rtol=0.0, atol=0.0)
# NOTE: the hand-written checks (eager_check.py, nn_checks.py) and the curated per-family OpInfo lists
# that `make test` runs still compare at the tolerance every op was first written against; the sweep
# (coverage.py, docs/op-parity.md) holds every op to DTYPE_TOLERANCES. Moving the curated tests to the
# defaults is one change per op family, made when the sweep shows that family passing at them.
CURATED = Tolerance(rtol=1e-3, atol=1e-4)


@dataclasses.dataclass(frozen=True)
class Override:
    """A wider tolerance for one OpInfo op, for the dtypes listed (all floating dtypes when empty)."""

    tolerance: Tolerance
    reason: str
    dtypes: tuple[torch.dtype, ...] = ()


# NOTE: every entry needs evidence that the difference is the runtime's (its kernel alone, one
# ONNX node fed the same input, differs from eager by as much), so that no translation error
# hides behind an override. Entries are listed in docs/op-parity.md with their reasons.
OVERRIDES: dict[str, Override] = {}


def default_tolerance(dtype: torch.dtype) -> Tolerance:
    """torch.testing's tolerance for ``dtype``; exact for integers and bools."""
    return DTYPE_TOLERANCES.get(dtype, EXACT)


def tolerance_for(op: str | None, dtype: torch.dtype) -> Tolerance:
    """The tolerance for output dtype ``dtype`` of OpInfo op ``op``: its override if any, else the default."""
    base = default_tolerance(dtype)
    override = OVERRIDES.get(op or "")
    if override is None or base == EXACT or (override.dtypes and dtype not in override.dtypes):
        return base
    return Tolerance(rtol=max(base.rtol, override.tolerance.rtol), atol=max(base.atol, override.tolerance.atol))
