"""The rule catalog: every diagnostic onnxsight can emit, as data with its docs."""

from __future__ import annotations

from onnxsight.rules._catalog import *  # noqa: F401,F403  (the rule constants)
from onnxsight.rules._catalog import CATALOG
from onnxsight.rules._rule import Level, Rule, RuleDocs, clean_text


def get(code: str) -> Rule:
    """Look a rule up by code (case-insensitive) or by name."""
    key = code.strip().upper()
    if key in CATALOG:
        return CATALOG[key]
    for rule in CATALOG.values():
        if rule.name == code.strip().lower():
            return rule
    raise KeyError(f"unknown rule {code!r}; known codes: {', '.join(CATALOG)}")


__all__ = ["CATALOG", "Level", "Rule", "RuleDocs", "get"]
