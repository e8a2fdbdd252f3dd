"""Stand-ins for the helper modules PyTorch's ``test/onnx`` files import, for ``upstream_matrix``.

``test_pytorch_onnx_onnxruntime.py`` imports ``pytorch_test_common``, ``onnx_test_common`` and
``parameterized``. Upstream's ``run_test`` exports with the TorchScript exporter; the stand-in here keeps
its semantics (a ScriptModule given to the tracing class runs nothing, inputs are deep-copied, the
model is put in eval mode, ``additional_test_inputs`` are run through the same exported model, the
outputs compared with upstream's own comparison at the test's ``rtol``/``atol`` with shape and dtype
checks) and exports with the exporter under test instead. The decorators behave as upstream's.

``install(exporter)`` puts the three modules in ``sys.modules`` and routes ``torch.onnx.export``
(the calls the test files make themselves) to the exporter under test, always with ``dynamo=True``.
"""

from __future__ import annotations

import functools
import io
import os
import random
import sys
import types
import unittest
from typing import Any, Callable

import numpy as np
import torch
from torch.testing._internal import common_utils
from torch.utils import _pytree

# The opsets of the upstream class the matrix runs (``..._opset_version_20_is_script_False_...``).
MIN_ONNX_OPSET_VERSION, MAX_ONNX_OPSET_VERSION = 9, 20

# Filled by install(): the exporter under test, and what the running case has done so far.
EXPORT: Callable[..., Any] | None = None
STATE: dict[str, Any] = {"phase": "test", "exports": 0}


def _skipper(condition: Callable[[Any], bool], reason: Callable[[Any], str]) -> Callable:
    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            if condition(self):
                raise unittest.SkipTest(reason(self))
            return func(self, *args, **kwargs)
        return wrapper
    return decorator


def _pytorch_test_common() -> types.ModuleType:
    m = types.ModuleType("pytorch_test_common")
    m.BATCH_SIZE, m.RNN_BATCH_SIZE, m.RNN_SEQUENCE_LENGTH, m.RNN_INPUT_SIZE, m.RNN_HIDDEN_SIZE = 2, 7, 11, 5, 3
    m.skipIfUnsupportedMinOpsetVersion = lambda v: _skipper(
        lambda s: s.opset_version < v, lambda s: f"Unsupported opset_version: {s.opset_version} < {v}")
    m.skipIfUnsupportedMaxOpsetVersion = lambda v: _skipper(
        lambda s: s.opset_version > v, lambda s: f"Unsupported opset_version: {s.opset_version} > {v}")
    m.skipIfUnsupportedOpsetVersion = lambda vs: _skipper(
        lambda s: s.opset_version in vs, lambda s: "Skip verify test for unsupported opset_version")

    def scripting_skip(script: bool) -> Callable:
        def factory(skip_before_opset_version: int | None = None, reason: str = "") -> Callable:
            def applies(s: Any) -> bool:
                before = skip_before_opset_version
                return (before is None or s.opset_version < before) and s.is_script == script
            kind = "TorchScript" if script else "torch trace"
            return _skipper(applies, lambda s: f"Skip verify test for {kind}. {reason}")
        return factory

    m.skipScriptTest, m.skipTraceTest = scripting_skip(True), scripting_skip(False)
    m.skipIfQuantizationBackendQNNPack = _skipper(
        lambda s: torch.backends.quantized.engine == "qnnpack", lambda s: "Not compatible with QNNPack")

    def setting(name: str) -> Callable:
        def decorator(func: Callable) -> Callable:
            @functools.wraps(func)
            def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
                setattr(self, name, False)
                return func(self, *args, **kwargs)
            return wrapper
        return decorator

    m.skipShapeChecking, m.skipDtypeChecking = setting("check_shape"), setting("check_dtype")

    class ExportTestCase(common_utils.TestCase):
        def setUp(self) -> None:
            super().setUp()
            torch.manual_seed(0)
            random.seed(0)
            np.random.seed(0)

    m.ExportTestCase = ExportTestCase
    return m


def _flat_outputs(outputs: Any) -> list[np.ndarray]:
    """Eager outputs as the exporters flatten them: pytree order, None dropped, Python scalars as tensors."""
    flat = [o for o in _pytree.tree_leaves(outputs) if o is not None]
    return [(o if isinstance(o, torch.Tensor) else torch.tensor(o)).detach().cpu().resolve_conj().numpy()
            for o in flat]


