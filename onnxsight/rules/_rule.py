"""The Rule value: one diagnostic the project can emit, as data with its docs.

A rule is the single source for the SARIF ``tool.driver.rules`` entry, the
generated ``docs/rules/<code>.md`` page and ``onnxsight rules CODE``.
"""

from __future__ import annotations

import enum
import string
from dataclasses import dataclass, field


class Level(str, enum.Enum):
    """Severity of a diagnostic; values are SARIF ``level`` strings."""

    ERROR = "error"
    WARNING = "warning"
    NOTE = "note"

    @property
    def rank(self) -> int:
        return {"note": 0, "warning": 1, "error": 2}[self.value]


@dataclass(frozen=True)
class RuleDocs:
    """The four documentation sections every rule must have."""

    what_it_does: str
    why_it_matters: str
    example: str
    how_to_fix: str


class _SafeFields(dict):
    """Mapping for ``str.format_map`` that never raises on a missing field."""

    def __missing__(self, key: str) -> str:
        return f"<{key}?>"


@dataclass(frozen=True)
class Rule:
    """A diagnostic kind: stable code, readable name, message template and docs.

    ``message`` is a ``str.format`` template with named fields only. Codes are
    never reused; a removed rule keeps its entry with ``removed=True``.
    """

    code: str
    name: str
    message: str
    level: Level
    fix: str
    docs: RuleDocs
    area: str
    tags: tuple[str, ...] = field(default=())
    removed: bool = False

    @property
    def fields(self) -> tuple[str, ...]:
        """Names of the template's fields, in order of first use."""
        seen: list[str] = []
        for _, name, _, _ in string.Formatter().parse(self.message):
            if name and name not in seen:
                seen.append(name)
        return tuple(seen)

    def format(self, **fields: object) -> str:
        """Render the message; a missing field shows as ``<name?>`` instead of raising."""
        try:
            return self.message.format_map(_SafeFields({k: _text(v) for k, v in fields.items()}))
        except (ValueError, IndexError, AttributeError):  # malformed template or field spec
            return f"{self.message} ({', '.join(f'{k}={_text(v)}' for k, v in fields.items())})"

    @property
    def help_uri(self) -> str:
        return f"https://github.com/onnxsight/onnxsight/blob/main/docs/rules/{self.code}.md"


def _text(value: object) -> str:
    text = str(value)
    # Strip control characters that are invalid in JSON strings or terminals.
    return "".join(ch if ch in "\n\t" or ord(ch) >= 32 else f"\\x{ord(ch):02x}" for ch in text)
