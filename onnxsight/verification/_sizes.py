"""Other sizes: the same inputs resized along each dynamic dim, so a dim the graph silently
specialised (a reshape to the example's sizes) shows as a failure naming that dim.

For every dynamic dim, one size above the example's (or below, at the top of its range) and 1
where the range allows it; the other dims keep the example's sizes, so the dim that breaks is
the one named. Inputs are resized by repeating their own slices (growing) or cutting them
(shrinking), which keeps their values in the ranges the user's data has (token ids stay valid).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from onnxsight.verification._inputs import input_specs, program_dims, shape_at

#: At most this many extra runs (a program with many dynamic dims is checked on the first ones).
MAX_OTHER_SIZES = 6


def dim_names(program: Any) -> dict[Any, str]:
    """symbol -> the dim's name in the ONNX model (``batch``)."""
    return program_dims(program, input_specs(program)).names


def named(sizes: Mapping[Any, int], names: Mapping[Any, str]) -> dict[str, int]:
    """``{s17: 5}`` -> ``{"batch": 5}``, ordered by name."""
    return dict(sorted((names.get(s, str(s)), int(v)) for s, v in sizes.items()))


def other_sizes(program: Any, sizes: Mapping[Any, int]) -> list[tuple[Any, dict[Any, int]]]:
    """``(symbol, sizes)`` for each extra run: one symbol moved, the others as in ``sizes``."""
    dims = program_dims(program, input_specs(program))
    plans: list[tuple[Any, dict[Any, int]]] = []
    for symbol in sorted(dims.names, key=lambda s: dims.names[s]):
        if symbol not in sizes:
            continue
        low, high = dims.ranges.get(symbol, (0, None))
        current = sizes[symbol]
        candidates = []
        if high is None or current + 1 <= high:
            candidates.append(current + 1)
        elif current - 1 >= max(low, 1):
            candidates.append(current - 1)
        if low <= 1 and current != 1 and 1 not in candidates:
            candidates.append(1)
        plans.extend((symbol, {**sizes, symbol: c}) for c in candidates)
    return plans[:MAX_OTHER_SIZES]


def resize_inputs(program: Any, tensors: Sequence[Any], sizes: Mapping[Any, int]) -> list[Any]:
    """``tensors`` resized to the shapes their specs take at ``sizes``."""
    return [_resize(tensor, shape_at(spec.val, sizes)) for spec, tensor in zip(input_specs(program), tensors)]


def _resize(tensor: Any, shape: Sequence[int]) -> Any:
    import torch

    for axis, size in enumerate(shape):
        current = tensor.shape[axis]
        if current == size:
            continue
        if current == 0:
            grown = list(tensor.shape)
            grown[axis] = size
            tensor = torch.zeros(grown, dtype=tensor.dtype, device=tensor.device)
            continue
        index = torch.arange(size, device=tensor.device) % current
        tensor = tensor.index_select(axis, index)
    return tensor.contiguous()
