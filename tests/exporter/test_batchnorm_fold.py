"""The optimize stage folds inference batch norms into the Conv/ConvTranspose/Gemm before them: the graph loses
the BatchNormalization nodes, computes what eager PyTorch does, the verifier still pairs the batch norm's value,
and a checkpoint given to ``save(weights=...)`` (fake-mode exports too) is folded the same way."""

from __future__ import annotations

from collections import Counter
from typing import Any

import onnx
import pytest
import torch
from torch import nn

import onnxsight


def _randomised(model: nn.Module, seed: int = 0) -> nn.Module:
    """Batch norms with statistics and affine parameters that are not the identity (fresh ones are)."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            c = module.num_features
            module.running_mean.copy_(torch.randn(c, generator=generator))
            module.running_var.copy_(torch.rand(c, generator=generator) + 0.5)
            if module.affine:
                module.weight.data.copy_(torch.randn(c, generator=generator))
                module.bias.data.copy_(torch.randn(c, generator=generator))
    return model


aten = torch.ops.aten
PRODUCTS = {aten.conv1d.default, aten.conv2d.default, aten.conv3d.default, aten.conv_transpose1d.default,
            aten.conv_transpose2d.input, aten.conv_transpose3d.input, aten.linear.default, aten.addmm.default}


def _ops(program: onnxsight.ONNXProgram) -> Counter:
    return Counter(n.op_type for n in program.model_proto.graph.node)


class TwoReaders(nn.Module):
    """The conv's output is read by the batch norm and by the residual add: folding would change the add."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return self.bn(y) + y


class Addmm(nn.Module):
    """A Gemm with its weight not transposed (transB=0), alpha and beta, before a BatchNorm1d."""

    def __init__(self) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.randn(8, 5)), nn.Parameter(torch.randn(5))
        self.bn = nn.BatchNorm1d(5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(torch.addmm(self.bias, x, self.weight, beta=0.5, alpha=2.0))


class SharedConv(nn.Module):
    """One conv applied twice, each time before its own batch norm: two folds of the same weight."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn1, self.bn2 = nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn2(self.conv(torch.relu(self.bn1(self.conv(x)))))


class MobileNetV2Block(nn.Module):
    """torchvision's InvertedResidual written out: 1x1 expand, 3x3 depthwise, 1x1 project, each with BN."""

    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.residual = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """MobileNetV2's layout at width 0.25 (torchvision does not import with this CPU torch)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6()]
        cin = 8
        for expand, cout, repeats, stride in ((1, 4, 1, 1), (6, 8, 2, 2), (6, 8, 3, 2), (6, 16, 4, 2),
                                              (6, 24, 3, 1), (6, 40, 3, 2), (6, 80, 1, 1)):
            for i in range(repeats):
                layers.append(MobileNetV2Block(cin, cout, stride if i == 0 else 1, expand))
                cin = cout
        layers += [nn.Conv2d(cin, 320, 1, bias=False), nn.BatchNorm2d(320), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(320, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


CASES: dict[str, tuple[Any, tuple[int, ...]]] = {
    "conv2d": (lambda: nn.Sequential(nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6), nn.ReLU()), (2, 3, 9, 9)),
    "conv2d_no_bias": (lambda: nn.Sequential(nn.Conv2d(3, 6, 3, bias=False), nn.BatchNorm2d(6)), (2, 3, 9, 9)),
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(3, 5, 3), nn.BatchNorm1d(5), nn.ReLU()), (2, 3, 11)),
    "conv3d": (lambda: nn.Sequential(nn.Conv3d(2, 4, 3), nn.BatchNorm3d(4)), (1, 2, 5, 6, 7)),
    "grouped": (lambda: nn.Sequential(nn.Conv2d(4, 8, 3, groups=2), nn.BatchNorm2d(8)), (2, 4, 7, 7)),
    "depthwise": (lambda: nn.Sequential(nn.Conv2d(6, 6, 3, groups=6, bias=False), nn.BatchNorm2d(6)), (2, 6, 7, 7)),
    "bn_not_affine": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, affine=False)), (2, 3, 8, 8)),
    "conv_transpose": (lambda: nn.Sequential(nn.ConvTranspose2d(4, 6, 3, stride=2), nn.BatchNorm2d(6)), (2, 4, 5, 5)),
    "conv_transpose_groups": (lambda: nn.Sequential(nn.ConvTranspose2d(4, 6, 3, groups=2, bias=False),
                                                    nn.BatchNorm2d(6)), (2, 4, 5, 5)),
    "conv_transpose_1d": (lambda: nn.Sequential(nn.ConvTranspose1d(6, 9, 2, groups=3), nn.BatchNorm1d(9)), (2, 6, 5)),
    "linear": (lambda: nn.Sequential(nn.Linear(8, 5), nn.BatchNorm1d(5), nn.ReLU()), (4, 8)),
    "addmm": (Addmm, (4, 8)),
    "shared_conv": (SharedConv, (2, 4, 6, 6)),
    "chain": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                    nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                    nn.Conv2d(4, 2, 1), nn.BatchNorm2d(2)), (2, 3, 8, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_norm_folds_and_matches_eager(case: str) -> None:
    build, shape = CASES[case]
    torch.manual_seed(0)
    model, x = _randomised(build().eval()), torch.randn(*shape)
    program = onnxsight.export(model, (x,))
    ops = _ops(program)
    assert "BatchNormalization" not in ops, ops
    products = sum(n.target in PRODUCTS for n in program.exported_program.graph.nodes)
    assert ops["Conv"] + ops["ConvTranspose"] + ops["Gemm"] == products, ops
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-4, atol=1e-5)
    result = onnxsight.verify(program, (x,))
    assert result.passed
    coverage = result.coverage.set_index("fx_node")["reason"]
    bn_nodes = [n.name for n in program.exported_program.graph.nodes if "batch_norm" in str(n.target)]
    assert bn_nodes and all(coverage[name] == "compared" for name in bn_nodes), coverage
    folded_away = [name for name, reason in coverage.items() if reason == "optimised away"]
    assert len(folded_away) == len(bn_nodes), coverage


def test_a_conv_read_by_another_node_keeps_its_batch_norm() -> None:
    torch.manual_seed(0)
    model, x = _randomised(TwoReaders().eval()), torch.randn(2, 4, 6, 6)
    program = onnxsight.export(model, (x,))
    assert _ops(program)["BatchNormalization"] == 1
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-4, atol=1e-5)


def test_a_batch_norm_captured_in_training_mode_is_not_folded() -> None:
    """A graph torch.export captured in training mode normalises with the batch's statistics: nothing to fold."""
    torch.manual_seed(0)
    model, x = _randomised(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))).train(), torch.randn(4, 3, 8, 8)
    graph_module = torch.export.export(model, (x,)).module()
    program = onnxsight.export(graph_module, (x,))
    ops = _ops(program)
    assert "Conv" in ops and "ReduceMean" in ops and "BatchNormalization" not in ops, ops
    torch.testing.assert_close(program(x)[0], model(x), rtol=1e-4, atol=1e-5)


