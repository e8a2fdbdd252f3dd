"""A size-oblivious capture that will fail stops at the guard that dooms it, not at the end of the trace.

A dim asked dynamic whose example size is 0 is first captured size-oblivious, and so is one of size 1 where
the example grown to size 2 did not capture the model (``_strategies``). When the model, or torch inside one
of its ops, adds a guard that rules out size 2 for such a dim (``batch <= 1``: Hiera's ``AdaptiveAvgPool1d``
at batch 0 or 1), torch.export traces the whole model anyway and only then raises the constraint violation,
after which the example grown to size 2 is captured. The guard is known the
moment it is added: the ShapeEnv logs it (``_torchlog``), and the attempt is stopped there with
:class:`SizeOneGuard`, which the strategy treats as that violation (the grown example next). The attempt's
record keeps the guard and the line that added it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RANGE = re.compile(r"\[\s*(-?\w+)\s*,\s*(-?\w+)\s*\]")


class SizeOneGuard(Exception):
    """Raised inside torch.export's trace: a guard ruled out size 2 for a dim whose example size is 0 or 1."""

    def __init__(self, guard: str, dim: str, where: str, value: int | None = None) -> None:
        self.guard, self.dim, self.where = guard, dim, where
        self.value = value   # the size the guard fixes the dim to (``Eq(batch, 1)``), None for a bound
        super().__init__(f"size-oblivious capture stopped at the guard `{guard}`{where}: it rules out {dim} = 2, "
                         f"which the dynamic dim must allow; the example grown to size 2 is captured instead")


@dataclass
class Watch:
    """The dims whose example size is 0 or 1, and the symbols torch created for them."""

    sources: dict[str, str]                  # torch's source name (``L['x'].size()[0]``) -> the dim's label
    symbols: dict[str, str]                  # sympy symbol (``s77``) -> the dim's label

    def created(self, symbol: str, source: str, value_range: str) -> None:
        """A symbol created for a watched source; watched only where its range allows size 2."""
        label = self.sources.get(source)
        match = _RANGE.search(value_range)
        if label is None or match is None:
            return
        upper = match.group(2)
        if upper.endswith("int_oo") and not upper.startswith("-") or upper.lstrip("-").isdigit() and int(upper) >= 2:
            self.symbols[symbol] = label

    def dooms(self, prefix: str, guard: str, symbols: tuple[str, ...], where: str) -> SizeOneGuard | None:
        """The stop when the guard (on one watched symbol only) is false at size 2; else None.

        A guard torch suppressed is no guard. Expressions sympy cannot read back (torch's own functions:
        ``FloorDiv``, ``Mod``) never stop the attempt: only a guard that is certainly violated does.
        """
        if "suppressed" in prefix or len(symbols) != 1 or symbols[0] not in self.symbols:
            return None
        import sympy

        try:
            symbol = sympy.Symbol(symbols[0], integer=True)
            expr = sympy.sympify(guard, locals={symbols[0]: symbol})
            if expr.subs(symbol, 2) is not sympy.false:
                return None
        except Exception:  # noqa: BLE001 - an expression not read is a guard not judged
            return None
        label = self.symbols[symbols[0]]
        value = None
        if isinstance(expr, sympy.Eq) and symbol in expr.args:
            other = expr.rhs if expr.lhs == symbol else expr.lhs
            value = int(other) if isinstance(other, sympy.Integer) else None
        return SizeOneGuard(re.sub(rf"\b{symbols[0]}\b", label, guard), label, where, value)
