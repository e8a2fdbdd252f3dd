"""Other sizes: the same inputs resized along each dynamic dim, so a dim the graph silently
specialised (a reshape to the example's sizes) shows as a failure naming that dim.

For every dynamic dim, one size above the example's (or below, at the top of its range) and 1
where the range allows it; the other dims keep the example's sizes, so the dim that breaks is
the one named. Inputs are resized by repeating their own slices (growing) or cutting them
(shrinking), which keeps their values in the ranges the user's data has (token ids stay valid).
A cut keeps the first slices, or the last where the first would leave a sequence of padding only in a
padding mask the optimize stage rewrote (the note ONX008): that input is the one such a mask is known to
give other numbers for, and the example the user gave had none.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping, Sequence

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


def resize_inputs(program: Any, tensors: Sequence[Any], sizes: Mapping[Any, int],
                  padding_masks: Collection[str] = ()) -> list[Any]:
    """``tensors`` resized to the shapes their specs take at ``sizes``; every input cut at the same end.

    ``padding_masks``: the inputs whose fully masked rows the exported model averages (ONX008). Cutting a
    left-padded example (``[0, 0, 1, ...]``) to its first token would make its row padding only, and the
    other size would fail for that alone: the inputs are then cut from the end, where its tokens are.
    """
    specs = input_specs(program)
    shapes = [shape_at(spec.val, sizes) for spec in specs]
    resized = [_resize(tensor, shape) for tensor, shape in zip(tensors, shapes)]
    masks = [(before, after) for spec, before, after in zip(specs, tensors, resized) if spec.name in padding_masks]
    if any(_lost_every_token(before, after) for before, after in masks):
        from_end = [_resize(tensor, shape, from_end=True) for tensor, shape in zip(tensors, shapes)]
        by_name = {spec.name: tensor for spec, tensor in zip(specs, from_end)}
        if not any(_lost_every_token(before, by_name[spec.name]) for spec, before in zip(specs, tensors)
                   if spec.name in padding_masks):
            return from_end
    return resized


def _lost_every_token(before: Any, after: Any) -> bool:
    """A sample (axis 0) of a padding mask that had a token that is not padding and has none after the cut."""
    if before.dim() < 2 or after.dim() < 2 or before.shape[0] != after.shape[0]:
        return False
    return bool((before.flatten(1).ne(0).any(1) & ~after.flatten(1).ne(0).any(1)).any())


def _resize(tensor: Any, shape: Sequence[int], from_end: bool = False) -> Any:
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
        if from_end and size < current:
            index = torch.arange(current - size, current, device=tensor.device)
        else:
            index = torch.arange(size, device=tensor.device) % current
        tensor = tensor.index_select(axis, index)
    return tensor.contiguous()
