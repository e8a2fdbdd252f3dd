"""The user's model run by PyTorch for the stages around the exporter, reported as the exporter reports it.

``export_generation`` learns the shapes of a model's KV cache, and an encoder-decoder's encoder states, from
one forward before it exports anything. A model that raises there (a config whose head sizes disagree) is
CAP025 at the line that raised, as ``export()`` reports it once every capture strategy failed, not the
model's exception from deep inside torch's attention.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from onnxsight.diagnostics import DiagnosticContext, caller_location
from onnxsight.exporter._errors import CaptureError
from onnxsight.exporter._record import ExportRecord
from onnxsight.exporter.capture._strategies import emit_model_raised


def run_model(model: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None) -> Any:
    """``model(*args, **kwargs)`` without gradients; raises :class:`CaptureError` (CAP025, logged) where it raises."""
    try:
        with torch.no_grad():
            return model(*args, **dict(kwargs or {}))
    except Exception as error:  # noqa: BLE001 - any error of the model's is the one to report
        ctx = DiagnosticContext(fallback_location=caller_location())
        emit_model_raised(ctx, model, error)
        record = ExportRecord(model_name=type(model).__name__)
        with record.stage("capture") as stage:
            stage.status, stage.detail = "failed", f"{type(error).__name__} when PyTorch ran the model"
        raise CaptureError(f"{type(model).__name__} raises when PyTorch runs it", diagnostics=ctx.diagnostics,
                           record=record) from error
