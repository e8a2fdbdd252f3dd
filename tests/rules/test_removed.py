"""Removed rules: kept in the catalog (codes are never reused), shown as removed everywhere, emitted nowhere."""

from __future__ import annotations

import os
import re

import pytest

from onnxsight import rules
from onnxsight.cli import main
from onnxsight.rules import docs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REMOVED = ["DTY003"]
CONSTANTS = {rule.code: name for name, rule in vars(rules).items() if isinstance(rule, rules.Rule)}


def test_the_removed_rules_are_these() -> None:
    assert sorted(code for code, rule in rules.CATALOG.items() if rule.removed) == REMOVED


def _uses(constant: str) -> list[str]:
    """Lines outside the rule definitions that name ``constant`` (an emit site would)."""
    pattern = re.compile(rf"\b{constant}\b")
    found = []
    for directory, subdirs, files in os.walk(os.path.join(ROOT, "onnxsight")):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        if os.path.basename(directory) == "rules":
            continue
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as handle:
                    found += [f"{os.path.relpath(path, ROOT)}:{n}" for n, line in enumerate(handle, 1)
                              if pattern.search(line)]
    return found


@pytest.mark.parametrize("code", REMOVED)
def test_a_removed_rule_is_emitted_nowhere(code: str) -> None:
    assert not _uses(CONSTANTS[code]), f"{code} is removed but still used"


@pytest.mark.parametrize("code", ["OPS002", "DTY004", "VAL001"])
def test_the_scan_finds_rules_in_use(code: str) -> None:
    """The check above can fail: the same scan finds the emit sites of rules in use."""
    assert _uses(CONSTANTS[code])


@pytest.mark.parametrize("code", REMOVED)
def test_a_removed_rule_is_shown_as_removed(code: str, capsys) -> None:
    rule = rules.get(code)
    assert "> **Removed.**" in docs.render_markdown(rule)
    assert f"~~{rule.name}~~ (removed)" in docs.render_index(rules.CATALOG)
    assert docs.render_text(rule).startswith(f"{code} {rule.name} ({rule.level.value}, removed)")
    with open(os.path.join(ROOT, "docs", "rules", f"{code}.md"), encoding="utf-8") as handle:
        assert handle.read() == docs.render_markdown(rule), "docs/rules is stale: python -m onnxsight.rules.docs docs/rules"
    assert main(["rules"]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(code)]
    assert line.endswith(f"{rule.name} (removed)")
    assert main(["rules", code]) == 0
    assert f"({rule.level.value}, removed)" in capsys.readouterr().out.splitlines()[0]
