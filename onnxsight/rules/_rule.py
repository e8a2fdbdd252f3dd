"""The Rule value: one diagnostic the project can emit, as data with its docs.

A rule is the single source for the SARIF ``tool.driver.rules`` entry, the
generated ``docs/rules/<code>.md`` page and ``onnxsight rules CODE``.
"""

from __future__ import annotations

import enum
import string
import textwrap
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
    """A field value as message text: never raises, no control characters or lone surrogates."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # noqa: BLE001 - a broken __str__ must not break the diagnostic
        text = f"<unprintable {type(value).__name__}>"
    return clean_text(text)


def clean_text(text: str) -> str:
    """Escape control characters (invalid in JSON strings, harmful in terminals) and lone surrogates."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "\n\t" or (32 <= code < 127) or (code > 159 and not 0xD800 <= code <= 0xDFFF):
            out.append(ch)
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\ufffd")
        else:
            out.append(f"\\x{code:02x}")
    return "".join(out)


def define(code: str, name: str, level: Level, message: str, fix: str, *, what: str = "", why: str = "",
           example: str = "", how: str = "", tags: tuple[str, ...] = (), removed: bool = False) -> Rule:
    """Build a Rule; the area is the code's letter prefix and doc text is dedented."""
    def clean(text: str) -> str:
        return textwrap.dedent(text).strip("\n").rstrip()

    area = code.rstrip("0123456789")
    return Rule(code=code, name=name, message=message, level=level, fix=fix,
                docs=RuleDocs(clean(what), clean(why), clean(example), clean(how)), area=area,
                tags=tags, removed=removed)
