"""Shared test helper: validate a SARIF log against the official 2.1.0 schema and keep a copy.

Every SARIF a test produces goes through :func:`check_sarif`: it must validate
with jsonschema, and it is written to ``$ONNXSIGHT_SARIF_DIR`` (default
``artifacts/sarif``) so ``make sarif-validate`` can run Microsoft's SARIF
Multitool with GitHub's rules over the same files.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, Mapping

import jsonschema

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# NOTE: the OASIS SARIF 2.1.0 schema (errata 01, JSON Schema draft-04) is vendored unchanged in
# tests/data, so the tests run from a clone with nothing beside it.
SCHEMA_PATH = os.path.join(ROOT, "tests", "data", "sarif-schema-2.1.0.json")


def sarif_dir() -> str:
    """Where test SARIF files are kept for the multitool."""
    return os.environ.get("ONNXSIGHT_SARIF_DIR") or os.path.join(ROOT, "artifacts", "sarif")


@functools.lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft4Validator:
    with open(SCHEMA_PATH, encoding="utf-8") as handle:
        schema = json.load(handle)
    return jsonschema.Draft4Validator(schema)


def check_sarif(log: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Round-trip ``log`` through strict JSON, validate it, save it as ``<sarif_dir>/<name>.sarif``; return it."""
    text = json.dumps(log, ensure_ascii=False, allow_nan=False)
    data = json.loads(text)
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.path))
    assert not errors, "SARIF schema errors:\n" + "\n".join(
        f"  {'/'.join(map(str, e.path))}: {e.message[:300]}" for e in errors[:20])
    directory = sarif_dir()
    os.makedirs(directory, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:120] or "log"
    with open(os.path.join(directory, f"{safe}.sarif"), "w", encoding="utf-8") as handle:
        handle.write(text)
    return data


def check_sarif_file(path: str, name: str) -> dict[str, Any]:
    """Validate and keep a SARIF file written by the code under test."""
    with open(path, encoding="utf-8") as handle:
        return check_sarif(json.load(handle), name)
