"""PT2E-quantized fixture models (torchao's X86InductorQuantizer), shared by the quantization tests.

Each builder returns ``(float_model, quantized_module, example_args, dynamic_shapes)``; the
quantized module is what ``convert_pt2e`` returns, calibrated on a few random batches.
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any, Callable

import pytest
import torch

with contextlib.redirect_stderr(io.StringIO()):  # torchao's import reports its optional CUDA kernels
    torchao = pytest.importorskip("torchao", reason="torchao is not installed: pip install onnxsight[quant]")
logging.getLogger("torchao").setLevel(logging.ERROR)

from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402
from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq  # noqa: E402


class ConvBnResidual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        y = y + self.conv2(y)
        return self.fc(y.mean((2, 3)))


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Attention(torch.nn.Module):
    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        return self.out((attn @ v).transpose(1, 2).reshape(b, t, d))


def quantize(model: torch.nn.Module, args: tuple, *, dynamic: bool = False, dynamic_shapes: Any = None,
             calibration: int = 4) -> torch.fx.GraphModule:
    """torchao's documented PT2E flow: export, prepare with X86InductorQuantizer, calibrate, convert."""
    torch.manual_seed(0)
    graph = torch.export.export(model, args, dynamic_shapes=dynamic_shapes).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic))
    prepared = prepare_pt2e(graph, quantizer)
    for _ in range(calibration):
        prepared(*(torch.randn_like(a) for a in args))
    return convert_pt2e(prepared)


def _build(model: torch.nn.Module, args: tuple, dynamic_shapes: Any = None, dynamic: bool = False
           ) -> tuple[torch.nn.Module, torch.fx.GraphModule, tuple, Any]:
    torch.manual_seed(0)
    model = model.eval()
    return model, quantize(model, args, dynamic=dynamic, dynamic_shapes=dynamic_shapes), args, dynamic_shapes


def _batch() -> Any:
    return ({0: torch.export.Dim("batch", min=1, max=64)},)


def conv_bn_residual() -> tuple:
    torch.manual_seed(0)
    return _build(ConvBnResidual(), (torch.randn(2, 3, 8, 8),), _batch())


def mlp_dynamic_batch() -> tuple:
    torch.manual_seed(0)
    return _build(MLP(), (torch.randn(4, 16),), _batch())


def attention() -> tuple:
    torch.manual_seed(0)
    return _build(Attention(), (torch.randn(2, 5, 16),), _batch())


def mlp_dynamic_activations() -> tuple:
    torch.manual_seed(0)
    return _build(MLP(), (torch.randn(4, 16),), _batch(), dynamic=True)


MODELS: dict[str, Callable[[], tuple]] = {
    "conv_bn_residual": conv_bn_residual,
    "mlp_dynamic_batch": mlp_dynamic_batch,
    "attention": attention,
    "mlp_dynamic_activations": mlp_dynamic_activations,
}


def other_size(args: tuple) -> tuple:
    """The example inputs at another batch size (3 instead of the example's)."""
    return tuple(torch.randn(3, *a.shape[1:]) for a in args)


def quantized_integers(program: Any, args: tuple) -> dict[str, tuple[Any, Any]]:
    """Every quantize node's integers, (PyTorch, ONNX Runtime), by FX node name = ONNX value name."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    captured: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node: torch.fx.Node) -> Any:
            result = super().run_node(node)
            if node.op == "call_function" and str(node.target).startswith("quantized_decomposed.quantize_"):
                captured[node.name] = result
            return result

    module = program.exported_program.module()
    with torch.no_grad():
        Recorder(module).run(*args)
    model = onnx.ModelProto()
    model.CopyFrom(program.model_proto)
    produced = {o for n in model.graph.node for o in n.output}
    names = [name for name in captured if name in produced]
    for name in names:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    results = session.run(names, feeds)
    return {name: (captured[name].numpy(), np.asarray(r)) for name, r in zip(names, results)}
