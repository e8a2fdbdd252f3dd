"""Runners: eager PyTorch over the exported program, and ONNX Runtime with a provider list.

Both sit behind one small interface (``activate``/``infer``/``deactivate``);
onnxruntime is imported lazily, on activation.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np
import onnx

from onnxsight import rules
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.verification._graph import elem_type_of
from onnxsight.verification._tolerance import dtype_name

# Element types ONNX Runtime cannot hand back as numpy arrays; they are widened to float32 first.
_WIDENED = {"bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"}


# ONNX Runtime's own C++ log goes to the process's stderr; only fatal lines pass. Errors reach the
# diagnostics through the exceptions ONNX Runtime raises (ORT001/ORT002 carry their text).
_ORT_LOG_SEVERITY = 4


class VerificationError(RuntimeError):
    """Verification could not run: a bad call (VER001-VER015), or an unavailable provider (ORT003).

    ``rule`` is the code of the rule that names the problem; ``diagnostics`` holds the diagnostic.
    """

    __module__ = "onnxsight"  # public as onnxsight.VerificationError: tracebacks say so

    def __init__(self, message: str, diagnostics: Sequence[Any] = (), rule: str | None = None) -> None:
        super().__init__(message)
        self.diagnostics = list(diagnostics)
        self.rule = rule or next((getattr(d, "code", None) for d in self.diagnostics), None)


def refuse(rule: Any, *, properties: Mapping[str, Any] | None = None, **fields: Any) -> VerificationError:
    """The error for a bad call to verify(): ``CODE [name] message``, carrying its diagnostic.

    Located at the user's line that called onnxsight (the innermost user frame).
    """
    from onnxsight.diagnostics import caller_location

    ctx = DiagnosticContext(fallback_location=caller_location())
    diagnostic = ctx.emit(rule, properties=properties, **fields)
    return VerificationError(f"{rule.code} [{rule.name}] {rule.format(**fields)}",
                             [diagnostic] if diagnostic else [], rule=rule.code)


class Runner(Protocol):
    """The interface every runner implements."""

    name: str

    def activate(self) -> None: ...

    def infer(self, feeds: Mapping[str, Any]) -> dict[str, Any]: ...

    def deactivate(self) -> None: ...


# -- float32 on GPUs ------------------------------------------------------------------------------
# Ampere and later GPUs run float32 matrix products and convolutions in TF32 (a 10-bit mantissa) unless
# told not to: ONNX Runtime's CUDA provider does by default (use_tf32=1), and so does cuDNN in PyTorch
# (torch.backends.cudnn.allow_tf32). A float32 value would then differ by ~1e-3 relative because of the
# GPU's math mode, not the export (seen on an H100: every Gemm of a correct MLP "diverged" by 5e-4).
# Verification runs both sides in full float32.
_FULL_FLOAT32_OPTIONS = {"CUDAExecutionProvider": {"use_tf32": "0"}}


def with_provider_options(providers: Sequence[str]) -> list[Any]:
    """``providers`` as ONNX Runtime takes them, with the options that keep float32 exact (TF32 off)."""
    return [(p, _FULL_FLOAT32_OPTIONS[p]) if p in _FULL_FLOAT32_OPTIONS else p for p in providers]


@contextlib.contextmanager
def full_float32(device: str) -> Iterator[None]:
    """PyTorch on CUDA without TF32 for the duration (the user's settings are put back afterwards)."""
    import torch

    if not device.startswith("cuda"):
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


# -- PyTorch ---------------------------------------------------------------------------------------
class TorchRunner:
    """Runs an ExportedProgram's FX graph node by node with an FX Interpreter, on CPU or CUDA."""

    def __init__(self, exported_program: Any, *, device: str = "cpu") -> None:
        self.exported_program = exported_program
        self.device = device
        self.name = f"torch[{device}]"
        self._state: list[Any] | None = None
        self.env: dict[Any, Any] = {}

    def activate(self) -> None:
        """Collect the program's parameters, buffers and constants on the device, in signature order."""
        import torch
        from torch.export import graph_signature as gs

        program = self.exported_program
        state: list[Any] = []
        for spec in program.graph_signature.input_specs:
            if spec.kind == gs.InputKind.USER_INPUT:
                state.append(None)
            elif spec.kind in (gs.InputKind.PARAMETER, gs.InputKind.BUFFER):
                tensor = program.state_dict.get(spec.target)
                state.append(program.constants[spec.target] if tensor is None else tensor)
            elif spec.kind in (gs.InputKind.CONSTANT_TENSOR, gs.InputKind.CUSTOM_OBJ):
                state.append(program.constants[spec.target])
            else:
                state.append(None)  # effect tokens carry no data
        self._state = [t.to(self.device) if isinstance(t, torch.Tensor) else t for t in state]

    def iterate(self, inputs: Sequence[Any]) -> Iterator[tuple[Any, Any]]:
        """Yield ``(fx_node, value)`` for every computing node, keeping values in ``self.env``.

        The caller frees values it no longer needs with :meth:`release`.
        """
        import torch

        if self._state is None:
            self.activate()
        gm = self.exported_program.graph_module
        interpreter = torch.fx.Interpreter(gm, garbage_collect_values=False)
        self.env = interpreter.env
        user = iter([t.to(self.device) if isinstance(t, torch.Tensor) else t for t in inputs])
        state = iter(self._state or [])
        with torch.no_grad(), full_float32(self.device):
            for node in gm.graph.nodes:
                if node.op == "placeholder":
                    value = next(state, None)
                    if value is None:  # a user input; non-tensor ones were specialised at export
                        meta = node.meta.get("val")
                        value = next(user) if isinstance(meta, torch.Tensor) or meta is None else meta
                    self.env[node] = value
                    continue
                if node.op == "output":
                    break
                self.env[node] = interpreter.run_node(node)
                yield node, self.env[node]

    def release(self, node: Any) -> None:
        self.env.pop(node, None)

    def infer(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run the whole program on ``feeds`` (user inputs by name, in order); return every value by node name."""
        return {node.name: value for node, value in self.iterate(list(feeds.values()))}

    def deactivate(self) -> None:
        self._state = None
        self.env = {}


# -- ONNX Runtime ----------------------------------------------------------------------------------
def available_providers() -> list[str]:
    """The ONNX Runtime execution providers this machine has (what a run record lists)."""
    import onnxruntime as ort

    return list(ort.get_available_providers())


def resolve_providers(requested: Sequence[str], ctx: DiagnosticContext, *, fallback: bool = False) -> list[str]:
    """The providers to use; an unavailable one raises (ORT003) or, with ``fallback``, is dropped (ORT004)."""
    import onnxruntime as ort

    available = list(ort.get_available_providers())
    missing = [p for p in requested if p not in available]
    if not missing:
        return list(requested)
    if not fallback:
        diagnostic = ctx.emit(rules.PROVIDER_UNAVAILABLE, requested=", ".join(missing), available=available)
        raise VerificationError(rules.PROVIDER_UNAVAILABLE.format(requested=", ".join(missing), available=available),
                                [diagnostic] if diagnostic else [])
    used = [p for p in requested if p in available] or ["CPUExecutionProvider"]
    ctx.emit(rules.PROVIDER_FALLBACK, requested=", ".join(missing), used=", ".join(used))
    return used


class OrtRunner:
    """ONNX Runtime on a provider list; one session per loaded model, feeds and outputs as numpy."""

    def __init__(self, providers: Sequence[str] = ("CPUExecutionProvider",), *,
                 ctx: DiagnosticContext | None = None, fallback: bool = False,
                 session_options: Any = None) -> None:
        self.requested = list(providers)
        self.session_options = session_options  # the user's onnxruntime.SessionOptions; None: ORT's defaults
        self.providers = list(providers)
        self.ctx = ctx or DiagnosticContext()
        self.fallback = fallback
        self.name = f"onnxruntime[{', '.join(self.requested)}]"
        self._session: Any = None
        self._widened: dict[str, str] = {}
        self.output_types: dict[str, str] = {}

    def activate(self) -> None:
        self.providers = resolve_providers(self.requested, self.ctx, fallback=self.fallback)

    def load(self, model: onnx.ModelProto) -> None:
        """Create the session for ``model``; outputs ORT cannot return as numpy get a Cast to float32.

        The previous session is released first: two chunk sessions never hold memory at once.
        """
        self._session = None
        session = self._create(model)
        types = {o.name: dtype_name(o.type) for o in session.get_outputs()}
        widen = [name for name, t in types.items() if t in _WIDENED]
        self._widened = {}
        if widen:
            model = _with_widened_outputs(model, widen)
            self._widened = {f"{name}::float32": name for name in widen}
            session = self._create(model)
        self._session = session
        self.output_types = types
        self._input_types = {i.name: dtype_name(i.type) for i in session.get_inputs()}

    def _create(self, model: onnx.ModelProto) -> Any:
        import onnxruntime as ort

        options = self.session_options
        if options is None:
            options = ort.SessionOptions()
            options.log_severity_level = _ORT_LOG_SEVERITY
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=with_provider_options(self.providers))
        used = session.get_providers()
        dropped = [p for p in self.providers if p not in used]
        if dropped:  # e.g. CUDA listed as available but its libraries failed to load
            if not self.fallback:
                diagnostic = self.ctx.emit(rules.PROVIDER_UNAVAILABLE, requested=", ".join(dropped), available=used)
                raise VerificationError(rules.PROVIDER_UNAVAILABLE.format(requested=", ".join(dropped),
                                                                          available=used),
                                        [diagnostic] if diagnostic else [])
            self.ctx.emit(rules.PROVIDER_FALLBACK, requested=", ".join(dropped), used=", ".join(used))
            self.providers = list(used)
        return session

    def infer(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run the loaded model; bfloat16/float8 outputs come back widened to float32."""
        import onnxruntime as ort

        prepared = {name: _as_feed(value, self._input_types.get(name)) for name, value in feeds.items()}
        names = [o.name for o in self._session.get_outputs()]
        run_options = ort.RunOptions()
        run_options.log_severity_level = _ORT_LOG_SEVERITY
        if any(isinstance(v, ort.OrtValue) for v in prepared.values()):
            values = {k: v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(v)
                      for k, v in prepared.items()}
            outputs = [o.numpy() for o in self._session.run_with_ort_values(names, values, run_options)]
        else:
            outputs = self._session.run(names, prepared, run_options)
        return {self._widened.get(name, name): np.asarray(out) for name, out in zip(names, outputs)}

    def deactivate(self) -> None:
        self._session = None


def _as_feed(value: Any, declared: str | None) -> Any:
    """A numpy array (or OrtValue for bfloat16) of the declared dtype."""
    array = np.asarray(value)  # NOTE: not np.ascontiguousarray, which turns a 0-d value into shape [1]
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    if declared is None or declared == "unknown":
        return array
    if declared in _WIDENED:
        import ml_dtypes
        import onnxruntime as ort

        wanted = np.dtype(getattr(ml_dtypes, declared.replace("float8", "float8_") if declared != "bfloat16"
                                  else "bfloat16"))
        bits = array if array.dtype == wanted else np.ascontiguousarray(array.astype(wanted))  # a shared weight: no copy
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits.view(np.uint8 if "float8" in declared
                                                                         else np.uint16), elem_type_of(declared))
    if dtype_name(array.dtype) != declared:
        return array.astype(declared if declared != "bool" else np.bool_)
    return array


def _with_widened_outputs(model: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    outputs = list(copy.graph.output)
    del copy.graph.output[:]
    for out in outputs:
        if out.name in names:
            copy.graph.node.append(onnx.helper.make_node("Cast", [out.name], [f"{out.name}::float32"],
                                                         to=onnx.TensorProto.FLOAT))
            copy.graph.output.append(onnx.ValueInfoProto(name=f"{out.name}::float32"))
        else:
            copy.graph.output.append(out)
    return copy
