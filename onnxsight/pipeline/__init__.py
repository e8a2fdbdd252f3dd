"""The orchestration of one export run: exporter, verification and reports composed in one place.

``export`` is :func:`onnxsight.export`: the exporter core (``onnxsight.exporter.export``),
then verification (``verify=True``) and the reports (``report=True``).
``build_run_record`` gathers the facts of a run (model, weights, inputs, ONNX
ops, environment, verification summary) into the ``RunRecord`` that
``onnxsight.reports`` renders; the CLI calls it for its own runs too.
``verify_generation`` exports a generative model's step programs when not given
(``export_generation``), runs the generation loop of ``onnxsight.verification`` over them and
writes its reports.
"""

from __future__ import annotations

from onnxsight.pipeline._export import export
from onnxsight.pipeline._generation import export_generation, verify_generation
from onnxsight.pipeline._generation_record import build_generation_record
from onnxsight.pipeline._run_record import build_run_record

__all__ = ["build_generation_record", "build_run_record", "export", "export_generation", "verify_generation"]
