"""Translations written in ONNX Script (torch.onnx's ``custom_translation_table``), run into a GraphBuilder.

A user moving from torch.onnx has translations like ``def custom_add(self, other): return op.Sub(self,
other)`` with ``from onnxscript import opset18 as op``. Calling such a function while onnxscript's default
evaluator is :class:`_Recorder` makes each ``op.X(...)`` one ``b.op("X", ...)`` of onnxsight's builder, so
the function serves as an onnxsight translation unchanged (torch.onnx records them the same way, with its
own IR). An ``@onnxscript.script`` function called inside it runs its Python body op by op.

onnxscript is imported only when such a table is given: the user's functions import it themselves.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

import onnx
import torch

from onnxsight.exporter._builder import GraphBuilder, Value

_PYTHON_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float32}


def onnxscript_translation(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (ONNX Script ops on its tensor arguments) as an onnxsight translation ``(b, *args, **kwargs)``."""
    @functools.wraps(fn)
    def translate(b: GraphBuilder, *args: Any, **kwargs: Any) -> Any:
        from onnxscript._internal import evaluator

        with evaluator.default_as(_Recorder(b)):
            return fn(*args, **kwargs)

    return translate


class _Recorder:
    """onnxscript's evaluator protocol (``eval_op``, ``eval_function``) writing nodes into ``b``."""

    def __init__(self, b: GraphBuilder) -> None:
        self.b = b

    def eval_op(self, op: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        schema = op.op_schema
        if schema is None:
            raise ValueError(f"ONNX Script op {op.name!r} has no schema in domain {op.opset.domain!r}")
        formal = list(schema.inputs)
        names = {p.name for p in formal}
        inputs, attributes = list(args), {k: v for k, v in kwargs.items() if k not in names and not k.startswith("_")}
        for position, parameter in enumerate(formal):   # inputs passed by name, in the schema's order
            if parameter.name in kwargs:
                inputs.extend([None] * (position + 1 - len(inputs)))
                inputs[position] = kwargs[parameter.name]
        like = next((v for v in _flat(inputs) if isinstance(v, Value)), None)
        values = [self._value(item, like) for item in _flat(inputs)]
        outputs = int(kwargs.get("_num_outputs", 0)) or _count_outputs(schema, inputs, attributes)
        domain = op.opset.domain
        return self.b.op(schema.name, *values, outputs=outputs, domain=domain,
                         domain_version=op.opset.version if domain else None, **attributes)

    def eval_function(self, function: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        return function.function(*args, **kwargs)   # an @script function's Python body, op by op

    def _value(self, item: Any, like: Value | None) -> Value | None:
        if item is None or isinstance(item, Value):
            return item
        if isinstance(item, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in item):
            return self.b.const(list(item), torch.int64)    # a shape or axes, as ONNX Script writes them
        if isinstance(item, (bool, int, float)):
            dtype = like.dtype if like is not None and like.dtype is not None else _PYTHON_DTYPES[type(item)]
            return self.b.const(item, dtype)
        if isinstance(item, torch.Tensor):
            return self.b.const(item)
        raise TypeError(f"an ONNX Script op's input must be a tensor, a number or a list of ints, "
                        f"got {type(item).__name__}: {item!r}")


def _flat(inputs: Sequence[Any]) -> list[Any]:
    """A variadic input's list spread out (``op.Concat(*tensors)`` and ``op.Concat(tensors)`` alike)."""
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)) and any(isinstance(v, Value) for v in inputs[0]):
        return list(inputs[0])
    return list(inputs)


def _count_outputs(schema: Any, inputs: Sequence[Any], attributes: Mapping[str, Any]) -> int:
    """The schema's required outputs (BatchNormalization's Y alone), Split's from its attribute or split list."""
    if schema.name == "Split" and not schema.domain:
        if "num_outputs" in attributes:
            return int(attributes["num_outputs"])
        if len(inputs) > 1 and isinstance(inputs[1], (list, tuple)):
            return len(inputs[1])
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    return max(1, sum(1 for p in schema.outputs if p.option != optional))
