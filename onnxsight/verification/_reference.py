"""A float64 noise floor: judge ONNX against PyTorch in float64, allowing PyTorch's own rounding error.

``verify(prog, reference="float64")`` runs the exported program a second
time, in float64 (a copy of its graph whose floating weights, buffers,
inputs and dtype arguments are float64), in lockstep with the ordinary
PyTorch run. For each compared value the model-precision PyTorch error
``|torch - torch64|`` is the noise floor: it is what rounding alone does to
this value in this model, through every layer before it. ONNX Runtime is
then compared with ``torch64`` and an element passes when its error is
within ``max(tolerance, k * noise floor)``. Accumulated rounding in a deep
or half-precision model is therefore not a root cause, while a translation
error (a wrong constant, swapped operands, a wrong axis), far above what
rounding does to the same value, still is.

Memory: the float64 values live exactly as long as their float32 twins
(the engine releases both together), so the float64 run adds about twice
the live activations and a float64 copy of the weights.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from typing import Any, Iterator, Sequence

import numpy as np

from onnxsight.verification._decisions import discrete
from onnxsight.verification._metrics import Metrics, compare, to_numpy
from onnxsight.verification._runners import TorchRunner
from onnxsight.verification._tolerance import Bounds, is_floating

REFERENCES = ("float64",)

# NOTE: k = 4. PyTorch and ONNX Runtime are two independent implementations of the same
# float32 (or float16) arithmetic: GEMM blocking, reduction order and exp/tanh
# approximations differ, so ONNX Runtime's rounding error is of the same order as
# PyTorch's but not equal to it. The two errors are uncorrelated element by element, so the
# floor is the value's worst PyTorch error, not each element's (an elementwise floor would
# fail the elements where PyTorch happened to round well). Measured over the dev zoo (smoke,
# tricky, transformers; 4242 values, both modes), ONNX Runtime's worst error / PyTorch's:
# median 1.0, 99th percentile 1.8, max 4.7. With k = 2, 20 values (0.5%) rest on the plain
# tolerance alone; with k = 4, 3 (0.07%), which it covers. An injected translation error
# (docs/mutation.json: +1% of a value's magnitude, swapped operands, a changed attribute) is
# far above 4x the floor: every one is still found in this mode.
NOISE_FACTOR = 4.0


def make_reference(reference: str | None, runner: TorchRunner, *, factor: float = NOISE_FACTOR
                   ) -> "Float64Reference | None":
    """The noise-floor runner for ``reference`` (None: judge against the model-precision run)."""
    if reference is None:
        return None
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {', '.join(REFERENCES)} or None; got {reference!r}")
    return Float64Reference(runner, factor=factor)


class Float64Reference:
    """Wraps a :class:`TorchRunner`: the engine iterates it as usual; a float64 twin runs alongside.

    ``env`` is the wrapped runner's (model precision); ``env64`` maps the same FX nodes to
    their float64 values. :meth:`judge` is the engine's hook for the verdict of one value.
    """

    def __init__(self, runner: TorchRunner, *, factor: float = NOISE_FACTOR) -> None:
        self.inner = runner
        self.factor = float(factor)
        self.name = runner.name
        self.device = runner.device
        self.env64: dict[Any, Any] = {}
        self._twin: TorchRunner | None = None
        self._twin_of: dict[Any, Any] = {}

    @property
    def env(self) -> dict[Any, Any]:
        return self.inner.env

    def activate(self) -> None:
        self.inner.activate()
        self._twin = TorchRunner(float64_program(self.inner.exported_program), device=self.device)
        self._twin.activate()

    def iterate(self, inputs: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
        """The model-precision run, node by node, with the float64 twin one node behind it."""
        if self._twin is None:
            self.activate()
        assert self._twin is not None
        twin = self._twin.iterate([_to64(t) for t in inputs])
        for node, value in self.inner.iterate(inputs):
            twin_node, twin_value = next(twin)
            if discrete(value) and discrete(twin_value):
                # the twin follows the model-precision run's decisions (nms keeps, argmax, masks), so
                # the floor measures rounding along one path, not a float64 nms keeping other boxes
                twin_value = self._twin.env[twin_node] = value.to(twin_value.device)
            self._twin_of[node] = twin_node
            self.env64[node] = twin_value
            yield node, value

    def release(self, node: Any) -> None:
        self.inner.release(node)
        self.env64.pop(node, None)
        if self._twin is not None and node in self._twin_of:
            self._twin.release(self._twin_of.pop(node))

    def infer(self, feeds: Any) -> dict[str, Any]:
        return {node.name: value for node, value in self.iterate(list(feeds.values()))}

    def deactivate(self) -> None:
        self.inner.deactivate()
        if self._twin is not None:
            self._twin.deactivate()
        self._twin, self.env64, self._twin_of = None, {}, {}

    def judge(self, node: Any, index: int | None, expected: np.ndarray, actual: np.ndarray, bounds: Bounds,
              metrics: Metrics, *, expected_dtype: Any = None, actual_dtype: Any = None) -> Metrics:
        """The verdict on one value: ONNX vs float64, within ``max(tolerance, k * PyTorch's error)``.

        Non-floating values, shape disagreements and values without a float64 twin keep
        the model-precision verdict ``metrics``.
        """
        twin = self.env64.get(node)
        if twin is not None and index is not None:
            twin = twin[index]
        if twin is None or bounds.exact or not is_floating(expected_dtype or expected.dtype) \
                or metrics.shape_mismatch:
            return metrics
        exact = to_numpy(twin).astype(np.float64)
        if exact.shape != expected.shape:
            return metrics
        return judge_with_floor(exact, expected, actual, bounds, self.factor, metrics=metrics)


def judge_with_floor(exact: np.ndarray, model: np.ndarray, actual: np.ndarray, bounds: Bounds, factor: float, *,
                     metrics: Metrics | None = None, expected_dtype: Any = None, actual_dtype: Any = None) -> Metrics:
    """Metrics of ``actual`` against ``exact`` (float64), passing within the noise floor of ``model``.

    An element passes when ``|actual - exact| <= max(atol + rtol*|exact|, factor * floor)``,
    ``floor`` being the largest finite ``|model - exact|`` of the value, or when it equals the
    model-precision result exactly (including the same NaN/Inf). ``metrics`` (model precision
    vs ``actual``, when the caller has them) keep their cosine and NaN/Inf counts; the
    differences are recomputed against ``exact``.
    """
    if metrics is None:
        metrics = compare(exact, actual, bounds, expected_dtype=expected_dtype, actual_dtype=actual_dtype)
    e = exact.ravel()
    m = np.asarray(model, dtype=np.float64).ravel()
    a = np.asarray(actual, dtype=np.float64).ravel()
    noise = np.abs(m - e)
    finite_noise = noise[np.isfinite(noise)]
    floor = factor * float(finite_noise.max()) if finite_noise.size else 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - e)
        magnitude = np.abs(e)
        within = diff <= np.maximum(bounds.atol + bounds.rtol * magnitude, floor)
    same_as_model = (a == m) | (np.isnan(a) & np.isnan(m))
    special = ~np.isfinite(e) & ~np.isfinite(a) & ((np.isnan(e) & np.isnan(a)) | (e == a))
    bad = int(np.count_nonzero(~(within | same_as_model | special)))
    fraction = bad / e.size if e.size else 0.0
    finite = diff[np.isfinite(diff)]
    rel = finite / np.maximum(magnitude[np.isfinite(diff)], bounds.near_zero or np.finfo(np.float64).tiny)
    return dataclasses.replace(
        metrics, passed=bool(fraction <= bounds.max_mismatch_fraction), mismatch_fraction=fraction,
        max_abs_diff=float(finite.max()) if finite.size else 0.0, max_rel_diff=float(rel.max()) if rel.size else 0.0,
        mean_abs_diff=float(finite.mean()) if finite.size else 0.0)


# -- the float64 program ------------------------------------------------------------------------------
def float64_program(program: Any) -> Any:
    """What :class:`TorchRunner` needs of ``program``, with every floating tensor and dtype argument float64.

    The graph module is copied (its nodes keep their names and order, so the two runs step
    together); the program itself is not modified.
    """
    import torch

    graph_module = copy.deepcopy(program.graph_module)
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if node.target is torch.ops.aten._assert_tensor_metadata.default:
                    # `.to(float32)` asserts its input's dtype; a value made at the default dtype (an
                    # integer divided by 2) is still float32 in the twin, so the widened check fails.
                    # The model-precision run makes the check; the twin keeps the node (lockstep).
                    node.target = _checked_elsewhere
                node.args = _args64(node.args)
                node.kwargs = _args64(node.kwargs)
            module.recompile()
    return types.SimpleNamespace(
        graph_module=graph_module, graph_signature=program.graph_signature,
        state_dict={k: _to64(v) for k, v in program.state_dict.items()},
        constants={k: _to64(v) for k, v in program.constants.items()})


def _checked_elsewhere(*args: Any, **kwargs: Any) -> None:
    """Stands in for a metadata assertion in the float64 twin."""
    return None


_WIDER = {"float32": "float64", "float16": "float64", "bfloat16": "float64", "complex64": "complex128",
          "complex32": "complex128"}


def _args64(value: Any) -> Any:
    import torch

    if isinstance(value, torch.dtype):
        wider = _WIDER.get(str(value).removeprefix("torch."))
        return getattr(torch, wider) if wider else value
    if isinstance(value, tuple):
        return tuple(_args64(v) for v in value)
    if isinstance(value, list):
        return [_args64(v) for v in value]
    if isinstance(value, dict):
        return {k: _args64(v) for k, v in value.items()}
    return value


def _to64(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
        return value.detach().to(torch.complex128 if value.is_complex() else torch.float64)
    return value

