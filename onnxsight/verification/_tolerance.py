"""Tolerance: when two tensors count as equal, per dtype and per value.

Every threshold the comparison uses comes from a :class:`Tolerance`; the
comparison code holds no literal numbers of its own.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping, Sequence

# NOTE: float32 is looser than torch.testing's default (1.3e-6) because values are compared
# after many ops, where PyTorch and ONNX Runtime legitimately sum in different orders; a
# real translation error (a 1% scale, swapped operands) is orders of magnitude above it.
# float16/bfloat16 are a few units in the last place of their 11/8-bit mantissas.
_DEFAULTS: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-3, 1e-2),
    "bfloat16": (1e-2, 4e-2),
    "complex64": (1e-4, 1e-4),
    "complex128": (1e-7, 1e-7),
}
_EXACT = (0.0, 0.0)


@dataclass(frozen=True)
class Bounds:
    """The resolved thresholds for one value."""

    atol: float
    rtol: float
    max_mismatch_fraction: float
    exact: bool

    @property
    def near_zero(self) -> float:
        """Magnitude below which a relative difference is not meaningful (the absolute tolerance)."""
        return self.atol


def dtype_name(dtype: Any) -> str:
    """Canonical name (``float32``, ``bfloat16``, ``int64``, ``bool``) of a torch/numpy/ONNX dtype."""
    if dtype is None:
        return "unknown"
    text = str(dtype)
    text = text.removeprefix("torch.").removeprefix("tensor(").rstrip(")")
    aliases = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
               "bool_": "bool", "<class 'numpy.bool'>": "bool"}
    return aliases.get(text, text)


def is_floating(dtype: Any) -> bool:
    name = dtype_name(dtype)
    return name.startswith(("float", "bfloat", "complex"))


@dataclass(frozen=True)
class Tolerance:
    """Per-dtype defaults plus per-value overrides.

    ``dtypes`` maps a dtype name to ``(atol, rtol)`` and is merged over the
    defaults (float64/float32/float16/bfloat16; integers and bool are exact).
    ``overrides`` maps an ONNX value name or glob (``"layers.*.softmax*"``) to
    ``(atol, rtol)``; the first matching pattern wins. An element mismatches when
    ``|actual - expected| > atol + rtol * |expected|``; a value passes when at most
    ``max_mismatch_fraction`` of its elements mismatch. ``quantization_steps``: how much, in steps of a
    quantized output's grid, the deployed session (its integer kernels) may add to the difference from
    PyTorch of the same graph run unoptimised: such kernels requantize with their own rounding, one step at
    a half step as a QuantizeLinear can (ACC013 is then a note, not an error).
    """

    dtypes: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    overrides: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    max_mismatch_fraction: float = 0.0
    quantization_steps: float = 1.0

    def __post_init__(self) -> None:
        merged = {**_DEFAULTS, **{dtype_name(k): tuple(v) for k, v in self.dtypes.items()}}
        object.__setattr__(self, "dtypes", MappingProxyType(merged))
        object.__setattr__(self, "overrides", MappingProxyType(dict(self.overrides)))

    @classmethod
    def uniform(cls, atol: float, rtol: float, **kwargs: Any) -> "Tolerance":
        """The same ``(atol, rtol)`` for every floating dtype."""
        return cls(dtypes={name: (atol, rtol) for name in _DEFAULTS}, **kwargs)

    def with_overrides(self, overrides: Mapping[str, tuple[float, float]]) -> "Tolerance":
        """A copy with more per-value overrides (they take precedence over the existing ones)."""
        return Tolerance(dtypes=dict(self.dtypes), overrides={**overrides, **self.overrides},
                         max_mismatch_fraction=self.max_mismatch_fraction, quantization_steps=self.quantization_steps)

    def for_outputs(self, names: Sequence[str]) -> "Tolerance":
        """A copy where an override keyed ``output {i}`` (the i-th model output, as a suite writes it before
        any export exists) also applies to that output's name in this program (``cat_32``), so the same
        override holds against eager and per node."""
        extra = {}
        for key, bounds in self.overrides.items():
            index = key.removeprefix("output ")
            if index != key and index.isdigit() and int(index) < len(names) and names[int(index)] not in self.overrides:
                extra[names[int(index)]] = bounds
        return self.with_overrides(extra) if extra else self

    def for_value(self, name: str, dtype: Any) -> Bounds:
        """The bounds for value ``name`` of ``dtype`` (an override by name or glob wins over the dtype)."""
        for pattern, (atol, rtol) in self.overrides.items():
            if name == pattern or fnmatch.fnmatchcase(name, pattern):
                return Bounds(float(atol), float(rtol), self.max_mismatch_fraction, exact=False)
        key = dtype_name(dtype)
        if key in self.dtypes:
            atol, rtol = self.dtypes[key]
            return Bounds(float(atol), float(rtol), self.max_mismatch_fraction, exact=False)
        return Bounds(*_EXACT, max_mismatch_fraction=self.max_mismatch_fraction, exact=not is_floating(key))

    def loosest(self, name: str, *dtypes: Any) -> Bounds:
        """The widest bounds among ``dtypes`` (used when the two sides disagree on the dtype)."""
        bounds = [self.for_value(name, d) for d in dtypes]
        return max(bounds, key=lambda b: (b.atol, b.rtol))

    def to_dict(self) -> dict[str, Any]:
        return {"dtypes": {k: list(v) for k, v in self.dtypes.items()},
                "overrides": {k: list(v) for k, v in self.overrides.items()},
                "max_mismatch_fraction": self.max_mismatch_fraction, "quantization_steps": self.quantization_steps}
