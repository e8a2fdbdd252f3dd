"""Pieces of the SARIF renderer: artifact URIs, locations, code flows, fingerprints, serialisation.

Kept apart from ``sarif.py`` so that module reads as the shape of the log.
Everything here is a pure function of its arguments (the URI bases object
is created per log).
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import re
import urllib.parse
from typing import Any, Mapping

import attr
import sarif_om

from onnxsight.diagnostics import Diagnostic, Location, as_location
from onnxsight.rules import clean_text

SRCROOT = "SRCROOT"
MAX_STACK_FRAMES = 40
# sarif-om omits attributes equal to their defaults; these are written even then.
_ALWAYS_WRITTEN = frozenset({"level"})
_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")  # addresses, numbers


class UriBases:
    """Relative artifact URIs: files under the source root use ``SRCROOT``, others ``ROOT<n>`` (their folder)."""

    def __init__(self, source_root: str) -> None:
        self.root = os.path.abspath(source_root)
        self._bases: dict[str, str] = {SRCROOT: self.root}

    def relative(self, path: str) -> tuple[str, str]:
        """(percent-encoded relative URI, base id) of ``path``."""
        absolute = os.path.abspath(path)
        for base_id, directory in self._bases.items():
            if absolute.startswith(directory.rstrip(os.sep) + os.sep):
                return _quote(os.path.relpath(absolute, directory)), base_id
        directory = os.path.dirname(absolute)
        base_id = f"ROOT{len(self._bases)}"
        self._bases[base_id] = directory
        return _quote(os.path.basename(absolute)), base_id

    def original_uri_base_ids(self) -> dict[str, sarif_om.ArtifactLocation]:
        """``run.originalUriBaseIds``: absolute ``file://`` URIs, each ending in ``/``."""
        out = {}
        for base_id, directory in self._bases.items():
            uri = pathlib.Path(directory).as_uri()
            out[base_id] = sarif_om.ArtifactLocation(uri=uri if uri.endswith("/") else uri + "/")
        return out


def _quote(relative: str) -> str:
    return urllib.parse.quote(relative.replace(os.sep, "/"), safe="/")


def is_file_location(location: Location | None) -> bool:
    """A location that names a real source file (not ``<string>``, ``<frozen ...>`` or an empty path)."""
    return (location is not None and isinstance(location.file, str) and bool(location.file.strip())
            and not location.file.startswith("<") and "\x00" not in location.file)


def line_of(location: Location) -> int:
    try:
        line = int(location.line or 1)
    except (TypeError, ValueError):
        return 1
    return line if line >= 1 else 1


def physical_location(location: Location | None, bases: UriBases) -> sarif_om.PhysicalLocation | None:
    """The SARIF physical location of ``location``; None when it is not in a file."""
    location = as_location(location)
    if location is None or not is_file_location(location):
        return None
    try:
        uri, base_id = bases.relative(location.file)
    except (ValueError, OSError):
        return None
    line = line_of(location)
    snippet = sarif_om.ArtifactContent(text=clean_text(str(location.code))) if location.code else None
    return sarif_om.PhysicalLocation(artifact_location=sarif_om.ArtifactLocation(uri=uri, uri_base_id=base_id),
                                     region=sarif_om.Region(start_line=line, snippet=snippet),
                                     context_region=_context_region(location, line))


def _context_region(location: Location, line: int) -> sarif_om.Region | None:
    """A few lines around the result, when the file is readable here."""
    try:
        lines = Location(location.file, line).snippet(2)
    except (OSError, ValueError, UnicodeError):
        return None
    if not lines or (lines[0][0] == line and lines[-1][0] == line):
        return None  # must be a proper superset of the region
    text = "\n".join(text for _, text in lines)
    return sarif_om.Region(start_line=lines[0][0], end_line=lines[-1][0],
                           snippet=sarif_om.ArtifactContent(text=clean_text(text)))


def code_flows(diagnostic: Diagnostic, bases: UriBases) -> list[sarif_om.CodeFlow] | None:
    """The Python stack as one thread flow, outermost call first; the user's frame is 'essential'."""
    frames = [f for f in map(as_location, diagnostic.stack) if f is not None][-MAX_STACK_FRAMES:]
    if not frames:
        return None
    steps = []
    for frame in frames:
        text = f"{frame.function or '<module>'}" + (f": {frame.code}" if frame.code else "")
        location = sarif_om.Location(physical_location=physical_location(frame, bases),
                                     message=sarif_om.Message(text=clean_text(text)))
        steps.append(sarif_om.ThreadFlowLocation(
            location=location, importance="essential" if frame == diagnostic.location else "unimportant"))
    return [sarif_om.CodeFlow(message=sarif_om.Message(text="Python stack, outermost call first"),
                              thread_flows=[sarif_om.ThreadFlow(locations=steps)])]


def logical_locations(diagnostic: Diagnostic) -> list[sarif_om.LogicalLocation] | None:
    """The ``nn_module_stack`` path as a logical location of kind 'module'."""
    path = clean_text(diagnostic.module_path or "").strip()
    if not path:
        return None
    return [sarif_om.LogicalLocation(name=path.rsplit(".", 1)[-1], fully_qualified_name=path, kind="module")]


def fingerprint_parts(diagnostic: Diagnostic, uri: str, location: Location | None) -> tuple[str, str]:
    """(line key, result key): text that identifies a result across runs and machines.

    The line key uses the source line's text rather than its number, so edits
    above it do not change it; the result key adds the module path, the ATen
    target, the FX node and the message with addresses and numbers removed
    (metrics and timings change between runs; what the result is about does not).
    """
    line_text = " ".join(str(location.code or "").split()) if location is not None else ""
    if location is not None and not line_text:
        line_text = f"line {line_of(location)}"
    props = diagnostic.properties
    line_key = "\0".join((diagnostic.rule.code, uri, line_text))
    message = _VOLATILE.sub("#", diagnostic.message)
    result_key = "\0".join((line_key, diagnostic.module_path or "", str(props.get("target", "")),
                            str(props.get("fx_node", "")), str(props.get("onnx_value", "")), message))
    return line_key, result_key


def digest(text: str, length: int = 16) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:length]


def jsonable(value: Any) -> Any:
    """Property values as JSON: strings cleaned, non-finite floats as strings, other objects as str()."""
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return jsonable(value.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    try:
        return clean_text(str(value))
    except Exception:  # noqa: BLE001
        return f"<{type(value).__name__}>"


def serialize(obj: Any) -> Any:
    """sarif-om objects -> JSON-ready dicts with SARIF property names.

    Drops None and values equal to sarif-om's defaults, except ``level``,
    which GitHub and viewers read literally (absent means 'warning').
    """
    if attr.has(type(obj)):
        out: dict[str, Any] = {}
        for field in attr.fields(type(obj)):
            value = getattr(obj, field.name)
            if value is None:
                continue
            default = field.default
            if isinstance(default, attr.Factory):  # type: ignore[arg-type]
                default = default.factory()
            if value == default and field.name not in _ALWAYS_WRITTEN:
                continue
            out[field.metadata.get("schema_property_name", field.name)] = serialize(value)
        return out
    if isinstance(obj, Mapping):
        return {clean_text(str(k)): serialize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [serialize(v) for v in obj]
    return jsonable(obj)