def test_a_training_model_is_exported_in_eval_semantics_and_folded() -> None:
    torch.manual_seed(0)
    model, x = _randomised(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))).train(), torch.randn(4, 3, 8, 8)
    program = onnxsight.export(model, (x,))
    assert model.training and _ops(program) == Counter({"Conv": 1})   # export never changes the user's model
    torch.testing.assert_close(program(x)[0], model.eval()(x), rtol=1e-4, atol=1e-5)


def test_mobilenet_v2_has_no_batch_norm_left_and_verifies() -> None:
    torch.manual_seed(0)
    model, x = _randomised(MobileNetV2().eval()), torch.randn(1, 3, 64, 64)
    program = onnxsight.export(model, (x,))
    ops = _ops(program)
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    assert "BatchNormalization" not in ops and ops["Conv"] == convs, ops
    assert onnxsight.verify(program, (x,)).passed


def test_saved_with_another_checkpoint_folds_the_checkpoints_weights(tmp_path: Any) -> None:
    """The folded weights are computed again from the checkpoint, not copied from the exported model."""
    import onnxruntime as ort

    build, shape = CASES["chain"]
    torch.manual_seed(0)
    exported, x = _randomised(build().eval(), seed=1), torch.randn(*shape)
    other = _randomised(build().eval(), seed=2)
    program = onnxsight.export(exported, (x,))
    path = tmp_path / "m.onnx"
    program.save(path, weights=other.state_dict())
    loaded = onnx.load(path, load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in loaded.graph.initializer
               if t.name.endswith(".folded"))   # never the exported model's folded values embedded
    out = ort.InferenceSession(str(path)).run(None, {"input": x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), other(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", ["chain", "linear", "addmm", "shared_conv", "conv_transpose_groups", "bn_not_affine"])
def test_fake_export_saved_with_a_checkpoint_folds_its_batch_norms(tmp_path: Any, case: str) -> None:
    import onnxruntime as ort

    build, shape = CASES[case]
    torch.manual_seed(0)
    real, x = _randomised(build().eval()), torch.randn(*shape)
    with onnxsight.fake_mode():
        fake = build().eval()
    program = onnxsight.export(fake, (x,))
    assert "BatchNormalization" not in _ops(program)
    path = tmp_path / "m.onnx"
    program.save(path, weights=real.state_dict())
    session = ort.InferenceSession(str(path))
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    torch.testing.assert_close(torch.from_numpy(out), real(x), rtol=1e-4, atol=1e-5)


def test_a_checkpoint_without_the_batch_norm_statistics_is_refused(tmp_path: Any) -> None:
    build, shape = CASES["conv2d"]
    with onnxsight.fake_mode():
        fake = build().eval()
    program = onnxsight.export(fake, (torch.randn(*shape),))
    weights = {k: v for k, v in _randomised(build().eval()).state_dict().items() if "running_var" not in k}
    with pytest.raises(onnxsight.WeightsError, match="1.running_var"):
        program.save(tmp_path / "m.onnx", weights=weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_fold_computed_by_numpy_is_torchs_bit_for_bit(dtype: torch.dtype) -> None:
    """Export folds in numpy (one thread, one pass); torch's ops are the definition (and fake mode's, CUDA's)."""
    from onnxsight.exporter.optimize._batchnorm import FoldedWeight, _numpy_fold, _torch_fold

    generator = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(dtype)

    channels = 16
    for _ in range(5):
        params = [rand(channels), rand(channels), rand(channels), rand(channels).abs() + 1e-3]
        weights = [  # (weight, channel axis, groups): Conv, ConvTranspose (grouped), Gemm transB=0, a transposed view
            (rand(channels, 8, 3, 3).requires_grad_(), 0, 1), (rand(8, channels, 3, 3), 1, 1),
            (rand(8, channels // 2, 3, 3), 1, 2), (rand(8, channels), 1, 1), (rand(8, channels).t(), 0, 1)]
        for weight, axis, groups in weights:
            fold = FoldedWeight("weight", (), (), 1e-5, axis, groups, dtype=dtype)
            got, want = _numpy_fold(fold, [weight, *params]), _torch_fold(fold, [weight, *params])
            assert got.dtype == want.dtype and torch.equal(got, want)
        for bias in (None, rand(channels), rand(1)):
            fold = FoldedWeight("bias", (), (), 1e-3, beta=0.7, dtype=dtype)
            got, want = _numpy_fold(fold, [bias, *params]), _torch_fold(fold, [bias, *params])
            assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_folded_weight_keeps_the_error_bound_its_docstring_gives(dtype: torch.dtype) -> None:
    """``W * s`` in float32 from ``s`` rounded to float32: within one float32 ulp of the exact product (``2u + u**2``
    relative); half precision adds one rounding to its own dtype (half its ulp)."""
    from onnxsight.exporter.optimize._batchnorm import FoldedWeight

    generator = torch.Generator().manual_seed(0)
    channels, u = 64, 2.0 ** -24
    half_ulp = {torch.float32: 0.0, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
    for _ in range(3):
        weight = torch.randn(channels, 32, 3, 3, generator=generator).to(dtype)
        scale, shift, mean = (torch.randn(channels, generator=generator).to(dtype) for _ in range(3))
        var = (torch.rand(channels, generator=generator) * 4 + 1e-3).to(dtype)
        folded = FoldedWeight("weight", (), (), 1e-5, dtype=dtype).compute([weight, scale, shift, mean, var])
        s = scale.double() * torch.rsqrt(var.double() + 1e-5)
        exact = weight.double() * s.reshape(-1, 1, 1, 1)
        bound = (half_ulp + (2 * u + u * u) * (1 + half_ulp) + 2.0 ** -50) * exact.abs()
        info = torch.finfo(dtype)
        spacing = info.tiny * info.eps   # below the smallest normal number: the subnormals' spacing, absolute
        error = (folded.double() - exact).abs()
        assert folded.dtype == dtype and bool(((error <= bound) | (error <= spacing)).all()), error.max()
