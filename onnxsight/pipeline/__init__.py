"""The orchestration of one export run: exporter, verification and reports composed in one place.

``export`` is :func:`onnxsight.export`: the exporter core (``onnxsight.exporter.export``),
then verification (``verify=True``) and the reports (``report=True``).
``build_run_record`` gathers the facts of a run (model, weights, inputs, ONNX
ops, environment, verification summary) into the ``RunRecord`` that
``onnxsight.reports`` renders; the CLI calls it for its own runs too.
"""

from __future__ import annotations

from onnxsight.pipeline._export import export
from onnxsight.pipeline._run_record import build_run_record

__all__ = ["build_run_record", "export"]
