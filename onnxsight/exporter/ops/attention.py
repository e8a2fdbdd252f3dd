"""scaled_dot_product_attention: ONNX Attention from opset 23, MatMul/Softmax before (or where it cannot)."""

from __future__ import annotations

import math

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import UnsupportedVariant, translation
from onnxsight.exporter.ops._nn_common import dim, dropout, reduce

aten = torch.ops.aten


def _heads(x: Value) -> int | None:
    head = x.shape[-3] if x.shape is not None and len(x.shape) >= 3 else None
    return head if isinstance(head, int) else None


def _repeat_kv(b: GraphBuilder, x: Value, heads: int) -> Value:
    """torch's ``x.repeat_interleave(heads // kv_heads, dim=-3)`` for grouped-query attention."""
    kv_heads = _heads(x)
    if kv_heads is None:
        raise UnsupportedVariant("enable_gqa", f"True with key/value shape {x.shape}", "static head counts")
    if kv_heads == heads:
        return x
    rank = b.rank_of(x)
    grown = b.op("Unsqueeze", x, b.const([rank - 2], torch.int64))
    reps = [1] * (rank + 1)
    reps[rank - 2] = heads // kv_heads
    grown = b.op("Expand", grown, b.const(reps, torch.int64))
    shape = b.op("Concat", b.shape_of(x, end=-3), b.const([heads], torch.int64), b.shape_of(x, start=-2), axis=0,
                 dtype=torch.int64)
    return b.op("Reshape", grown, shape, shape=(*x.shape[:-3], heads, *x.shape[-2:]))


def _root_scale(b: GraphBuilder, query: Value, scale: float | None) -> Value:
    """sqrt(scale), applied to Q and K each so Q @ K^T does not overflow in half precision."""
    if scale is not None:
        return b.scalar(math.sqrt(scale), query)
    width = query.shape[-1] if query.shape is not None else None
    if isinstance(width, int):
        return b.scalar(width ** -0.25, query)
    size = b.cast(dim(b, query, -1), query.dtype)
    return b.op("Pow", size, b.scalar(-0.25, query))


# NOTE: float32/float64 scores are (Q K^T) / sqrt(E): the form ONNX Runtime's attention fusers
# match (fusion_attention.py: Softmax <- [Add mask <-] Div <- MatMul), and the product cannot
# overflow there. Half precision keeps sqrt(scale) on Q and K each, so Q K^T stays in range.
_WIDE = (torch.float32, torch.float64)


def _scaled_scores(b: GraphBuilder, query: Value, key_t: Value, scale: float | None) -> Value:
    """Q @ K^T times the softmax scale (``1/sqrt(E)`` when ``scale`` is None)."""
    width = query.shape[-1] if query.shape is not None else None
    if query.dtype in _WIDE and (scale is None and isinstance(width, int) or scale is not None and scale > 0):
        product = b.op("MatMul", query, key_t)
        if scale is None or isinstance(width, int) and scale == width ** -0.5:
            return b.op("Div", product, b.scalar(math.sqrt(width), query))
        return b.op("Mul", product, b.scalar(float(scale), query))
    root = _root_scale(b, query, scale)
    return b.op("MatMul", b.op("Mul", query, root), b.op("Mul", key_t, root))


def _causal_bias(b: GraphBuilder, query: Value, key: Value, dtype: torch.dtype | None) -> Value:
    """(L, S) additive mask: 0 on and below the diagonal (top-left aligned, as torch), -inf above."""
    shape = b.op("Concat", dim(b, query, -2), dim(b, key, -2), axis=0, dtype=torch.int64)
    blocked = b.op("Expand", b.const(-math.inf, torch.float32), shape)
    return b.cast(b.op("Trilu", blocked, b.const(1, torch.int64), upper=1), dtype or torch.float32)


def _mask_bias(b: GraphBuilder, mask: Value, dtype: torch.dtype | None) -> Value:
    if mask.dtype == torch.bool:
        return b.op("Where", mask, b.scalar(0.0, dtype), b.scalar(-math.inf, dtype), dtype=dtype)
    return b.cast(mask, dtype) if dtype is not None else mask


