"""mkdocs hook: the repository's README.md is the site's front page (index.md).

The README links into docs/ as a reader on GitHub sees it (``docs/export.md``); on the site the
same pages sit beside the front page (``export.md``). The README stays the one source of the front
page, so it and the site's home cannot drift apart.
"""

from __future__ import annotations

import os
import re

from mkdocs.structure.files import File, Files

_LINKS = (
    (re.compile(r"\]\(docs/\)"), "](index.md)"),
    (re.compile(r"\]\(docs/"), "]("),
    (re.compile(r"\]\(CONTRIBUTING\.md\)"), "](contributing.md)"),
)


def front_page(readme: str) -> str:
    """The README's text with its links re-pointed from the repository root to docs/."""
    for pattern, replacement in _LINKS:
        readme = pattern.sub(replacement, readme)
    return readme


def on_files(files: Files, config) -> Files:
    root = os.path.dirname(os.path.abspath(config["config_file_path"]))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as handle:
        content = front_page(handle.read())
    files.append(File.generated(config, "index.md", content=content))
    return files
