"""QNT001: eager-mode quantized modules and quantized tensors, refused before torch.export is tried.

Eager-mode quantization (``torch.ao.quantization.quantize_dynamic``, ``prepare``/``convert`` with
QuantStub) runs ``quantized::`` kernels on weights packed into TorchScript objects and on quantized
tensors (``torch.quint8``). torch.export traces neither (the packed objects cannot be flattened,
quantized tensors have no fake/meta form), so capture would fail with torch's internal errors;
instead each such module is named, with the PT2E flow that produces the same int8 model as a graph
onnxsight exports.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext

_QUANTIZED_PACKAGES = ("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.quantized")
_STUB_CLASSES = ("Quantize", "DeQuantize", "QFunctional")


def _why(module: torch.nn.Module) -> str | None:
    """Why torch.export cannot capture ``module`` (its own state only), or None."""
    cls = type(module)
    state = list(vars(module).values()) + list(module._parameters.values()) + list(module._buffers.values())
    # a quantized Linear keeps its packed weights in a LinearPackedParams child: the Linear is named
    state += [v for child in module.children() if type(child).__name__.endswith("PackedParams")
              for v in vars(child).values()]
    if any(isinstance(v, torch.ScriptObject) for v in state):
        return "its weights are packed for PyTorch's quantized:: kernels, which torch.export cannot trace"
    quantized = [v for v in state if isinstance(v, torch.Tensor) and v.is_quantized]
    if quantized:
        return f"it holds {quantized[0].dtype} tensors, which torch.export cannot trace"
    if cls.__module__.startswith(_QUANTIZED_PACKAGES) and cls.__name__ in _STUB_CLASSES:
        return "it computes on quantized tensors, which torch.export cannot trace"
    if _is_fake_quantize(module):
        return ("eager-mode QAT's fake quantization branches on its observer and fake-quant switches (buffers), "
                "which torch.export cannot trace")
    return None


def _is_fake_quantize(module: torch.nn.Module) -> bool:
    """A module of eager-mode QAT (``prepare_qat``): torch.ao.quantization's FakeQuantize and its kin."""
    fake_quantize = sys.modules.get("torch.ao.quantization.fake_quantize")   # imported by whoever made one
    base = getattr(fake_quantize, "FakeQuantizeBase", None)
    return base is not None and isinstance(module, base)


def refuse_eager_quantized(ctx: DiagnosticContext, model: Any, inputs: Sequence[tuple[str, Any]]) -> bool:
    """Emit QNT001 for each eager-mode quantized module (the outermost one) and quantized input; True if any.

    ``inputs``: (readable name, leaf) of every input, named by forward()'s arguments.
    """
    found = False
    reported: list[str] = []
    for path, module in model.named_modules() if isinstance(model, torch.nn.Module) else ():
        if any(path.startswith(done + ".") for done in reported):
            continue
        why = _why(module)
        if why is None:
            continue
        cls = type(module)
        ctx.emit(rules.EAGER_QUANTIZED_MODULE, submodule=path or "the model", kind=f"{cls.__module__}.{cls.__name__}",
                 detail=why, module=path or None)
        reported.append(path)
        found = True
    for name, leaf in inputs:
        if isinstance(leaf, torch.Tensor) and leaf.is_quantized:
            ctx.emit(rules.EAGER_QUANTIZED_MODULE, submodule=f"input {name}",
                     kind=f"a {leaf.dtype} tensor", detail="torch.export cannot trace quantized tensors")
            found = True
    return found
