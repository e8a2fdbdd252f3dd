"""The orchestration of one export run: exporter, verification and reports composed in one place.

(Skeleton: the orchestration moves here from ``exporter/_api.py``.)
"""

from __future__ import annotations

from onnxsight.exporter import export

__all__ = ["export"]
