"""The quantized suite: PT2E int8 models (torchao's X86InductorQuantizer), dynamic batch.

Each model is quantized in the worker the way torchao documents it (``torch.export`` with a
dynamic batch, ``prepare_pt2e``, calibration on random batches, ``convert_pt2e``) and exported and
verified as any other: against the quantized eager model, per node, in quantization steps, at other
batch sizes. Static activation quantization (a residual CNN with BatchNorm, an MLP, an attention
block; torchvision's ResNet-18 and MobileNetV2 where torchvision imports) and dynamic activation
quantization (an MLP, a transformer block). Skipped where torchao does not import
(``pip install onnxsight[quant]``).
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any, Callable

import torch

from onnxsight.zoo._spec import ModelSpec, SuiteUnavailable, import_or_unavailable

_BATCH = {"x": {0: "batch"}}


class ResidualCNN(torch.nn.Module):
    """A ResNet-like stack: conv-bn-relu stem, residual blocks, pooled linear head."""

    def __init__(self, width: int = 16, blocks: int = 2) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.BatchNorm2d(width),
                                        torch.nn.ReLU())
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Conv2d(width, width, 3, padding=1), torch.nn.BatchNorm2d(width),
                                torch.nn.ReLU(), torch.nn.Conv2d(width, width, 3, padding=1),
                                torch.nn.BatchNorm2d(width)) for _ in range(blocks))
        self.head = torch.nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = torch.relu(x + block(x))
        return self.head(x.mean((2, 3)))


class MLP(torch.nn.Module):
    def __init__(self, features: int = 64, width: int = 128) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(features, width), torch.nn.ReLU(),
                                          torch.nn.Linear(width, width), torch.nn.ReLU(),
                                          torch.nn.Linear(width, features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class TransformerBlock(torch.nn.Module):
    """Pre-norm self-attention and feed-forward, written with Linear layers (what the quantizer annotates)."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.ff = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.out((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


def quantize(model: torch.nn.Module, args: tuple, *, dynamic: bool = False, dynamic_batch: bool = True,
             calibration: int = 4) -> torch.nn.Module:
    """torchao's PT2E flow: export (dynamic batch), prepare with X86InductorQuantizer, calibrate, convert."""
    with contextlib.redirect_stderr(io.StringIO()):  # torchao reports its optional CUDA kernels on import
        pt2e = import_or_unavailable("torchao.quantization.pt2e.quantize_pt2e", "quantized")
        xiq = import_or_unavailable("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer", "quantized")
    logging.getLogger("torchao").setLevel(logging.ERROR)
    shapes = ({0: torch.export.Dim("batch", min=1, max=1024)},) if dynamic_batch else None
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic))
    prepared = pt2e.prepare_pt2e(torch.export.export(model, args, dynamic_shapes=shapes).module(), quantizer)
    for _ in range(calibration):
        prepared(*(torch.randn_like(a) for a in args))
    return pt2e.convert_pt2e(prepared)


def _builder(make: Callable[[], torch.nn.Module], example: Callable[[], tuple], *, vision: bool = False,
             **options: Any) -> Callable[[], tuple]:
    """``vision``: random BatchNorm parameters and statistics first (``_vision.calibrate_batchnorm``): with
    torchvision's initial ones MobileNetV2's output collapses to exactly 0 (ZOO005), nothing to compare."""
    def build() -> tuple:
        torch.manual_seed(0)
        model, args = make().eval(), example()
        if vision:
            from onnxsight.zoo.suites._vision import calibrate_batchnorm

            calibrate_batchnorm(model, args, {}, more=[((torch.randn(16, *args[0].shape[1:]),), {})])
        return quantize(model, args, **options), args
    return build


def _torchvision(name: str) -> Callable[[], torch.nn.Module]:
    def make() -> torch.nn.Module:
        import torchvision

        if name == "resnet18":
            return _resnet18(torchvision)
        return getattr(torchvision.models, name)(weights=None)
    return make


def _resnet18(torchvision: Any) -> torch.nn.Module:
    """torchvision's ResNet-18 (random weights) with the second ReLU of each block a module of its own.

    NOTE: torchvision's BasicBlock calls one ReLU module twice; torchao 0.18's X86InductorQuantizer then
    finds one partition with two outputs and refuses the model ("Input partition has more than one output
    node"). The network computes the same.
    """
    from torchvision.models.resnet import BasicBlock, ResNet

    class Block(BasicBlock):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.relu2 = torch.nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu2(out + (x if self.downsample is None else self.downsample(x)))

    return ResNet(Block, [2, 2, 2, 2])


def suite() -> list[ModelSpec]:
    with contextlib.redirect_stderr(io.StringIO()):
        import_or_unavailable("torchao.quantization.pt2e.quantize_pt2e", "quantized")
    image = lambda: (torch.randn(2, 3, 32, 32),)  # noqa: E731
    specs = [
        ModelSpec("int8_residual_cnn", _builder(ResidualCNN, image), tags=("quantized", "vision"), dynamic=_BATCH),
        ModelSpec("int8_mlp", _builder(MLP, lambda: (torch.randn(4, 64),)), tags=("quantized",), dynamic=_BATCH),
        ModelSpec("int8_transformer_block", _builder(TransformerBlock, lambda: (torch.randn(2, 8, 32),)),
                  tags=("quantized", "transformer"), dynamic=_BATCH),
        ModelSpec("int8_dynamic_mlp", _builder(MLP, lambda: (torch.randn(4, 64),), dynamic=True),
                  tags=("quantized", "dynamic-quantization"), dynamic=_BATCH),
        ModelSpec("int8_dynamic_transformer_block",
                  _builder(TransformerBlock, lambda: (torch.randn(2, 8, 32),), dynamic=True),
                  tags=("quantized", "transformer", "dynamic-quantization"), dynamic=_BATCH),
    ]
    try:
        import_or_unavailable("torchvision", "quantized")
        missing = None
    except SuiteUnavailable as exc:  # the torchvision models need torchvision (make test-vision's environment)
        missing = str(exc)
    for name in ("resnet18", "mobilenet_v2"):
        specs.append(ModelSpec(f"int8_{name}", _builder(_torchvision(name), lambda: (torch.randn(2, 3, 64, 64),), vision=True),
                               tags=("quantized", "vision", "torchvision"), dynamic=_BATCH, unavailable=missing))
    return specs
