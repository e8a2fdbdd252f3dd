"""Root-cause analysis: which mismatching values are first divergences, and which follow from them.

A value that mismatches while every input it reads matched is a root cause;
a mismatching value with a mismatching input is propagated from the root
causes behind that input (a matching value stops the propagation). Values
are added in topological order, so the analysis runs while the engine
compares, and can also be replayed over a finished table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence


@dataclass(frozen=True)
class Verdict:
    """The analysis of one value."""

    root_cause: bool
    propagated_from: tuple[str, ...]


@dataclass
class RootCauseTracker:
    """Online root-cause analysis in topological order.

    ``independent=True`` (isolated mode) makes every mismatch a root cause: each value
    was computed from the reference's own inputs, so no mismatch is inherited.
    """

    independent: bool = False
    _roots_behind: dict[str, frozenset[str]] = field(default_factory=dict)
    _order: dict[str, int] = field(default_factory=dict)

    def add(self, value: str, passed: bool, upstream: Iterable[str]) -> Verdict:
        """Record ``value``; ``upstream`` are the compared values it reads (already added)."""
        behind: set[str] = set()
        for name in upstream:
            behind |= self._roots_behind.get(name, frozenset())
        if passed:
            self._roots_behind[value] = frozenset()
            self._order[value] = len(self._order)
            return Verdict(False, ())
        if self.independent or not behind:
            self._roots_behind[value] = frozenset({value}) if not self.independent else frozenset()
            self._order[value] = len(self._order)
            return Verdict(True, ())
        self._roots_behind[value] = frozenset(behind)
        self._order[value] = len(self._order)
        return Verdict(False, tuple(sorted(behind, key=self._order.__getitem__)))


def analyse(values: Sequence[tuple[str, bool, Sequence[str]]], *, independent: bool = False) -> dict[str, Verdict]:
    """Replay the analysis over ``(value, passed, upstream)`` rows in topological order."""
    tracker = RootCauseTracker(independent=independent)
    return {value: tracker.add(value, passed, upstream) for value, passed, upstream in values}
