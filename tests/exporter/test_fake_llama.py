"""A LLaMA built in fake mode: what its checkpoint lacks, and its graph without weights.

LLaMA's rotary embedding computes ``inv_freq`` from the config when the model is built and registers it
as a non-persistent buffer: no checkpoint has it. The export computes it again (its module built for
real from the same arguments), so ``save(weights=checkpoint)`` needs nothing else (test_save_weights.py:
the saved model matches the real one); a weight the checkpoint really lacks is still VAL008, naming it
alone. A fake program's graph can be inspected and saved without weights.
"""

from __future__ import annotations

import onnx
import pytest
import torch

import onnxsight

transformers = pytest.importorskip("transformers")


def _config():
    return transformers.LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
                                    use_cache=False, pad_token_id=0)  # a local config, random weights


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[str, torch.nn.Module]:
    torch.manual_seed(0)
    real = transformers.LlamaForCausalLM(_config()).eval()
    path = tmp_path_factory.mktemp("ckpt") / "model.pt"
    torch.save(real.state_dict(), path)  # persistent weights only: no inv_freq
    assert not any("inv_freq" in key for key in real.state_dict())
    return str(path), real


@pytest.fixture(scope="module")
def fake_program() -> onnxsight.ONNXProgram:
    with onnxsight.fake_mode():
        model = transformers.LlamaForCausalLM(_config()).eval()
    ids = torch.randint(1, 128, (2, 7))
    return onnxsight.export(model, (ids,), kwargs={"use_cache": False})


def test_a_weight_the_checkpoint_lacks_is_still_val008(fake_program, checkpoint, tmp_path) -> None:
    state = torch.load(checkpoint[0], weights_only=True)
    del state["model.norm.weight"]
    with pytest.raises(onnxsight.WeightsError) as failure:
        fake_program.save(tmp_path / "llama.onnx", weights=state)
    assert [d.code for d in failure.value.diagnostics] == ["VAL008"]
    assert "model.norm.weight" in str(failure.value.diagnostics[0].message)
    assert "inv_freq" not in str(failure.value.diagnostics[0].message)


def test_a_fake_programs_graph_can_be_inspected_and_saved_without_weights(fake_program, tmp_path) -> None:
    proto = fake_program.model_proto
    assert proto.graph.node and [i.name for i in proto.graph.input] == fake_program.input_names
    # only what holds data is embedded (inv_freq, computed again); the rest is named, typed and shaped
    # (and values computed from constants alone, folded into initializers by the optimize stage)
    embedded = {i.name for i in proto.graph.initializer}
    weights = set(fake_program.exported_program.state_dict)
    assert "model.rotary_emb.inv_freq" in embedded and weights and not embedded & weights, embedded & weights
    described = {v.name: v for v in proto.graph.value_info}
    weight = described["model.embed_tokens.weight"].type.tensor_type
    assert [d.dim_value for d in weight.shape.dim] == [128, 32] and weight.elem_type == onnx.TensorProto.FLOAT
    files = fake_program.save(tmp_path / "structure.onnx", include_initializers=False)
    assert onnx.load(files[0]).graph.node
    with pytest.raises(onnxsight.WeightsError):  # running it still needs the weights (VAL007)
        fake_program(torch.randint(1, 128, (2, 7)))


class _Scaled(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, width)   # random init when built again
        self.register_buffer("scale", torch.arange(float(width)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


def test_computing_the_buffers_again_leaves_the_users_random_state_alone() -> None:
    with onnxsight.fake_mode():
        model = _Scaled(4)
    x = torch.randn(2, 4)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    program = onnxsight.export(model, (x,))
    assert program.fake_weights == ["fc.weight", "fc.bias"]   # scale: computed again, from width=4
    torch.testing.assert_close(torch.rand(3), expected)
