"""Writing report files atomically: a temporary file in the same folder, flushed, then renamed."""

from __future__ import annotations

import os
import tempfile


def write_text_atomic(path: str | os.PathLike, text: str) -> str:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` so readers never see half a file; returns the path."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".onnxsight-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="\n") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return path
