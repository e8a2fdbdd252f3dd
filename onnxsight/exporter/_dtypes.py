"""torch dtype <-> ONNX TensorProto data type."""

from __future__ import annotations

import numpy as np
import onnx
import torch

_TORCH_TO_ONNX: dict[torch.dtype, int] = {
    torch.float32: onnx.TensorProto.FLOAT,
    torch.float16: onnx.TensorProto.FLOAT16,
    torch.bfloat16: onnx.TensorProto.BFLOAT16,
    torch.float64: onnx.TensorProto.DOUBLE,
    torch.int8: onnx.TensorProto.INT8,
    torch.int16: onnx.TensorProto.INT16,
    torch.int32: onnx.TensorProto.INT32,
    torch.int64: onnx.TensorProto.INT64,
    torch.uint8: onnx.TensorProto.UINT8,
    torch.uint16: onnx.TensorProto.UINT16,
    torch.uint32: onnx.TensorProto.UINT32,
    torch.uint64: onnx.TensorProto.UINT64,
    torch.bool: onnx.TensorProto.BOOL,
    torch.complex64: onnx.TensorProto.COMPLEX64,
    torch.complex128: onnx.TensorProto.COMPLEX128,
    torch.float8_e4m3fn: onnx.TensorProto.FLOAT8E4M3FN,
    torch.float8_e4m3fnuz: onnx.TensorProto.FLOAT8E4M3FNUZ,
    torch.float8_e5m2: onnx.TensorProto.FLOAT8E5M2,
    torch.float8_e5m2fnuz: onnx.TensorProto.FLOAT8E5M2FNUZ,
    torch.float4_e2m1fn_x2: onnx.TensorProto.FLOAT4E2M1,   # two values a byte: see onnx_shape
    # NOTE: only the exporter's own 4-bit weights (int4_pairs) are held in these shell dtypes, two values a
    # byte as float4_e2m1fn_x2 (PyTorch has no kernel that computes them: no model holds such a tensor).
    torch.int4: onnx.TensorProto.INT4,
    torch.uint4: onnx.TensorProto.UINT4,
}
_PAIRS = (torch.float4_e2m1fn_x2, torch.int4, torch.uint4)
_ONNX_TO_TORCH = {v: k for k, v in _TORCH_TO_ONNX.items()}

COMPLEX = (torch.complex64, torch.complex128, torch.complex32)


def to_onnx(dtype: torch.dtype) -> int:
    """ONNX data type for a torch dtype; raises TypeError naming the dtype when there is none."""
    try:
        return _TORCH_TO_ONNX[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} has no ONNX equivalent") from None


def onnx_shape(dtype: torch.dtype | None, shape: tuple | list) -> list:
    """The ONNX dims of a tensor of ``dtype`` and torch ``shape``.

    NOTE: torch's float4_e2m1fn_x2 is a shell dtype, one element per byte holding two float4 values
    (low nibble first); ONNX's FLOAT4E2M1 counts the values, packed the same way. The bytes are
    the same, the last dim doubles (as torch.onnx writes it); a symbolic last dim is left unnamed.
    The exporter's int4/uint4 weights (:func:`int4_pairs`) are packed so too.
    """
    if dtype not in _PAIRS or not shape:
        return list(shape)
    last = shape[-1]
    return [*shape[:-1], last * 2 if isinstance(last, int) else None]


def float4_values(tensor: torch.Tensor) -> np.ndarray:
    """torch's packed float4 pairs as ml_dtypes float4 values, as ONNX counts them (see onnx_shape)."""
    import ml_dtypes  # shipped with onnx

    packed = tensor.detach().cpu().contiguous().view(torch.uint8).numpy()
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1)
    return codes.reshape(*packed.shape[:-1], -1).view(ml_dtypes.float4_e2m1fn)


def float4_pairs(values: np.ndarray) -> torch.Tensor:
    """ml_dtypes float4 values (last dim even) packed back into torch's float4_e2m1fn_x2 pairs."""
    codes = np.ascontiguousarray(values).view(np.uint8) & 0x0F
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return torch.from_numpy(np.ascontiguousarray(packed)).view(torch.float4_e2m1fn_x2)


def int4_pairs(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int8/uint8 ``values`` in a 4-bit range (last dim even) packed two a byte, low nibble first, as ONNX
    packs INT4/UINT4, in a ``dtype`` (torch.int4 or torch.uint4) tensor whose last dim is halved."""
    codes = values.detach().cpu().contiguous().view(torch.uint8) & 0x0F
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).contiguous().view(dtype)


def int4_values(tensor: torch.Tensor) -> np.ndarray:
    """The exporter's packed int4/uint4 pairs (:func:`int4_pairs`) as int8/uint8 values, as ONNX counts them."""
    packed = tensor.detach().cpu().contiguous().view(torch.uint8).numpy()
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    if tensor.dtype is torch.uint4:
        return codes
    return ((codes.astype(np.int8) << 4) >> 4).astype(np.int8)   # sign-extend the nibble


def to_torch(data_type: int) -> torch.dtype:
    try:
        return _ONNX_TO_TORCH[data_type]
    except KeyError:
        raise TypeError(f"ONNX data type {onnx.TensorProto.DataType.Name(data_type)} has no torch equivalent") from None


def opmath(dtype: torch.dtype) -> torch.dtype:
    """The dtype PyTorch computes ``dtype`` in (its opmath type): float32 for float16 and bfloat16, where
    sums and reductions in the storage type would lose what PyTorch's kernels keep."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def is_float(dtype: torch.dtype | None) -> bool:
    return dtype is not None and dtype.is_floating_point


def is_integer(dtype: torch.dtype | None) -> bool:
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool
