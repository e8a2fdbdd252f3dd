"""Symbolic sizes: aten.sym_size and friends, Python arithmetic on SymInt/SymFloat/SymBool, runtime checks.

With dynamic shapes, torch.export records sizes (``x.shape[0]``) and the
Python arithmetic done on them as FX nodes. Here every SymInt is a 0-d int64
value, every SymFloat a 0-d float64 value (the dtype the translator gives them
from their meta) and every SymBool a 0-d bool. Operands may also be plain
Python numbers. Runtime assertions translate to nothing.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Sequence

import torch

from onnxsight.exporter._builder import GraphBuilder, Value
from onnxsight.exporter._registry import translation

aten = torch.ops.aten

def _as(b: GraphBuilder, x: Any, dtype: torch.dtype) -> Value:
    """``x`` (a Python number or a 0-d Value) as a 0-d Value of ``dtype``."""
    if isinstance(x, Value):
        return b.cast(x, dtype)
    if dtype.is_floating_point:
        return b.const(float(x), dtype)
    return b.const(bool(x) if dtype == torch.bool else int(x), dtype)


def _out(b: GraphBuilder, default: torch.dtype = torch.int64) -> torch.dtype:
    return b.node.out_dtype or default


def _binary(b: GraphBuilder, op_type: str, a: Any, c: Any) -> Value:
    """``a <op> c`` computed in float64 when the result is a float, else in the result dtype."""
    out = _out(b)
    work = torch.float64 if out.is_floating_point else out
    return b.cast(b.op(op_type, _as(b, a, work), _as(b, c, work), dtype=work), out)


# -- sizes ----------------------------------------------------------------------------------------
@translation(aten.sym_size.int)
def aten_sym_size(b: GraphBuilder, self: Value, dim: int) -> Value:
    """sym_size.int(Tensor self, int dim) -> SymInt"""
    rank = b.rank_of(self)
    dim = dim + rank if dim < 0 else dim
    return b.op("Squeeze", b.shape_of(self, dim, dim + 1), b.const([0], torch.int64), dtype=torch.int64, shape=())


@translation(aten.sym_numel.default)
def aten_sym_numel(b: GraphBuilder, self: Value) -> Value:
    """sym_numel(Tensor self) -> SymInt"""
    return b.op("Size", self, dtype=torch.int64, shape=())


@translation(aten.sym_stride.int)
def aten_sym_stride(b: GraphBuilder, self: Value, dim: int) -> Value:
    """sym_stride.int(Tensor self, int dim) -> SymInt

    The contiguous stride: ONNX values have no memory layout.
    """
    rank = b.rank_of(self)
    dim = dim + rank if dim < 0 else dim
    if dim + 1 >= rank:
        return b.const(1, torch.int64)
    return b.op("ReduceProd", b.shape_of(self, dim + 1), keepdims=0, dtype=torch.int64, shape=())


@translation(aten.sym_storage_offset.default)
def aten_sym_storage_offset(b: GraphBuilder, self: Value) -> Value:
    """sym_storage_offset(Tensor self) -> SymInt"""
    return b.const(0, torch.int64)


@translation(aten._local_scalar_dense.default)
def aten_local_scalar_dense(b: GraphBuilder, self: Value) -> Value:
    """_local_scalar_dense(Tensor self) -> Scalar  (``tensor.item()``)"""
    out = _out(b, self.dtype or torch.float32)
    return b.cast(b.op("Reshape", self, b.const([], torch.int64), shape=()), out)


# -- arithmetic ------------------------------------------------------------------------------------
@translation(operator.add)
def sym_add(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a + c on SymInt/SymFloat"""
    return _binary(b, "Add", a, c)


@translation(operator.sub)
def sym_sub(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a - c on SymInt/SymFloat"""
    return _binary(b, "Sub", a, c)


@translation(operator.mul)
def sym_mul(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a * c on SymInt/SymFloat"""
    return _binary(b, "Mul", a, c)


@translation(operator.truediv)
def sym_truediv(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a / c: always a float"""
    quotient = b.op("Div", _as(b, a, torch.float64), _as(b, c, torch.float64), dtype=torch.float64)
    return b.cast(quotient, _out(b, torch.float32))


@translation(operator.floordiv)
def sym_floordiv(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a // c (rounds towards minus infinity, unlike ONNX's integer Div)"""
    quotient = b.op("Div", _as(b, a, torch.float64), _as(b, c, torch.float64), dtype=torch.float64)
    return b.cast(b.op("Floor", quotient), _out(b))


@translation(operator.mod)
def sym_mod(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a % c (Python's sign rule: the result has the divisor's sign)"""
    out = _out(b)
    if out.is_floating_point:
        x, y = _as(b, a, torch.float64), _as(b, c, torch.float64)
        return b.cast(b.op("Sub", x, b.op("Mul", y, b.op("Floor", b.op("Div", x, y)))), out)
    return b.op("Mod", _as(b, a, out), _as(b, c, out), dtype=out)


@translation(operator.pow)
def sym_pow(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a ** c"""
    return _binary(b, "Pow", a, c)


@translation(operator.neg)
def sym_neg(b: GraphBuilder, a: Any) -> Value:
    """-a"""
    out = _out(b)
    return b.op("Neg", _as(b, a, out), dtype=out)


@translation(abs, operator.abs)
def sym_abs(b: GraphBuilder, a: Any) -> Value:
    """abs(a)"""
    out = _out(b)
    return b.op("Abs", _as(b, a, out), dtype=out)


@translation(torch.sym_float)
def sym_float(b: GraphBuilder, a: Any) -> Value:
    """torch.sym_float(a)"""
    return _as(b, a, _out(b, torch.float32))


@translation(torch.sym_int)
def sym_int(b: GraphBuilder, a: Any) -> Value:
    """torch.sym_int(a): truncates towards zero like int()"""
    if isinstance(a, Value) and a.dtype is not None and a.dtype.is_floating_point:
        sign = b.op("Sign", a)
        a = b.op("Mul", sign, b.op("Floor", b.op("Abs", a)))
    return _as(b, a, torch.int64)


@translation(math.ceil)
def sym_ceil(b: GraphBuilder, a: Any) -> Value:
    """math.ceil(a) -> int"""
    return b.cast(b.op("Ceil", _as(b, a, torch.float64)), _out(b))


@translation(math.floor)
def sym_floor(b: GraphBuilder, a: Any) -> Value:
    """math.floor(a) -> int"""
    return b.cast(b.op("Floor", _as(b, a, torch.float64)), _out(b))


@translation(math.trunc)
def sym_trunc(b: GraphBuilder, a: Any) -> Value:
    """math.trunc(a) -> int"""
    return sym_int(b, a)


@translation(torch.sym_max)
def sym_max(b: GraphBuilder, a: Any, c: Any) -> Value:
    """torch.sym_max(a, c)"""
    return _binary(b, "Max", a, c)


@translation(torch.sym_min)
def sym_min(b: GraphBuilder, a: Any, c: Any) -> Value:
    """torch.sym_min(a, c)"""
    return _binary(b, "Min", a, c)


@translation(torch.sym_sum)
def sym_sum(b: GraphBuilder, args: Sequence[Any]) -> Value:
    """torch.sym_sum(args): the sum of a list of SymInt/SymFloat (ONNX Sum takes no integers: Adds)"""
    out = _out(b)
    work = torch.float64 if out.is_floating_point else out
    if not args:
        return b.const(0.0 if out.is_floating_point else 0, out)
    total = _as(b, args[0], work)
    for term in args[1:]:
        total = b.op("Add", total, _as(b, term, work), dtype=work)
    return b.cast(total, out)


@translation(torch.sym_ite)
def sym_ite(b: GraphBuilder, cond: Any, a: Any, c: Any) -> Value:
    """torch.sym_ite(cond, a, c): a if cond else c"""
    out = _out(b)
    return b.op("Where", _as(b, cond, torch.bool), _as(b, a, out), _as(b, c, out), dtype=out)


# -- booleans --------------------------------------------------------------------------------------
def _compare(b: GraphBuilder, op_type: str, a: Any, c: Any, negate: bool = False) -> Value:
    floats = any(isinstance(x, float) or isinstance(x, Value) and x.dtype is not None and x.dtype.is_floating_point
                 for x in (a, c))
    work = torch.float64 if floats else torch.int64
    result = b.op(op_type, _as(b, a, work), _as(b, c, work), dtype=torch.bool)
    return b.op("Not", result) if negate else result


@translation(operator.eq)
def sym_eq(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a == c"""
    return _compare(b, "Equal", a, c)


@translation(operator.ne)
def sym_ne(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a != c"""
    return _compare(b, "Equal", a, c, negate=True)


@translation(operator.lt)
def sym_lt(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a < c"""
    return _compare(b, "Less", a, c)


@translation(operator.le)
def sym_le(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a <= c"""
    return _compare(b, "LessOrEqual", a, c)


@translation(operator.gt)
def sym_gt(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a > c"""
    return _compare(b, "Greater", a, c)


@translation(operator.ge)
def sym_ge(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a >= c"""
    return _compare(b, "GreaterOrEqual", a, c)


@translation(torch.sym_not, operator.not_)
def sym_not(b: GraphBuilder, a: Any) -> Value:
    """torch.sym_not(a)"""
    return b.op("Not", _as(b, a, torch.bool), dtype=torch.bool)


@translation(operator.and_)
def sym_and(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a & c on SymBool"""
    return b.op("And", _as(b, a, torch.bool), _as(b, c, torch.bool), dtype=torch.bool)


@translation(operator.or_)
def sym_or(b: GraphBuilder, a: Any, c: Any) -> Value:
    """a | c on SymBool"""
    return b.op("Or", _as(b, a, torch.bool), _as(b, c, torch.bool), dtype=torch.bool)


# -- runtime checks: nothing to emit ---------------------------------------------------------------
@translation(aten._assert_tensor_metadata.default, complex=True)  # `.to(device)` of a complex rotary's freqs
@translation(aten._assert_scalar.default, aten.sym_constrain_range_for_size.default,
             aten.sym_constrain_range.default, aten._assert_tensor_metadata.default, aten._assert_async.msg,
             aten._assert_async.default)
def assert_no_op(b: GraphBuilder, *args: Any, **kwargs: Any) -> None:
    """_assert_scalar(Scalar self, str assert_msg) -> () and the other runtime checks: no ONNX node."""
    return None
