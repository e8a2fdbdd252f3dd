"""The exporter core: capture, decomposition, translation registry, GraphBuilder, ONNXProgram.

``__all__`` is the API for extending onnxsight (CONTRIBUTING.md, "Writing a
translation"): the ``@translation`` marker, the ``Registry`` and
``default_registry()``, the ``GraphBuilder`` and ``Value`` a translation
receives, ``UnsupportedVariant`` (raised for an argument variant a
translation does not handle: OPS006), the core ``export`` (no verification, no reports; it takes a
``registry=``), ``ONNXProgram`` and the errors. Users call ``onnxsight.export``.
The other names here are for onnxsight's own packages (``cache_pairs``: which
output of a decode step feeds which cache input of the next, by the names the exporter gives them). All load on first
use: this package imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onnxsight._lazy import lazy_names

_ERRORS = ("CaptureError", "CheckerError", "DecompositionError", "ExportError", "InvalidArgumentError",
           "TranslationError", "WeightsError")
_PUBLIC = {
    "export": "onnxsight.exporter._api",
    "GraphBuilder": "onnxsight.exporter._builder",
    "Value": "onnxsight.exporter._builder",
    "ONNXProgram": "onnxsight.exporter.program._onnx_program",
    "Registry": "onnxsight.exporter._registry",
    "default_registry": "onnxsight.exporter._registry",
    "translation": "onnxsight.exporter._registry",
    "UnsupportedVariant": "onnxsight.exporter._registry",
    **{name: "onnxsight.exporter._errors" for name in _ERRORS},
}
_INTERNAL = {
    "CaptureAttempt": "onnxsight.exporter._record",
    "ExportRecord": "onnxsight.exporter._record",
    "StageRecord": "onnxsight.exporter._record",
    "Translation": "onnxsight.exporter._registry",
    "target_key": "onnxsight.exporter._registry",
    "op_display": "onnxsight.exporter.translate._nodes",
    "onnx_shape": "onnxsight.exporter._dtypes",
    "float4_values": "onnxsight.exporter._dtypes",
    "int4_values": "onnxsight.exporter._dtypes",
    "require_artifacts_dir": "onnxsight.exporter.inputs._arguments",
    "refuse_arguments": "onnxsight.exporter.inputs._arguments",
    "RequiredAxes": "onnxsight.exporter.inputs._arguments",
    "keyword_dict": "onnxsight.exporter.inputs._torch_onnx_inputs",
    "infer_dynamic_shapes": "onnxsight.exporter.inputs._auto_dims",
    "example_inputs": "onnxsight.exporter.inputs._auto_dims",
    "inline_functions": "onnxsight.exporter.translate._inline",
    "library_pytrees": "onnxsight.exporter.inputs._pytree_libs",
    "cache_pairs": "onnxsight.exporter.inputs._cache_names",
    "past_name": "onnxsight.exporter.inputs._cache_names",
    "present_name": "onnxsight.exporter.inputs._cache_names",
    "OPTIMIZED_AWAY_KEY": "onnxsight.exporter.optimize._passes",
    "training_dependent": "onnxsight.exporter.capture._modes",
    "run_model": "onnxsight.exporter.capture._model_runs",
    "onnxscript_translation": "onnxsight.exporter.translate._onnxscript",
}

__all__ = sorted(_PUBLIC)

__getattr__, __dir__ = lazy_names(__name__, {**_PUBLIC, **_INTERNAL})

if TYPE_CHECKING:
    from onnxsight.exporter._api import export
    from onnxsight.exporter.inputs._auto_dims import example_inputs, infer_dynamic_shapes
    from onnxsight.exporter._builder import GraphBuilder, Value
    from onnxsight.exporter.translate._inline import inline_functions
    from onnxsight.exporter.inputs._arguments import RequiredAxes, refuse_arguments, require_artifacts_dir
    from onnxsight.exporter._errors import (CaptureError, CheckerError, DecompositionError, ExportError,
                                            InvalidArgumentError, TranslationError, WeightsError)
    from onnxsight.exporter.program._onnx_program import ONNXProgram
    from onnxsight.exporter.inputs._cache_names import cache_pairs, past_name, present_name
    from onnxsight.exporter.inputs._pytree_libs import library_pytrees
    from onnxsight.exporter.capture._model_runs import run_model
    from onnxsight.exporter._record import CaptureAttempt, ExportRecord, StageRecord
    from onnxsight.exporter._registry import (Registry, Translation, UnsupportedVariant, default_registry, target_key,
                                              translation)
    from onnxsight.exporter.translate._nodes import op_display
