"""Inference batch norms folded into the Conv, ConvTranspose or Gemm before them: one node instead of two.

``BatchNormalization`` in inference mode is a per-channel affine map,
``y = (x - mean) * s + shift`` with ``s = scale / sqrt(var + eps)``, and so is
what a Conv/ConvTranspose/Gemm adds to its product per output channel. The
folded op computes ``x * (W s) + ((B - mean) s + shift)``: its weight scaled per
output channel and a new bias. It is what torch.onnx and ONNX Runtime do (ORT
when it loads a model); doing it at export makes the file itself lean, for
ORT's pattern-matching fusers and for the other runtimes users feed it to.

The folded op's output keeps the batch norm's value name (the verifier pairs it
with PyTorch's batch norm); the product before the batch norm is gone and is
listed as optimised away. A batch norm in training mode is not an inference
``BatchNormalization`` (its translation normalises with the batch's statistics),
so it is never folded. The new weights are computed from the model's weights (the arithmetic and its
error bound: :meth:`FoldedWeight.compute`); each records how (:class:`FoldedWeight`), so that ``save(path, weights=checkpoint)``
computes them again from the checkpoint's tensors, fake-mode exports included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import onnx
import torch

from onnxsight.exporter.inputs._fake import has_data
from onnxsight.exporter.optimize._graph import Graph, attribute, set_attribute

PASS_NAME = "batch-norm folding"

# A weight input of a fold: the state_dict tensor it is read from and the permutation the program stores it
# with (the transposed-weights pass), or None for an exporter constant (its tensor is in ``tensors``).
Source = Optional[tuple[str, Optional[tuple[int, ...]]]]


@dataclass(frozen=True, eq=False)   # holds tensors: compared by identity
class FoldedWeight:
    """How one folded initializer is computed: ``compute(target, scale, shift, mean, var)``.

    ``kind`` is ``"weight"`` (the op's weight scaled per output channel) or ``"bias"``
    (``(beta * bias - mean) * s + shift``; a missing bias is zero). ``sources`` say where each of the five
    operands comes from at ``save(weights=...)``; ``tensors`` are the program's own, used where a source
    is an exporter constant (or the checkpoint lacks it and the program has data).
    """

    kind: str
    sources: tuple[Source, ...]
    tensors: tuple[Optional[torch.Tensor], ...]
    epsilon: float
    channel_axis: int = 0   # the weight's output-channel axis (1 for ConvTranspose and Gemm with transB=0)
    groups: int = 1         # ConvTranspose's groups: its output channels are split over axis 0 too
    beta: float = 1.0       # Gemm's beta, folded into the new bias
    dtype: torch.dtype = torch.float32

    def compute(self, operands: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
        """The folded tensor from ``operands`` (target, scale, shift, mean, var), in ``dtype``.

        The per-channel ``s = scale / sqrt(var + eps)`` and the bias are computed in float64 and rounded once;
        the weight's product ``W * s`` is computed in float32 (float64 for a float64 weight) from ``s``
        rounded to float32. Error bound, float32 weights: each folded weight is within one float32 ulp of the
        exact ``W * s`` (relative error at most ``2u + u**2``, ``u = 2**-24``: ``s``'s rounding and the
        product's), where the product rounded from float64 was within half an ulp. In the folded op's output
        that is at most ``2u * sum(|x * W * s|)`` per value, below the error of the convolution's own float32
        sums (up to ``K * u * sum(|x * W|)`` over its ``K`` products) and of eager's separate batch norm;
        ``verify`` against eager passes at its default tolerances (the tests, and a ResNet-50 in
        docs/performance.md). float16/bfloat16 weights: the product in float32, then one rounding to the
        weight's dtype (at most half its ulp plus ``2u`` relative). torch's ``fuse_conv_bn_weights`` computes
        the whole fold, ``s`` included, in the weights' dtype: this is that with ``s`` exact to float32.

        NOTE: the float32 product makes the fold cheaper: numpy multiplies float32 by float32 in SIMD, where
        widening each weight to float64 went through its casting loop (ResNet-50's 106 folds, 23.5M weights:
        0.056 against 0.079 s, median of 10 interleaved rounds; most of what is left is the first write to the
        new tensors' memory). tests/exporter/test_batchnorm_fold.py checks the bound. Computed by numpy where every
        operand is a CPU tensor with data (``_numpy_fold``), bit for bit what torch's ops give (``_torch_fold``,
        compared by a test for every dtype), on one thread and in one pass over the weight: torch runs an
        elementwise op on more than 32768 elements on its intra-op thread pool, and on a loaded machine waking
        the pool cost milliseconds per op (0.7-1.1 s of a 16-block CNN's 2 s export, against 0.03 s on one
        thread). Tensors without data (fake mode) keep torch's ops, which compute nothing.
        """
        if all(_numpy_ready(t) for t in operands if t is not None):
            return _numpy_fold(self, operands)
        return _torch_fold(self, operands)


def _torch_fold(fold: FoldedWeight, operands: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    target, scale, shift, mean, var = operands
    assert scale is not None and shift is not None and mean is not None and var is not None
    wide = torch.float64
    s = scale.to(wide) * torch.rsqrt(var.to(wide) + fold.epsilon)
    if fold.kind == "bias":
        bias = torch.zeros_like(mean, dtype=wide) if target is None else \
            (fold.beta * target.to(wide)).reshape(-1).expand_as(s)
        return ((bias - mean.to(wide)) * s + shift.to(wide)).to(fold.dtype)
    assert target is not None
    product = _product_dtype(fold.dtype)
    return _scaled(target.to(product), s.to(product), fold.channel_axis, fold.groups).to(fold.dtype)


def _product_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype ``W * s`` is computed in: float64 for a float64 weight, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _scaled(weight: torch.Tensor, s: torch.Tensor, axis: int, groups: int) -> torch.Tensor:
    """``weight`` with output channel c multiplied by s[c]; ConvTranspose keeps group g's channels at
    axis 1 of rows g * Cin/groups ... (g + 1) * Cin/groups."""
    return weight * _per_channel(s, weight.dim(), axis, groups) if groups == 1 or axis == 0 else \
        (weight.reshape(groups, weight.shape[0] // groups, *weight.shape[1:])
         * _per_channel(s, weight.dim(), axis, groups)).reshape(weight.shape)


def _per_channel(s: Any, rank: int, axis: int, groups: int) -> Any:
    """``s`` shaped to broadcast over a weight's output channels (the grouped view for ConvTranspose)."""
    if axis == 0:
        return s.reshape(-1, *[1] * (rank - 1))
    if groups == 1:
        return s.reshape(1, -1, *[1] * (rank - 2))
    return s.reshape(groups, 1, -1, *[1] * (rank - 2))


# The weights' dtypes numpy computes in, and how torch rounds float64 to each: float16 through float32.
_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


def _numpy_ready(tensor: torch.Tensor) -> bool:
    return has_data(tensor) and tensor.device.type == "cpu" and (tensor.dtype in _NUMPY_DTYPES
                                                                 or tensor.dtype == torch.bfloat16)


def _array(tensor: torch.Tensor) -> np.ndarray:
    """The tensor's values without a copy where numpy holds its dtype (bfloat16 as float32: exact)."""
    tensor = tensor.detach()
    return (tensor.to(torch.float32) if tensor.dtype == torch.bfloat16 else tensor).numpy()


def _numpy_fold(fold: FoldedWeight, operands: Sequence[Optional[torch.Tensor]]) -> torch.Tensor:
    """:meth:`FoldedWeight.compute` in numpy: ``s`` and the bias in float64, ``W * s`` in float32 (float64 for a
    float64 weight), each rounded as torch's ``.to(dtype)`` does; one new array per weight, no other copy."""
    target, scale, shift, mean, var = (None if t is None else _array(t) for t in operands)
    assert scale is not None and shift is not None and mean is not None and var is not None
    wide = np.float64
    s = scale.astype(wide) * (1.0 / np.sqrt(var.astype(wide) + fold.epsilon))  # torch.rsqrt is 1/sqrt in float64
    rounded = np.float32 if fold.dtype in (torch.float16, torch.bfloat16) else _NUMPY_DTYPES[fold.dtype]
    if fold.kind == "bias":
        bias = 0.0 if target is None else fold.beta * target.astype(wide).reshape(-1)
        result = ((bias - mean.astype(wide)) * s + shift.astype(wide)).astype(rounded)
    else:
        assert target is not None
        shape = target.shape
        if fold.groups > 1 and fold.channel_axis != 0:
            target = target.reshape(fold.groups, shape[0] // fold.groups, *shape[1:])
        product = _NUMPY_DTYPES[_product_dtype(fold.dtype)]
        # a float16 weight is widened exactly by the multiply (float16 * float32 computes in float32)
        result = np.multiply(target, _per_channel(s.astype(product), len(shape), fold.channel_axis, fold.groups),
                             dtype=product).reshape(shape)
    if fold.dtype in _NUMPY_DTYPES:
        return torch.from_numpy(result.astype(_NUMPY_DTYPES[fold.dtype], copy=False))
    return torch.from_numpy(result).to(fold.dtype)


def fold_batch_norms(graph: Graph) -> int:
    """BatchNormalization(Conv/ConvTranspose/Gemm(x, W, B)) -> that op with W and B folded, where the op's
    output is read by the batch norm alone and every parameter is a weight or constant. Returns nodes removed."""
    done = 0
    for bn in list(graph.nodes):
        if bn.op_type != "BatchNormalization" or bn.domain or attribute(bn, "training_mode", 0) \
                or sum(1 for o in bn.output if o) != 1 or len(bn.input) != 5:
            continue
        op = graph.producer.get(bn.input[0])
        if op is None or op.domain or op.op_type not in ("Conv", "ConvTranspose", "Gemm") \
                or graph.uses(bn.input[0]) != 1 or len(op.input) < 2:
            continue
        folds = _folds(graph, op, bn)
        if folds is None:
            continue
        _rewrite(graph, op, bn, folds)
        done += 1
    return done


def _folds(graph: Graph, op: onnx.NodeProto, bn: onnx.NodeProto) -> tuple[FoldedWeight, FoldedWeight] | None:
    """The op's new weight and bias, or None where this pair does not fold (a parameter computed at run
    time, channels that do not line up, a Gemm bias of another shape, a weight folded already)."""
    names = [op.input[1], op.input[2] if len(op.input) > 2 else "", *bn.input[1:5]]
    if any(name in graph.computed for name in names if name):
        return None
    weight, bias, *params = [graph.constant(name) if name else None for name in names]
    if weight is None or (names[1] and bias is None) or any(t is None for t in params) \
            or not weight.dtype.is_floating_point or weight.dim() < 2:
        return None
    channels = params[0].numel()
    if any(t.dim() != 1 or t.numel() != channels for t in params):
        return None
    axis, groups, beta = 0, 1, 1.0
    if op.op_type == "ConvTranspose":
        axis, groups = 1, attribute(op, "group", 1)
        out_channels = weight.shape[1] * groups
    elif op.op_type == "Gemm":
        axis, beta = (0 if attribute(op, "transB", 0) else 1), attribute(op, "beta", 1.0)
        out_channels = weight.shape[axis]
        if weight.dim() != 2 or (bias is not None and bias.numel() not in (1, channels)):
            return None
    else:
        out_channels = weight.shape[0]
    if out_channels != channels or weight.shape[0] % groups:
        return None
    sources = [_source(graph, name) if name else None for name in names]
    eps = float(attribute(bn, "epsilon", 1e-5))
    return (FoldedWeight("weight", (sources[0], *sources[2:]), (weight, *params), eps, axis, groups,
                         dtype=weight.dtype),
            FoldedWeight("bias", (sources[1], *sources[2:]), (bias, *params), eps, beta=beta, dtype=weight.dtype))


def _source(graph: Graph, name: str) -> Source:
    if name in graph.derived:
        return graph.derived[name]
    return (name, None) if name in graph.weights else None


def _rewrite(graph: Graph, op: onnx.NodeProto, bn: onnx.NodeProto, folds: tuple[FoldedWeight, FoldedWeight]) -> None:
    """The op reads the folded weight and bias and writes the batch norm's value; the batch norm goes."""
    weight_name = op.input[1]
    base = weight_name.removesuffix(".weight")
    for index, name, fold in ((1, graph.fresh(f"{weight_name}.folded"), folds[0]),
                              (2, graph.fresh(f"{base}.bias.folded"), folds[1])):
        graph.initializers[name] = fold.compute(fold.tensors)
        graph.computed[name] = fold
        graph.weights.add(name)
        if index < len(op.input) and op.input[index]:
            graph.set_input(op, index, name)
        else:
            del op.input[index:]
            op.input.append(name)
            graph.readers.setdefault(name, []).append(op)
    if op.op_type == "Gemm":
        set_attribute(op, "beta", 1.0)
    product, out = op.output[0], bn.output[0]
    graph.remove([bn])
    op.output[0] = out
    graph.producer.pop(product, None)
    graph.producer[out] = op
    graph.removed[product] = PASS_NAME
