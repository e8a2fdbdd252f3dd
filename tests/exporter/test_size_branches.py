"""Models whose code branches on the input size (issue 32): ViT, ViT-MSN and MobileViT with dynamic height and width
are refused at the line that compares the size (CAP005); where the library offers a form that holds at every size
(ViT's and ViT-MSN's ``interpolate_pos_encoding=True``) the message gives it, and that form exports dynamic."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch.export import Dim

import onnxsight

transformers = pytest.importorskip("transformers")

SMALL = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
             intermediate_size=64, num_labels=3)
MODELS: dict[str, Callable[[], Any]] = {
    "ViTForImageClassification": lambda: transformers.ViTForImageClassification(transformers.ViTConfig(**SMALL)),
    "ViTMSNForImageClassification": lambda: transformers.ViTMSNForImageClassification(
        transformers.ViTMSNConfig(**SMALL)),
    "MobileViTForImageClassification": lambda: transformers.MobileViTForImageClassification(
        transformers.MobileViTConfig(image_size=32, patch_size=2, hidden_sizes=[16, 16, 16],
                                     neck_hidden_sizes=[8, 8, 16, 16, 16, 16, 32], num_attention_heads=2,
                                     num_labels=3)),
}
IMAGE = {"pixel_values": {0: Dim("batch"), 2: Dim("height"), 3: Dim("width")}}


def _model(name: str) -> Any:
    torch.manual_seed(0)
    return MODELS[name]().eval()


def _refusals(name: str) -> list[Any]:
    with pytest.raises(onnxsight.CaptureError) as caught:
        onnxsight.export(_model(name), (torch.randn(2, 3, 32, 32),), dynamic_shapes=IMAGE)
    return [d for d in caught.value.diagnostics if d.code == "CAP005"]


@pytest.mark.parametrize("name, module, file", [
    ("ViTForImageClassification", "ViTEmbeddings", "modeling_vit.py"),
    ("ViTMSNForImageClassification", "ViTMSNEmbeddings", "modeling_vit_msn.py"),
])
def test_a_size_check_with_a_form_for_every_size_is_refused_with_that_form(name: str, module: str, file: str) -> None:
    refusals = _refusals(name)
    assert [(d.fields["input"], d.fields["axis"]) for d in refusals] == [("pixel_values", 2), ("pixel_values", 3)]
    for refusal in refusals:
        assert "`if height != self.image_size[0] or width != self.image_size[1]:`" in refusal.message
        assert file in refusal.message
        assert (f"(or call {name} with interpolate_pos_encoding=True, with which {module} interpolates the position "
                "embeddings to any image size, from an example of another size than 32: a shortcut for the trained "
                "size fixes that one)") in refusal.message


@pytest.mark.slow
def test_a_size_fixed_by_the_code_itself_is_refused_without_an_alternative() -> None:
    """MobileViT unfolds its feature maps into patches of one size: nothing holds at every size."""
    refusals = _refusals("MobileViTForImageClassification")
    assert refusals and all("modeling_mobilevit.py" in d.message for d in refusals)
    assert not any("interpolate_pos_encoding" in d.message for d in refusals)


def test_the_form_the_message_gives_exports_dynamic_height_and_width() -> None:
    model = _model("ViTForImageClassification")
    program = onnxsight.export(model, (torch.randn(2, 3, 40, 48),), kwargs={"interpolate_pos_encoding": True},
                               dynamic_shapes={**IMAGE, "interpolate_pos_encoding": None})
    dims = program.model_proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 3, "height", "width"]
    image = torch.randn(1, 3, 56, 64)
    with torch.no_grad():
        expected = model(image, interpolate_pos_encoding=True).logits
    torch.testing.assert_close(program(image, interpolate_pos_encoding=True)[0], expected, atol=1e-4, rtol=1e-4)
