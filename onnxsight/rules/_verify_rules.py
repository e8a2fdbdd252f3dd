"""Rules of the verification engine's own contract: bad calls to verify(), what it did not compare, and why."""

from __future__ import annotations

from onnxsight.rules._rule import Level, define  # noqa: F401  (used by the definitions below)

E, W, N = Level.ERROR, Level.WARNING, Level.NOTE
