"""Complex outputs (and inputs): exported as real tensors with a trailing (real, imaginary) dim of 2, as
torch.onnx does; ``prog(...)`` and ``verify`` turn them back into complex tensors."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

import onnxsight
from onnxsight import rules


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


SIGNAL = torch.randn(2, 200)

COMPLEX_OUTPUTS: dict[str, tuple[Callable[..., Any], tuple[torch.Tensor, ...]]] = {
    "stft": (lambda x: torch.stft(x, 32, return_complex=True), (SIGNAL,)),
    "stft_hann": (lambda x: torch.stft(x, 64, hop_length=16, window=torch.hann_window(64), return_complex=True),
                  (SIGNAL,)),
    "rfft": (lambda x: torch.fft.rfft(x), (SIGNAL,)),
    "fft_and_real": (lambda x: (torch.fft.fft(x, norm="ortho"), x.relu()), (SIGNAL,)),
    "scaled_rfft2": (lambda x: torch.fft.rfft2(x.reshape(2, 10, 20)) * 0.5, (SIGNAL,)),
    "float64": (lambda x: torch.fft.rfft(x), (SIGNAL.double(),)),
}


def _io7(program: onnxsight.ONNXProgram) -> list[str]:
    return [d.message for d in program.diagnostics if d.rule.code == rules.COMPLEX_AS_REAL_PAIRS.code]


@pytest.mark.parametrize("case", list(COMPLEX_OUTPUTS))
def test_complex_output_is_exported_as_real_pairs(case: str) -> None:
    fn, args = COMPLEX_OUTPUTS[case]
    model = Fn(fn)
    program = onnxsight.export(model, args)
    expected = model(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = program(*args)
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)  # float32 DFT of 200 samples
    complex_names = [name for name, want in zip(program.output_names, expected) if want.is_complex()]
    assert program.complex_outputs == {name: want.dtype for name, want in zip(program.output_names, expected)
                                       if want.is_complex()}
    by_name = {o.name: o for o in program.model_proto.graph.output}
    for name, want in zip(program.output_names, expected):
        if not want.is_complex():
            continue
        tensor_type = by_name[name].type.tensor_type
        real = want.real.dtype
        assert tensor_type.elem_type == {torch.float32: 1, torch.float64: 11}[real]
        assert [d.dim_value for d in tensor_type.shape.dim] == [*want.shape, 2]
    notes = _io7(program)
    assert len(notes) == len(complex_names)
    for name, note in zip(complex_names, notes):
        dtype = str(dict(program.complex_outputs)[name]).replace("torch.", "")
        real = {"complex64": "float32", "complex128": "float64"}[dtype]
        assert note == f"output {name} is {dtype}; exported as {real} [..., 2] (real, imaginary)"
    assert all(d.level.value == "note" for d in program.diagnostics if d.rule.code == "IO007")


def test_verify_compares_complex_outputs() -> None:
    model = Fn(lambda x: torch.stft(x, 32, return_complex=True))
    program = onnxsight.export(model, (SIGNAL,))
    result = onnxsight.verify(program, (SIGNAL,))
    assert result.passed
    row = result.outputs.iloc[0]
    assert row["dtype"] == "float32" and tuple(row["shape"])[-1] == 2


def test_verify_fails_a_wrong_complex_output() -> None:
    """The comparison is real: an output whose imaginary part is off is a failure."""
    aten = torch.ops.aten

    def wrong_r2c(b: Any, self: Any, dim: Any, normalization: int, onesided: bool) -> Any:
        from onnxsight.exporter.ops.spectral import aten_fft_r2c
        value = aten_fft_r2c(b, self, dim, normalization, onesided)
        return b.op("Mul", value, b.scalar(1.5, torch.float32), dtype=value.dtype, shape=value.shape)

    model = Fn(lambda x: torch.fft.rfft(x))
    program = onnxsight.export(model, (SIGNAL,), custom_translations={aten._fft_r2c.default: wrong_r2c})
    assert not torch.allclose(program(SIGNAL)[0], model(SIGNAL))
    assert not onnxsight.verify(program, (SIGNAL,)).passed


def test_complex_input_is_fed_as_real_pairs() -> None:
    model = Fn(lambda z: torch.view_as_real(torch.fft.ifft(z)).sum(-1))
    z = torch.randn(2, 16, dtype=torch.complex64)
    program = onnxsight.export(model, (z,))
    assert program.complex_inputs == {program.input_names[0]: torch.complex64}
    graph_input = program.model_proto.graph.input[0].type.tensor_type
    assert graph_input.elem_type == 1 and [d.dim_value for d in graph_input.shape.dim] == [2, 16, 2]
    torch.testing.assert_close(program(z)[0], model(z), atol=1e-4, rtol=1e-4)
    assert _io7(program) == [f"input {program.input_names[0]} is complex64; exported as float32 [..., 2] "
                             "(real, imaginary)"]
    assert onnxsight.verify(program, (z,)).passed


def test_complex_output_with_dynamic_length() -> None:
    model = Fn(lambda x: torch.fft.rfft(x))
    x = torch.randn(2, 64)
    program = onnxsight.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch"),
                                                             1: torch.export.Dim("t", min=4, max=4096)},))
    for shape in ((2, 64), (3, 100)):
        signal = torch.randn(*shape)
        torch.testing.assert_close(program(signal)[0], model(signal), atol=1e-4, rtol=1e-4)


class ComplexRotary(torch.nn.Module):
    """LLaMA-4's rotary embedding (and Meta's original LLaMA's): the query's pairs times complex frequencies."""

    def __init__(self) -> None:
        super().__init__()
        angles = torch.arange(16).float()[:, None] * torch.rand(4, generator=torch.Generator().manual_seed(0))[None]
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [batch, sequence, heads, 8]
        pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        freqs = self.freqs_cis[: x.shape[1]][None, :, None, :].to(pairs.device)  # aten._assert_tensor_metadata
        return torch.view_as_real(pairs * freqs).flatten(3).type_as(x)


def test_a_complex_rotary_embedding_exports_with_a_dynamic_sequence() -> None:
    model = ComplexRotary()
    program = onnxsight.export(model, (torch.randn(2, 16, 2, 8),),
                               dynamic_shapes=({0: torch.export.Dim("batch"), 1: torch.export.Dim("seq", max=16)},))
    for shape in ((2, 16, 2, 8), (3, 5, 2, 8)):
        x = torch.randn(*shape)
        torch.testing.assert_close(program(x)[0], model(x), atol=1e-5, rtol=1e-5)
