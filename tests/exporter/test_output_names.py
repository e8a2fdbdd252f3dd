"""Graph outputs carry the model's own names (dict and ModelOutput keys, namedtuple fields) where the user
gave no output_names; a KV cache returned is ``present.N.key``; a dim the user named keeps its name."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch
from torch.export import Dim

import onnxsight
from onnxsight.exporter import cache_pairs, past_name, present_name


class Pair(NamedTuple):
    low: torch.Tensor
    high: torch.Tensor


class Structured(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        return {"scores": x.relu(), "extra": {"doubled": x * 2, "parts": (x - 1, x + 1)}, "pair": Pair(x.floor(),
                                                                                                        x.ceil())}


class Bare(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.relu(), x * 2


class EchoesItsInput(torch.nn.Module):
    def forward(self, scores: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"scores": scores * 2, "x": scores + 1}


def _outputs(program: onnxsight.ONNXProgram) -> list[str]:
    return [o.name for o in program.model_proto.graph.output]


def test_dict_keys_namedtuple_fields_and_nesting_name_the_outputs() -> None:
    x = torch.randn(2, 3)
    program = onnxsight.export(Structured(), (x,))
    assert _outputs(program) == ["scores", "extra.doubled", "extra.parts.0", "extra.parts.1", "pair.low", "pair.high"]
    expected = [x.relu(), x * 2, x - 1, x + 1, x.floor(), x.ceil()]
    for want, got in zip(expected, program(x)):
        torch.testing.assert_close(got, want)


def test_outputs_without_keys_keep_their_fx_names_and_output_names_win() -> None:
    x = torch.randn(2, 3)
    assert _outputs(onnxsight.export(Bare(), (x,))) == ["relu", "mul"]
    assert _outputs(onnxsight.export(Structured(), (x,), output_names=list("abcdef"))) == list("abcdef")


def test_a_key_naming_another_value_of_the_graph_keeps_the_fx_name() -> None:
    """``scores`` is the input's name: the output under that key cannot have it too."""
    program = onnxsight.export(EchoesItsInput(), (torch.randn(2, 3),))
    names = _outputs(program)
    assert names[0] != "scores" and names[1] == "x"
    assert [i.name for i in program.model_proto.graph.input] == ["scores"]


def test_a_named_dim_keeps_its_name_when_torch_makes_it_a_multiple() -> None:
    """``unflatten(-1, (-1, 8))`` makes torch.export rewrite ``width`` as ``8*_width`` (CAP007): the graph
    still says ``width`` (it wrote torch's own symbol, ``s73``, before)."""

    class Blocks(torch.nn.Module):
        def forward(self, image: torch.Tensor) -> torch.Tensor:
            return image.unflatten(-1, (-1, 8)).sum(-1)

    program = onnxsight.export(Blocks(), (torch.randn(2, 3, 16),),
                               dynamic_shapes={"image": {0: Dim("batch"), 2: Dim("width")}})
    dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in (program.model_proto.graph.input[0], program.model_proto.graph.output[0])]
    assert dims == [["batch", 3, "width"], ["batch", 3, "(width//8)"]]
    assert [d.code for d in program.diagnostics if d.code == "CAP007"] == ["CAP007"]
    image = torch.randn(3, 3, 40)
    torch.testing.assert_close(program(image)[0], image.unflatten(-1, (-1, 8)).sum(-1))


@pytest.mark.parametrize("inputs, outputs, expected", [
    (["input_ids", "past_key_values.0.key", "past_key_values.0.value"], ["logits", "present.0.key", "present.0.value"],
     {"past_key_values.0.key": "present.0.key", "past_key_values.0.value": "present.0.value"}),
    (["past_key_values.0.decoder.key", "past_key_values.0.encoder.key"], ["logits", "present.0.decoder.key"],
     {"past_key_values.0.decoder.key": "present.0.decoder.key", "past_key_values.0.encoder.key": None}),
])
def test_cache_pairs_pairs_each_cache_input_with_the_output_that_feeds_it(inputs: list[str], outputs: list[str],
                                                                          expected: dict[str, str | None]) -> None:
    assert cache_pairs(inputs, outputs) == expected
    assert present_name("past_key_values.3.encoder.value") == "present.3.encoder.value"
    assert past_name("present.3.encoder.value") == "past_key_values.3.encoder.value"
    assert present_name("input_ids") is None and past_name("logits") is None
