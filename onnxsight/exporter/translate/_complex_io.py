"""Complex graph inputs and outputs, carried as real tensors with a trailing (real, imaginary) dim of 2.

Inside the graph complex values are already real pairs (see ``_builder.Value``);
this module decides which graph inputs/outputs are complex, notes each one
(IO007) and converts between the two layouts at the program's boundary, so
``prog(...)`` takes and returns complex tensors as the PyTorch model does.
torch.onnx exports complex outputs the same way (``view_as_real`` at the output).
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext

# complex32's pairs are float16: no FFT runs in half precision on ONNX Runtime, so it stays DTY001.
PAIRED = (torch.complex64, torch.complex128)


def split_complex(values: Sequence[object], ctx: DiagnosticContext, kind: str,
                  nodes: Sequence[torch.fx.Node | None] = ()) -> dict[str, torch.dtype]:
    """``{name: complex dtype}`` of the complex values among ``values`` (``Value``s), each noted (IO007)
    at the user's line of the FX node in ``nodes`` that produced it (outputs), else at the export call.

    complex32 (and any complex dtype without a real-pair layout) is DTY001, as before.
    """
    found: dict[str, torch.dtype] = {}
    for index, value in enumerate(values):
        node = nodes[index] if index < len(nodes) else None
        dtype = getattr(value, "dtype", None)
        if dtype is None or not dtype.is_complex:
            continue
        name = getattr(value, "name")
        if dtype not in PAIRED:
            ctx.emit(rules.DTYPE_NOT_REPRESENTABLE, node=node, value=f"{kind} {name}", dtype=str(dtype))
            continue
        found[name] = dtype
        ctx.emit(rules.COMPLEX_AS_REAL_PAIRS, node=node, kind=kind, name=name, dtype=_short(dtype),
                 real=_short(dtype.to_real()))
    return found


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def to_pairs(tensor: torch.Tensor) -> torch.Tensor:
    """A complex tensor as the graph takes it: real, with a trailing (real, imaginary) dim."""
    return torch.view_as_real(tensor.resolve_conj()) if tensor.is_complex() else tensor


def from_pairs(outputs: list[torch.Tensor], names: list[str],
               complex_outputs: Mapping[str, torch.dtype]) -> list[torch.Tensor]:
    """The graph's outputs with the complex ones turned back into complex tensors of their dtype."""
    if not complex_outputs:
        return outputs
    converted = []
    for name, tensor in zip(names, outputs):
        dtype = complex_outputs.get(name)
        if dtype is not None and tensor.shape and tensor.shape[-1] == 2:
            tensor = torch.view_as_complex(tensor.to(dtype.to_real()).contiguous())
        converted.append(tensor)
    return converted