def _sdpa_formula(b: GraphBuilder, query: Value, key: Value, value: Value, attn_mask: Value | None,
                  dropout_p: float, is_causal: bool, scale: float | None, enable_gqa: bool) -> Value:
    """softmax(Q K^T * scale + mask) V, with torch's zeros for rows whose every score is masked."""
    if enable_gqa and _heads(query) is not None:
        key, value = _repeat_kv(b, key, _heads(query)), _repeat_kv(b, value, _heads(query))
    rank = b.rank_of(key)
    key_t = b.op("Transpose", key, perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    scores = _scaled_scores(b, query, key_t, scale)
    if is_causal:
        scores = b.op("Add", scores, _causal_bias(b, query, key, query.dtype))
    if attn_mask is not None:
        scores = b.op("Add", scores, _mask_bias(b, attn_mask, query.dtype))
    weights = b.op("Softmax", scores, axis=-1)
    if attn_mask is not None:
        # NOTE: torch (_safe_softmax) gives 0 where a whole row is -inf; Softmax gives NaN there.
        dead = b.op("Equal", _row_max(b, scores), b.scalar(-math.inf, scores), dtype=torch.bool)
        weights = b.op("Where", dead, b.scalar(0.0, weights), weights, dtype=weights.dtype)
    if dropout_p > 0:
        weights = dropout(b, weights, float(dropout_p))[0]
    return b.op("MatMul", weights, value)


# NOTE: the row maximum is TopK(k=1), not ReduceMax: from opset 18 ReduceMax takes its axes as an input, which
# ONNX Runtime's symbolic shape inference (run by its transformer optimizer) cannot read, so it loses the shape
# of everything after the guard and fuses no SkipLayerNormalization in the model. TopK keeps its axis as an
# attribute, and ORT's TopK ranks NaN highest, so the guard is torch's all(scores == -inf) exactly (ORT's
# ReduceMax skips NaN: a row of NaN and -inf was zeroed). TopK takes float32/float64 only on ORT's CPU.
def _row_max(b: GraphBuilder, scores: Value) -> Value:
    """The maximum of each row (last axis) of ``scores``, keeping the axis."""
    if scores.dtype not in (torch.float32, torch.float64):
        return reduce(b, "ReduceMax", scores, [-1])
    top, index = b.op("TopK", scores, b.const([1], torch.int64), outputs=2, axis=-1, largest=1, sorted=1)
    top.dtype, index.dtype = scores.dtype, torch.int64
    top.shape = None if scores.shape is None else (*scores.shape[:-1], 1)
    return top


@translation(aten.scaled_dot_product_attention.default, until=22)
def aten_scaled_dot_product_attention(b: GraphBuilder, query: Value, key: Value, value: Value,
                                      attn_mask: Value | None = None, dropout_p: float = 0.0,
                                      is_causal: bool = False, *, scale: float | None = None,
                                      enable_gqa: bool = False) -> Value:
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None,
    float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor"""
    return _sdpa_formula(b, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@translation(aten.scaled_dot_product_attention.default, since=23)
def aten_scaled_dot_product_attention_23(b: GraphBuilder, query: Value, key: Value, value: Value,
                                         attn_mask: Value | None = None, dropout_p: float = 0.0,
                                         is_causal: bool = False, *, scale: float | None = None,
                                         enable_gqa: bool = False) -> Value:
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None,
    float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor

    ONNX Attention takes 4-D (B, H, L, E) inputs and has no dropout; other cases use the formula.
    """
    if dropout_p > 0 or not (query.rank == key.rank == value.rank == 4) or _needs_formula(attn_mask):
        return _sdpa_formula(b, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    mask = None if attn_mask is None else _above_lowest(b, _attention_mask(b, attn_mask, query, key))
    return b.op("Attention", query, key, value, mask, is_causal=int(is_causal),
                scale=None if scale is None else float(scale))


# NOTE: torch broadcasts attn_mask against (B, H, L, S) from the right; ONNX Runtime's Attention
# (1.2x, CPU) accepts a 2-D to 4-D mask only, whose query axis is exactly L and whose head axis
# is 1 or H: a [B, 1, 1, S] padding mask (nn.MultiheadAttention's key_padding_mask), [1, S] or
# [S] fails at run time with "inconsistent q_sequence_length". Such masks are expanded to
# [..., L, S] first. Bool masks are kept (True: attend, as torch), all-masked rows included.
def _needs_formula(mask: Value | None) -> bool:
    """Masks Attention cannot take in any shape: unknown rank, or more than 4 axes."""
    return mask is not None and (mask.rank is None or mask.rank > 4)


# NOTE: ONNX Runtime's Attention (1.32, CPU) takes a float mask equal to the dtype's lowest value
# (transformers' torch.finfo(dtype).min padding mask) as "masked out": a row whose every key is
# masked that way gives zeros, where torch's softmax over equal scores averages the values (T5 on
# a sequence of padding only: off by 2.2). One step above the lowest value keeps every partly
# masked row as it was (exp underflows to 0 all the same) and gives fully masked rows torch's
# uniform weights. -inf masks are untouched: both give zeros there.
def _above_lowest(b: GraphBuilder, mask: Value) -> Value:
    if mask.dtype is None or not mask.dtype.is_floating_point:
        return mask
    import numpy as np

    lowest = torch.finfo(mask.dtype).min
    above = float(np.nextafter(np.float32(lowest), np.float32(0))) if mask.dtype == torch.float32 else \
        lowest + torch.finfo(mask.dtype).eps * abs(lowest)
    at_lowest = b.op("Equal", mask, b.scalar(lowest, mask.dtype), dtype=torch.bool)
    return b.op("Where", at_lowest, b.scalar(above, mask.dtype), mask, dtype=mask.dtype, shape=mask.shape)


def _same_size(a: int | str | None, b: int | str | None) -> bool:
    return a is not None and a == b


def _attention_mask(b: GraphBuilder, mask: Value, query: Value, key: Value) -> Value:
    """``mask`` in a shape ONNX Runtime's Attention accepts: 2-D to 4-D, query axis L, key axis S."""
    rank = mask.rank or 0
    shape, q_shape, k_shape = mask.shape or (), query.shape or (), key.shape or ()
    fits = (rank >= 2 and _same_size(shape[-2], q_shape[-2] if q_shape else None)
            and _same_size(shape[-1], k_shape[-2] if k_shape else None)
            and (rank < 3 or shape[-3] == 1 or _same_size(shape[-3], _heads(query))))
    if fits:
        return mask
    lead = max(rank, 2) - 2
    target = b.op("Concat", b.const([1] * lead, torch.int64), dim(b, query, -2), dim(b, key, -2), axis=0,
                  dtype=torch.int64)
    out_shape = (*shape[:lead], q_shape[-2] if q_shape else None, k_shape[-2] if k_shape else None) \
        if rank >= 2 else (q_shape[-2] if q_shape else None, k_shape[-2] if k_shape else None)
    return b.op("Expand", mask, target, dtype=mask.dtype, shape=out_shape)
