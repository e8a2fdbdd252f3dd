"""The tests run from a fresh clone: nothing in the package or the tests reads the ``shared/`` folder beside it.

``../shared`` is the developers' folder (design notes, the SARIF Multitool script);
a user who clones onnxsight has none. What the tests need is vendored under
``tests/data`` (the SARIF 2.1.0 schema). ``.ci/run`` runs the suite from a clone
with no ``shared/`` beside it; this test catches the regression sooner, on any machine.
"""

from __future__ import annotations

import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A path into the sibling folder: "../shared", "shared/sarif", os.path.join(..., "shared", ...).
SHARED_PATH = re.compile(r"""\.\./shared\b|\bshared/sarif\b|/work/shared\b|["']shared["']""")


def _python_files(folder: str) -> list[str]:
    found = []
    for directory, subdirs, files in os.walk(os.path.join(ROOT, folder)):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        found += [os.path.join(directory, name) for name in files if name.endswith(".py")]
    return sorted(found)


def _offending_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [f"{os.path.relpath(path, ROOT)}:{number}: {line.strip()}"
                for number, line in enumerate(handle, 1) if SHARED_PATH.search(line)]


@pytest.mark.parametrize("folder", ["onnxsight", "tests", "bench"])
def test_no_code_reads_the_shared_folder(folder: str) -> None:
    this_file = os.path.abspath(__file__)
    offending = [line for path in _python_files(folder) if path != this_file for line in _offending_lines(path)]
    assert not offending, "reads ../shared, which a clone does not have:\n" + "\n".join(offending)


@pytest.mark.parametrize("line, reads_shared", [
    ('os.path.join(ROOT, "..", "shared", "sarif", "x.json")', True),
    ("open('../shared/sarif/sarif-schema-2.1.0.json')", True),
    ("path = '/work/shared/DESIGN.md'", True),
    ('"""Helpers shared by the nn translations."""', False),
    ("model folders, which should be a shared filesystem", False),
])
def test_the_pattern_tells_paths_from_prose(line: str, reads_shared: bool) -> None:
    assert bool(SHARED_PATH.search(line)) is reads_shared


def test_the_sarif_schema_is_vendored() -> None:
    from tests import sarif_check

    assert os.path.commonpath([sarif_check.SCHEMA_PATH, ROOT]) == ROOT
    with open(sarif_check.SCHEMA_PATH, encoding="utf-8") as handle:
        schema = json.load(handle)
    assert schema["id"] == "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    assert schema["$schema"] == "http://json-schema.org/draft-04/schema#"
