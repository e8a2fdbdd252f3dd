"""Diagnostic: an immutable record of one thing onnxsight found, against a rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from onnxsight.diagnostics._location import Location
from onnxsight.rules import Level, Rule


def _frozen(mapping: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Diagnostic:
    """One finding. Renderers (SARIF, markdown, HTML) read these and nothing else.

    ``location`` is the user's own source line; ``stack`` the full Python stack
    (outermost first) shown as a SARIF code flow; ``module_path`` the
    ``nn_module_stack`` path (SARIF logical location); ``properties`` the
    machine-readable facts: fx_node, target, onnx_node, onnx_value, dtypes,
    shapes, metrics.
    """

    rule: Rule
    level: Level
    message: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    location: Location | None = None
    related: tuple[Location, ...] = ()
    stack: tuple[Location, ...] = ()
    module_path: str | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", _frozen(self.fields))
        object.__setattr__(self, "properties", _frozen(self.properties))

    @property
    def code(self) -> str:
        return self.rule.code

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.level.value} {self.rule.code} [{self.rule.name}] {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, used by run records and the zoo store."""
        def loc(l: Location | None) -> dict[str, Any] | None:
            return None if l is None else {"file": l.file, "line": l.line, "function": l.function, "code": l.code}
        return {
            "rule": self.rule.code, "level": self.level.value, "message": self.message,
            "fields": {k: _jsonable(v) for k, v in self.fields.items()},
            "location": loc(self.location), "related": [loc(l) for l in self.related],
            "stack": [loc(l) for l in self.stack], "module_path": self.module_path,
            "properties": {k: _jsonable(v) for k, v in self.properties.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Diagnostic":
        from onnxsight import rules

        def loc(d: Mapping[str, Any] | None) -> Location | None:
            return None if not d else Location(d["file"], d.get("line"), d.get("function"), d.get("code"))
        return cls(rule=rules.get(data["rule"]), level=Level(data["level"]), message=data["message"],
                   fields=data.get("fields", {}), location=loc(data.get("location")),
                   related=tuple(l for l in map(loc, data.get("related", [])) if l),
                   stack=tuple(l for l in map(loc, data.get("stack", [])) if l),
                   module_path=data.get("module_path"), properties=data.get("properties", {}))


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)
