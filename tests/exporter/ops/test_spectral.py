"""stft and torch.fft through ONNX DFT, complex values carried as real pairs."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch.utils import _pytree as pytree

import onnxsight
from onnxsight import rules


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


def _check(fn: Callable[[torch.Tensor], Any], x: torch.Tensor, *, opset: int | None = None) -> None:
    model = Fn(fn)
    program = onnxsight.export(model, (x,), opset_version=opset)
    expected = [t for t in pytree.tree_leaves(model(x)) if isinstance(t, torch.Tensor)]
    actual = program(x)
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)  # float32 DFT of 200 samples


SIGNAL = torch.randn(2, 200)

STFT_PATTERNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "abs": lambda x: torch.stft(x, 64, return_complex=True).abs(),
    "hann_hop": lambda x: torch.stft(x, 64, hop_length=16, window=torch.hann_window(64), return_complex=True).abs(),
    "power_view_as_real": lambda x: torch.view_as_real(torch.stft(x, 32, return_complex=True)).pow(2).sum(-1),
    "abs_pow": lambda x: torch.stft(x, 32, return_complex=True).abs().pow(2),
    "real_imag": lambda x: torch.stft(x, 32, return_complex=True).real + torch.stft(x, 32, return_complex=True).imag,
    "normalized_twosided": lambda x: torch.stft(x, 32, hop_length=8, center=False, normalized=True, onesided=False,
                                                return_complex=True).abs(),
    "return_complex_false": lambda x: torch.stft(x, 32, return_complex=False),
    "scaled": lambda x: (torch.stft(x, 32, return_complex=True) * 0.5).abs(),
    "one_dim": lambda x: torch.stft(x[0], 32, window=torch.hann_window(32), return_complex=True).abs(),
}


@pytest.mark.parametrize("pattern", list(STFT_PATTERNS))
def test_stft(pattern: str) -> None:
    _check(STFT_PATTERNS[pattern], SIGNAL)


@pytest.mark.parametrize("opset", [17, 20])
def test_stft_dft_opset_variants(opset: int) -> None:
    _check(STFT_PATTERNS["hann_hop"], SIGNAL, opset=opset)


FFT_PATTERNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "rfft_abs": lambda x: torch.fft.rfft(x).abs(),
    "rfft_ortho": lambda x: torch.view_as_real(torch.fft.rfft(x, norm="ortho")),
    "fft_forward_norm": lambda x: torch.fft.fft(x, norm="forward").abs(),
    "rfft2": lambda x: torch.fft.rfft2(x.reshape(2, 10, 20)).abs(),
    "ifft_of_fft": lambda x: torch.view_as_real(torch.fft.ifft(torch.fft.fft(x))),
    "complex_product": lambda x: (torch.fft.rfft(x) * torch.fft.rfft(x.flip(-1))).abs(),
}


@pytest.mark.parametrize("pattern", list(FFT_PATTERNS))
def test_fft(pattern: str) -> None:
    _check(FFT_PATTERNS[pattern], SIGNAL)


def _error_codes(fn: Callable[[torch.Tensor], Any]) -> set[str]:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Fn(fn), (SIGNAL,))
    return {d.rule.code for d in info.value.diagnostics if d.level.name == "ERROR"}


def test_complex_output_is_real_pairs_not_dty001() -> None:
    """Returned as is, a complex result is exported as real pairs (IO007; tests/exporter/test_complex_outputs.py)."""
    program = onnxsight.export(Fn(lambda x: torch.stft(x, 32, return_complex=True)), (SIGNAL,))
    codes = {d.rule.code for d in program.diagnostics}
    assert rules.COMPLEX_AS_REAL_PAIRS.code in codes and rules.DTYPE_NOT_REPRESENTABLE.code not in codes


def test_complex_input_to_real_only_translation_is_dty001() -> None:
    """sum has a translation, but none for complex inputs."""
    codes = _error_codes(lambda x: torch.stft(x, 32, return_complex=True).sum(-1).abs())
    assert codes == {rules.DTYPE_NOT_REPRESENTABLE.code}


# -- inverse real FFT (_fft_c2r) -----------------------------------------------------------------------
IRFFT_PATTERNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "irfft_of_rfft": lambda x: torch.fft.irfft(torch.fft.rfft(x)),
    "irfft_odd_n": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=199),
    "irfft_n_pads": lambda x: torch.fft.irfft(torch.fft.rfft(x[:, :50]), n=120),
    "irfft_n_trims": lambda x: torch.fft.irfft(torch.fft.rfft(x), n=64),
    "irfft_ortho": lambda x: torch.fft.irfft(torch.fft.rfft(x, norm="ortho"), norm="ortho"),
    "irfft_forward": lambda x: torch.fft.irfft(torch.fft.rfft(x, norm="forward"), norm="forward"),
    "irfft_non_hermitian": lambda x: torch.fft.irfft(torch.view_as_complex(x.reshape(2, 100, 2)), n=198),
    "irfft_dim0": lambda x: torch.fft.irfft(torch.fft.rfft(x.reshape(40, 10), dim=0), dim=0),
    "irfft2": lambda x: torch.fft.irfft2(torch.fft.rfft2(x.reshape(2, 10, 20))),
    "irfftn_s": lambda x: torch.fft.irfftn(torch.view_as_complex(x.reshape(4, 50, 2)), s=(4, 60), norm="ortho"),
}


@pytest.mark.parametrize("pattern", list(IRFFT_PATTERNS))
def test_irfft(pattern: str) -> None:
    _check(IRFFT_PATTERNS[pattern], SIGNAL)


@pytest.mark.parametrize("opset", [17, 20, 23])
def test_irfft_dft_opset_variants(opset: int) -> None:
    _check(IRFFT_PATTERNS["irfft_ortho"], SIGNAL, opset=opset)
    _check(IRFFT_PATTERNS["irfft_non_hermitian"], SIGNAL, opset=opset)


def test_irfft_dynamic_length() -> None:
    model = Fn(lambda x: torch.fft.irfft(torch.fft.rfft(x)))
    x = torch.randn(2, 64)
    program = onnxsight.export(model, (x,), dynamic_shapes=({1: torch.export.Dim("t", min=4, max=4096) * 2},))
    for length in (64, 100):
        signal = torch.randn(2, length)
        torch.testing.assert_close(program(signal)[0], model(signal), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["fft.irfft", "fft.irfftn", "fft.irfft2"])
def test_opinfo_irfft(name: str) -> None:
    """OpInfo feeds real tensors: the real -> complex cast must build (x, 0) pairs."""
    from tests.exporter.ops.opinfo_harness import assert_op_passes

    assert_op_passes(name, limit=9)


def test_casts_between_real_and_complex() -> None:
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            z = x.to(torch.complex64) * 2          # real -> complex: (x, 0) pairs
            return torch.view_as_real(z), z.real.to(torch.float64)

    x = torch.randn(3, 4)
    program = onnxsight.export(M(), (x,))
    pair, real = program(x)
    torch.testing.assert_close(pair, torch.view_as_real(x.to(torch.complex64) * 2))
    torch.testing.assert_close(real, (x * 2).to(torch.float64))