def run_model_test(test: Any, model: Any, input_args: Any, input_kwargs: Any = None, *, rtol: float = 1e-3,
                   atol: float = 1e-7, dynamic_axes: Any = None, additional_test_inputs: Any = None,
                   input_names: Any = None, output_names: Any = None,
                   training: Any = torch.onnx.TrainingMode.EVAL, **_legacy: Any) -> None:
    """Upstream's ``verification.verify``: export once, run the first and every additional input set."""
    from torch.onnx._internal.torchscript_exporter import verification

    options = verification.VerificationOptions(rtol=rtol, atol=atol, check_shape=test.check_shape,
                                               check_dtype=test.check_dtype)
    if training == torch.onnx.TrainingMode.TRAINING:
        model.train()
    elif training == torch.onnx.TrainingMode.EVAL:
        model.eval()
    with torch.no_grad():
        args, kwargs = verification._prepare_input_for_pytorch(input_args, input_kwargs)
        if not kwargs and args and isinstance(args[-1], dict):
            args = (*args, {})  # upstream: a trailing dict is an argument, not the keyword arguments
        reference = verification._try_clone_model(model)  # upstream's: the model itself where it cannot be copied
        STATE["phase"], STATE["exports"] = "export", STATE["exports"] + 1
        program = EXPORT(model, args, kwargs=kwargs, opset_version=test.opset_version, input_names=input_names,
                         output_names=output_names, dynamic_axes=dynamic_axes, training=training)
        for inputs in [(input_args, input_kwargs)] + [(a, None) for a in additional_test_inputs or ()]:
            pt_args, pt_kwargs = verification._prepare_input_for_pytorch(*inputs)
            expected = verification._try_clone_model(reference)(*pt_args, **pt_kwargs)
            run_args, run_kwargs = verification._prepare_input_for_pytorch(*inputs)
            STATE["phase"] = "run"
            actual = [o.detach().numpy() if isinstance(o, torch.Tensor) else np.asarray(o)
                      for o in program(*run_args, **run_kwargs)]
            STATE["phase"] = "compare"
            verification._compare_onnx_pytorch_outputs_in_np(actual, _flat_outputs(expected), options)
        STATE["phase"] = "test"


def _onnx_test_common(base: type) -> types.ModuleType:
    m = types.ModuleType("onnx_test_common")
    m.MIN_ONNX_OPSET_VERSION, m.MAX_ONNX_OPSET_VERSION = MIN_ONNX_OPSET_VERSION, MAX_ONNX_OPSET_VERSION
    m.parameterize_class_name = lambda cls, idx, params: cls.__name__ + "_" + "_".join(
        f"{k}_{v}" for k, v in params.items())

    class _TestONNXRuntime(base):
        opset_version = MAX_ONNX_OPSET_VERSION
        keep_initializers_as_inputs = False
        is_script = False
        check_shape = True
        check_dtype = True

        def setUp(self) -> None:
            super().setUp()
            self.is_script_test_enabled = True

        def run_test(self, model: Any, input_args: Any, input_kwargs: Any = None, **options: Any) -> None:
            is_model_script = isinstance(model, (torch.jit.ScriptModule, torch.jit.ScriptFunction))
            if not is_model_script and not self.is_script:  # upstream's tracing class runs no ScriptModule
                run_model_test(self, model, input_args, input_kwargs, **options)

    m._TestONNXRuntime = _TestONNXRuntime
    return m


def _parameterized() -> types.ModuleType:
    m = types.ModuleType("parameterized")

    def parameterized_class(attrs: Any, input_values: Any, class_name_func: Callable) -> Callable:
        def decorator(base: type) -> type:
            module = sys.modules[base.__module__]
            for index, values in enumerate(input_values):
                params = dict(zip(attrs, values))
                name = class_name_func(base, index, params)
                setattr(module, name, type(name, (base,), dict(params)))
            return base
        return decorator

    m.parameterized_class = parameterized_class
    return m


def write_model(program: Any, f: Any) -> None:
    data = program.model_proto.SerializeToString()
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as handle:
            handle.write(data)
    elif isinstance(f, io.IOBase):
        f.write(data)


def install(export: Callable[..., Any], *, route: bool, force_dynamo: bool) -> None:
    """Register the stand-ins; with ``route`` the test files' own torch.onnx.export calls go to ``export``.

    ``force_dynamo``: the calls' own ``dynamo=False`` (upstream's TorchScript exports in the ONNX Runtime
    file) is dropped, so that they too export with the exporter under test.
    """
    global EXPORT
    EXPORT = export
    common = _pytorch_test_common()
    sys.modules.update({"pytorch_test_common": common, "onnx_test_common": _onnx_test_common(common.ExportTestCase),
                        "parameterized": _parameterized()})
    if not route:
        return

    def routed(model: Any, args: Any = (), f: Any = None, **options: Any) -> Any:
        if force_dynamo:
            for legacy in ("dynamo", "fallback", "example_outputs", "use_external_data_format"):
                options.pop(legacy, None)
        STATE["phase"], STATE["exports"] = "export", STATE["exports"] + 1
        path = f if isinstance(f, (str, os.PathLike)) else None  # a path: the exporter saves it as it does
        program = export(model, args if isinstance(args, tuple) else (args,), path, **options)
        STATE["phase"] = "test"
        if f is not None and path is None:
            write_model(program, f)
        return program

    torch.onnx.export = routed
