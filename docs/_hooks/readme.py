"""mkdocs hooks: the repository's README.md is the site's front page; the site opens from file://.

The README links into docs/ as a reader on GitHub sees it (``docs/export.md``); on the site the
same pages sit beside the front page (``export.md``). The README stays the one source of the front
page, so it and the site's home cannot drift apart.

Opened from file://, material's search script loads ``search/search_index.js`` (what material's
``offline`` plugin writes; that plugin also loads a script from unpkg.com, so it is not used): the
index is written here, so no page logs a missing file.
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


def on_post_build(config) -> None:
    folder = os.path.join(config["site_dir"], "search")
    source = os.path.join(folder, "search_index.json")
    if os.path.exists(source):
        with open(source, encoding="utf-8") as handle:
            index = handle.read()
        with open(os.path.join(folder, "search_index.js"), "w", encoding="utf-8") as handle:
            handle.write(f"var __index = {index};\n")
