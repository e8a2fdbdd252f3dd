"""The translations ``export(..., optimize="ort-fusion")`` chooses: the forms ONNX Runtime's optimizer fuses.

A translate-stage choice (which translation per ATen overload), made before translation: the optimize
stage's ``ort-fusion`` passes then write these forms the way ORT's fusers match them.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from onnxsight.exporter.ops import attention, norm

# NOTE: ONNX Runtime's transformer optimizer does not know opset 23's Attention and RMSNormalization: its
# symbolic shape inference takes ONNX's Attention for its contrib com.microsoft.Attention (looked up by op type
# alone) and fails, so no residual norm fuses, and its fusers look for MatMul/Softmax attention and
# Pow/ReduceMean RMS norms. export(..., optimize="ort-fusion") registers these, the translations before opset
# 23, as custom ones (every opset; the optimize stage's RMS-norm pass is off too); a user's custom_translations
# for either op, registered after them, still wins.
ORT_FUSION_TRANSLATIONS: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.scaled_dot_product_attention.default: attention.aten_scaled_dot_product_attention,
    torch.ops.aten.rms_norm.default: norm.aten_rms_norm,
}
