"""verify_generation on CUDA: the model in PyTorch on the GPU, the loop in ONNX Runtime's CUDA provider
(TF32 off on both sides). Skipped where torch.cuda and onnxruntime's CUDAExecutionProvider are missing."""

from __future__ import annotations

import pytest

import onnxsight
from onnxsight.zoo.suites import generation as suite
from tests.verification import generation_faults as faults

pytestmark = pytest.mark.cuda
pytest.importorskip("transformers")


@pytest.mark.parametrize("name", ["llama", "gpt2", "t5"])
def test_sixteen_steps_on_cuda_agree_with_pytorch_on_cuda(name: str) -> None:
    model, prompt = getattr(suite, name)()
    programs = onnxsight.export_generation(model, prompt)  # exported on the CPU
    result = onnxsight.verify_generation(model.to("cuda"), prompt, programs, steps=16,
                                         providers=("CUDAExecutionProvider",))
    assert result.info["providers"] == ["CUDAExecutionProvider"]
    assert result.passed, result.steps
    assert result.steps_agreed == 16


def test_a_fault_is_found_at_its_step_on_cuda() -> None:
    model, prompt = suite.llama()
    programs = onnxsight.export_generation(model, prompt)
    faulty = faults.new_keys_first(programs.decoder.model_proto, "present.0.key")
    result = onnxsight.verify_generation(model.to("cuda"), prompt, programs, steps=3,
                                         providers=("CUDAExecutionProvider",), onnx_models={"decoder": faulty})
    assert result.first_divergence["step"] == 1
    assert result.root_causes.iloc[0]["value"] == "present.0.key"
