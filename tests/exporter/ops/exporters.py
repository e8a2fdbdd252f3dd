"""The exporters the OpInfo harness compares, and the one ONNX Runtime runner they share.

Each exporter maps (module, tensor inputs, opset) to (ModelProto, input names) and raises
CaptureFailed when torch.export cannot capture the module (such a sample is not counted
for that exporter). Both models then run in the same way: ONNX Runtime's CPU provider with
default session options, inputs fed by name in order, outputs back as torch tensors.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import re
from typing import Any, Callable

import torch

DEFAULT_OPSET = 18          # onnxsight's default; torch.onnx is asked for the same
TORCH_ONNX_OPTIMIZE = True  # torch.onnx.export's default (onnxscript's optimizer runs on the model)


class CaptureFailed(Exception):
    """torch.export could not capture the sample's module (the exporter never saw a graph)."""


class ExportFailed(Exception):
    """The exporter refused or crashed; the message names the innermost cause."""


def _reason(exc: BaseException) -> str:
    """``Outer <- Inner: message`` down the chain of causes, ANSI colours dropped."""
    chain = [exc]
    while chain[-1].__cause__ is not None and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(chain[-1]))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    names = [type(e).__name__ for e in chain]
    names = [n for i, n in enumerate(names) if i == 0 or n != names[i - 1]]
    return " <- ".join(names) + ": " + " ".join(lines[:3])


def export_onnxsight(module: torch.nn.Module, tensors: tuple[torch.Tensor, ...], opset: int) -> tuple[Any, list[str]]:
    import onnxsight
    from onnxsight.exporter import CaptureError

    try:
        program = onnxsight.export(module, tensors, opset_version=opset)
    except CaptureError as exc:
        raise CaptureFailed(str(exc).splitlines()[0]) from exc
    return program.model_proto, list(program.input_names)


@functools.lru_cache(maxsize=None)
def _torchlib_registry(cls: Any, opset_version: int) -> Any:
    return _ORIGINAL_FROM_TORCHLIB.__func__(cls, opset_version=opset_version)


_ORIGINAL_FROM_TORCHLIB: Any = None


def _cache_torchlib_registry() -> None:
    """Build torch.onnx's op registry once per opset instead of once per export.

    NOTE: torch.onnx.export rebuilds the registry from onnxscript's torchlib on every call (1.8 s
    of a 2.2 s export of one tanh here). The export only reads it (no custom_translation_table is
    passed), so reusing it changes no result, only the harness's run time.
    """
    global _ORIGINAL_FROM_TORCHLIB
    from torch.onnx._internal.exporter import _registration

    if _ORIGINAL_FROM_TORCHLIB is not None:
        return
    _ORIGINAL_FROM_TORCHLIB = _registration.ONNXRegistry.__dict__["from_torchlib"]
    _registration.ONNXRegistry.from_torchlib = classmethod(  # type: ignore[method-assign]
        lambda cls, opset_version=_ORIGINAL_FROM_TORCHLIB.__func__.__defaults__[0]:
        _torchlib_registry(cls, opset_version))


def export_torch_onnx(module: torch.nn.Module, tensors: tuple[torch.Tensor, ...], opset: int) -> tuple[Any, list[str]]:
    from torch.onnx._internal.exporter._errors import TorchExportError

    _cache_torchlib_registry()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            program = torch.onnx.export(module, tensors, dynamo=True, opset_version=opset,
                                        optimize=TORCH_ONNX_OPTIMIZE, verbose=False)
    except TorchExportError as exc:
        raise CaptureFailed(str(exc).splitlines()[0]) from exc
    except Exception as exc:  # noqa: BLE001 - its first line is generic ("step 3/3"): name the cause
        raise ExportFailed(_reason(exc)) from exc
    model = program.model_proto
    return model, [value.name for value in model.graph.input]


EXPORTERS: dict[str, Callable[[torch.nn.Module, tuple[torch.Tensor, ...], int], tuple[Any, list[str]]]] = {
    "onnxsight": export_onnxsight,
    "torch.onnx": export_torch_onnx,
}


def _to_numpy(tensor: torch.Tensor) -> Any:
    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes  # shipped with onnx
        return tensor.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _to_torch(value: Any) -> list[torch.Tensor]:
    import numpy as np

    if isinstance(value, list):  # a sequence output
        return [t for item in value for t in _to_torch(item)]
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":
        return [torch.from_numpy(array.view(np.uint16).copy()).view(torch.bfloat16)]
    return [torch.from_numpy(array.copy())]


def _to_ort_value(tensor: torch.Tensor) -> Any:
    import onnxruntime as ort

    tensor = tensor.detach().contiguous()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: hand ONNX Runtime the bits and the type
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(tensor.view(torch.uint16).numpy(),
                                                              onnx_element_type=16)
    return ort.OrtValue.ortvalue_from_numpy(tensor.numpy())


def _from_ort_value(value: Any) -> torch.Tensor:
    if value.data_type() == "tensor(bfloat16)":  # ONNX Runtime's numpy() refuses bfloat16
        return torch.from_dlpack(value._get_c_value()).clone()
    return torch.from_numpy(value.numpy().copy())


def run_onnx(model: Any, input_names: list[str], tensors: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """Run ``model`` in ONNX Runtime's CPU provider with ``tensors`` fed to ``input_names`` in order.

    Through OrtValues, so bfloat16 goes in and comes out (``InferenceSession.run`` cannot return it);
    a model with a sequence output is run through numpy instead.
    """
    import onnxruntime as ort

    if len(input_names) != len(tensors):
        raise ValueError(f"the model takes {len(input_names)} inputs, the sample has {len(tensors)} tensors")
    session = ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                                   providers=["CPUExecutionProvider"])
    if any(not o.type.startswith("tensor(") for o in session.get_outputs()):
        outputs = session.run(None, {name: _to_numpy(t) for name, t in zip(input_names, tensors)})
        return [t for output in outputs for t in _to_torch(output)]
    outputs = session.run_with_ort_values(None, {n: _to_ort_value(t) for n, t in zip(input_names, tensors)})
    return [_from_ort_value(value) for value in outputs]
