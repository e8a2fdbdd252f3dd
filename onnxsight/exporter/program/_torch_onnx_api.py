"""What torch.onnx's ONNXProgram offers that its users call, on onnxsight's program (issue 25).

torch.onnx's documentation has users write ``onnx_program.optimize()``, ``onnx_program.save(...)``,
``onnx_program(x)`` and ``onnx_program.call_reference(x)``. The ones that mean the same here run
(:class:`TorchOnnxMethods`, mixed into :class:`ONNXProgram`); the others raise an ``AttributeError``
(so ``hasattr`` stays a plain False) whose message is ARG020, naming onnxsight's way.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from onnxsight import rules
from onnxsight.exporter import _dtypes

# name -> (what it is in torch.onnx, and why not here; what to write instead)
_REFUSED: dict[str, tuple[str, str]] = {
    "model": ("an onnx_ir model, which onnxsight does not build",
              "prog.model_proto (an onnx.ModelProto); onnx_ir.from_proto(prog.model_proto) gives an "
              "onnx_ir model to edit, saved with onnx_ir.save"),
    "apply_weights": ("it swaps the weights of the exported model in place; onnxsight's program runs and "
                      "verifies the weights it exported",
                      "prog.save(path, weights=state_dict) writes the model with those weights (a state_dict, "
                      "a torch.save file or safetensors), or export the model with its new weights"),
    "rename_axes": ("it renames dims after export; onnxsight names them when exporting",
                    "name the dims in export(): dynamic_shapes={'x': {0: 'batch'}} (a string is the ONNX "
                    "dim's name), or dynamic_axes={'x': {0: 'batch'}}"),
    "compute_values": ("it runs ONNX Runtime for intermediate values, unchecked",
                       "onnxsight.verify(prog, args) computes every intermediate value in ONNX Runtime and "
                       "compares it with PyTorch's (result.nodes, one row per value, with the first "
                       "divergence in result.root_causes)"),
}


def refusal(name: str, reason: str, instead: str) -> str:
    """ARG020's message, with its code first (as the command line prints rules)."""
    rule = rules.TORCH_ONNX_PROGRAM_API_REFUSED
    return f"{rule.code} " + rule.format(name=name, reason=reason, instead=instead)


class TorchOnnxMethods:
    """torch.onnx's ONNXProgram methods that mean the same on onnxsight's (see the module docstring)."""

    _translated: Any
    record: Any

    def __getattr__(self, name: str) -> Any:
        # NOTE: only reached when normal lookup fails; dunder look-ups (copy, pickle) fall through.
        if name in _REFUSED:
            raise AttributeError(refusal(name, *_REFUSED[name]))
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def optimize(self) -> None:
        """torch.onnx's ``onnx_program.optimize()``: onnxsight's optimize stage, in place.

        export() runs it already (``optimize=True``, the default), so then nothing changes; after
        ``optimize=False`` it runs now, as export() would have.
        """
        from onnxsight.exporter.optimize import optimize_translated

        stage = next((s for s in self.record.stages if s.name == "optimize"), None)
        if stage is None or stage.status != "skipped":
            return
        report = optimize_translated(self._translated, self._translated.opset_imports.get("", self.record.opset))
        stage.status, stage.detail = "ok", f"{report.summary()} (ONNXProgram.optimize())"
        self._model_proto = None    # rebuilt from the optimised graph, and so are the sessions
        self.close()

    def call_reference(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        """Run the model with ONNX's reference evaluator (``onnx.reference``), as torch.onnx's does.

        Slow, and it runs every type ONNX defines, float4 included, where ONNX Runtime has no kernel.
        Complex inputs and outputs are taken and given back as complex, as ``prog(...)`` does.
        """
        from onnx.reference import ReferenceEvaluator

        from onnxsight.exporter.translate._complex_io import from_pairs, to_pairs

        tensors = self.flat_inputs(args, kwargs)  # type: ignore[attr-defined]
        feeds = {name: _reference_array(to_pairs(t)) for name, t in zip(self.input_names, tensors)}  # type: ignore[attr-defined]
        outputs = ReferenceEvaluator(self.model_proto).run(None, feeds)  # type: ignore[attr-defined]
        values = from_pairs([_torch_tensor(o) for o in outputs], self.output_names,  # type: ignore[attr-defined]
                            self._translated.complex_outputs)
        return tuple(values)

    def initialize_inference_session(self, initializer: Callable[..., Any] | None = None) -> None:
        """Start the ONNX Runtime session ``prog(...)`` runs (else made on the first call)."""
        if initializer is not None:
            raise AttributeError(refusal(
                "initialize_inference_session(initializer)",
                "it builds the session with your function; onnxsight builds it from the providers",
                "prog.session(providers=[...]) gives the session (cached), and prog(x, providers=[...]) runs "
                "it"))
        self.session()  # type: ignore[attr-defined]

    def release(self) -> None:
        """Drop the ONNX Runtime sessions and temporary files (torch.onnx's name for :meth:`close`)."""
        self.close()  # type: ignore[attr-defined]


def _reference_array(tensor: torch.Tensor) -> np.ndarray:
    """A torch tensor as the reference evaluator takes it (ml_dtypes for bfloat16, float8, float4 and int4)."""
    import ml_dtypes  # shipped with onnx

    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype is torch.float4_e2m1fn_x2:
        return _dtypes.float4_values(tensor)
    name = str(tensor.dtype).removeprefix("torch.")
    if name in ("int4", "uint4"):   # the exporter's packed 4-bit weights
        return _dtypes.int4_values(tensor).astype(getattr(ml_dtypes, name))
    if name == "bfloat16":
        return tensor.view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    if name.startswith("float8"):
        return tensor.view(torch.uint8).numpy().view(getattr(ml_dtypes, name))
    return tensor.numpy()


def _torch_tensor(array: Any) -> torch.Tensor:
    """A reference output as a torch tensor of the dtype PyTorch has for it."""
    array = np.asarray(array)
    name = array.dtype.name
    if name == "float4_e2m1fn":
        return _dtypes.float4_pairs(array)
    if name == "bfloat16":
        return torch.from_numpy(array.view(np.uint16).copy()).view(torch.bfloat16)
    if name.startswith("float8"):
        return torch.from_numpy(array.view(np.uint8).copy()).view(getattr(torch, name))
    return torch.from_numpy(np.ascontiguousarray(array))
