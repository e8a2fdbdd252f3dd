"""The rule catalog: complete docs, stable codes, safe templates, generated docs up to date."""

from __future__ import annotations

import inspect
import os
import re
import string

import pytest

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.rules import docs
from onnxsight.rules._rule import Level, Rule, RuleDocs, clean_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL = list(rules.CATALOG.values())
RESERVED = set(inspect.signature(DiagnosticContext.emit).parameters) - {"self", "fields"}

# Codes are never reused or renumbered: this list only grows.
KNOWN_CODES = {
    "ARG001", "ARG002", "ARG003", "ARG004", "ARG005", "CAP001", "CAP002", "CAP003", "CAP004", "CAP005", "CAP006",
    "CAP007", "CAP008", "CAP009", "CAP012",
    "DEC001", "OPS001", "OPS002", "OPS003", "OPS004", "OPS005", "OPS006", "OPS007", "VAL001", "VAL002", "VAL003",
    "VAL004", "VAL005", "DTY001", "DTY002", "DTY003", "DTY004", "IO001", "IO002", "IO003", "IO004", "IO005", "IO007",
    "ONX001", "ONX002", "ONX003", "ORT001", "ORT002", "ORT003", "ORT004", "ACC001", "ACC002", "ACC003", "ACC004",
    "ACC005", "ACC006", "ZOO001", "ZOO002", "ZOO003", "ZOO004", "ZOO005", "INT001",
}


def test_catalog_size_and_codes_are_stable() -> None:
    assert len(rules.CATALOG) >= 50
    assert KNOWN_CODES <= set(rules.CATALOG), "a rule code disappeared: removed rules must stay listed"
    assert list(rules.CATALOG) == sorted(rules.CATALOG)


@pytest.mark.parametrize("rule", ALL, ids=[r.code for r in ALL])
def test_rule_is_complete(rule: Rule) -> None:
    assert re.fullmatch(r"[A-Z]{2,3}\d{3}", rule.code) and rule.area == rule.code[:-3]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", rule.name), "names are kebab-case and read as the problem"
    assert rule.level in (Level.ERROR, Level.WARNING, Level.NOTE)
    assert rule.fix and not re.search(r"\{[a-z_]+\}", rule.fix), "fix hints are plain text, not templates"
    for section in ("what_it_does", "why_it_matters", "example", "how_to_fix"):
        assert len(getattr(rule.docs, section).strip()) > 20, f"{rule.code} lacks '{section}'"
    assert rule.tags
    assert not set(rule.fields) & RESERVED, f"{rule.code} uses a field name that emit() takes as a keyword"
    for _, name, spec, conversion in string.Formatter().parse(rule.message):
        assert name is None or (name.isidentifier() and not spec and not conversion)


def test_names_are_unique_and_lookup_works() -> None:
    names = [r.name for r in ALL]
    assert len(names) == len(set(names))
    assert rules.get("ops001") is rules.UNSUPPORTED_CUSTOM_OP
    assert rules.get("custom-op-without-translation") is rules.UNSUPPORTED_CUSTOM_OP
    with pytest.raises(KeyError, match="known codes"):
        rules.get("XYZ999")


def test_format_never_raises() -> None:
    rule = rules.OUTPUT_MISMATCH
    assert "<reference?>" in rule.format(output="y")
    broken = Rule("TST001", "broken-template", "value {x!z} and {0}", Level.NOTE, "fix", RuleDocs("", "", "", ""),
                  "TST")
    assert "broken-template" not in broken.format(x=1) and "x=1" in broken.format(x=1)

    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no")
    assert "unprintable" in rules.UNSUPPORTED_OP.format(op=Unprintable())


def test_clean_text_escapes_control_characters_and_surrogates() -> None:
    assert clean_text("a\x00b\x1b[0m\ud800\n\tc\x85") == "a\\x00b\\x1b[0m\ufffd\n\tc\\x85"


@pytest.mark.parametrize("rule", ALL[:3] + [rules.UNSUPPORTED_CUSTOM_OP], ids=lambda r: r.code)
def test_renderers(rule: Rule) -> None:
    markdown = docs.render_markdown(rule)
    for heading in ("## What it does", "## Why it matters", "## Example", "## How to fix"):
        assert heading in markdown
    assert markdown.startswith(f"# {rule.code}: {rule.name}")
    assert not docs.render_markdown(rule, title=False).startswith("#")
    text = docs.render_text(rule)
    assert text.startswith(f"{rule.code} {rule.name}") and "```" not in text and rule.help_uri in text


def test_markdown_is_robust_to_backticks() -> None:
    rule = Rule("TST002", "backticks-everywhere", "uses `{x}` and ``{y}``", Level.NOTE, "fix",
                RuleDocs("what", "why", "x = '```'", "how"), "TST", tags=("t`ag",))
    markdown = docs.render_markdown(rule)
    assert "````python\nx = '```'\n````" in markdown
    assert "``` uses `{x}` and ``{y}`` ```" in markdown


def test_generated_docs_are_up_to_date() -> None:
    stale = docs.stale_pages(os.path.join(ROOT, "docs", "rules"))
    assert not stale, f"run `make docs` (python -m onnxsight.rules.docs docs/rules): stale {stale}"


def test_docs_main_writes_and_checks(tmp_path: object) -> None:
    directory = os.path.join(str(tmp_path), "rules")
    assert docs.main(["--check", directory]) == 1
    assert docs.main([directory]) == 0
    assert docs.main(["--check", directory]) == 0
    assert len(os.listdir(directory)) == len(rules.CATALOG) + 1
