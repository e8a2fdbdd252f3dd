"""Zoo specs carry the dynamic dims deployments vary; the worker exports with them and verifies other sizes."""

from __future__ import annotations

import pytest
import torch

from onnxsight.zoo._spec import ModelSpec, dynamic_shapes_for, load_suite
from onnxsight.zoo._worker import run_model


class Decode(torch.nn.Module):
    def forward(self, ids: torch.Tensor, mask: torch.Tensor, past: tuple[torch.Tensor, ...],
                scale: float = 1.0) -> torch.Tensor:
        return ids.float().sum() + mask.float().sum() + sum(p.sum() for p in past) * scale


def _inputs() -> tuple:
    return (torch.zeros(2, 1), torch.ones(2, 7), (torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)))


def test_one_dim_per_name_shared_by_every_input() -> None:
    ids, mask, past = _inputs()
    shapes = dynamic_shapes_for({"ids": {0: "batch"}, "mask": {0: "batch", 1: "past+1"},
                                 "past": {0: "batch", 2: "past"}}, Decode(), (ids, mask, past), {})
    assert set(shapes) == {"ids", "mask", "past"}  # the arguments of this call (defaults stay out)
    batch = shapes["ids"][0]
    assert shapes["mask"][0] is batch and all(p[0] is batch for p in shapes["past"])
    assert shapes["past"][0][2] is shapes["past"][1][2]                       # one Dim for every cache tensor
    assert str(shapes["mask"][1]) == str(shapes["past"][0][2] + 1)            # the mask is one longer
    torch.export.export(Decode(), (ids, mask, past), dynamic_shapes=shapes)   # torch accepts the structure


def test_unknown_input_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\['input'\], which are not arguments of forward\(\)"):
        dynamic_shapes_for({"input": {0: "batch"}}, Decode(), _inputs(), {})


def test_explicit_dynamic_shapes_win() -> None:
    explicit = {"ids": None, "mask": None, "past": None, "scale": None}
    spec = ModelSpec("m", _inputs, dynamic_shapes=explicit, dynamic={"ids": {0: "batch"}})
    assert spec.dynamic_shapes_for(Decode(), _inputs(), {}) is explicit
    assert ModelSpec("m", _inputs).dynamic_shapes_for(Decode(), _inputs(), {}) is None


def _suites() -> list:
    suites = [load_suite("smoke"), load_suite("tricky"), load_suite("transformers")]
    return [spec for suite in suites for spec in suite.specs]


@pytest.mark.parametrize("spec", _suites(), ids=lambda s: s.name)
def test_every_zoo_model_is_exported_dynamic(spec: ModelSpec) -> None:
    dims = {name for axes in (spec.dynamic or {}).values() for name in axes.values()}
    assert dims, f"{spec.name} names no dynamic dim"
    if "text" in spec.tags and "kv-cache" not in spec.tags:
        assert {"batch", "sequence"} <= dims
    if spec.name in ("small_cnn", "hf_resnet", "hf_regnet", "hf_convnext", "hf_segformer"):  # dense vision
        assert {"batch", "height", "width"} <= dims


@pytest.mark.parametrize("model, sizes", [
    ("mlp", [{"batch": 2}, {"batch": 3}, {"batch": 1}]),
    ("residual_mlp", [{"batch": 3}, {"batch": 4}, {"batch": 1}]),
])
def test_worker_verifies_at_other_sizes(model: str, sizes: list, tmp_path) -> None:
    result = run_model({"model": model, "suite": "smoke", "model_dir": str(tmp_path),
                        "providers": ["CPUExecutionProvider"], "per_node": False, "opset": None, "source": {}})
    assert result.status == "passed", result.error
    assert result.verification["sizes_checked"] == sizes
    onnx_input = __import__("onnx").load(str(tmp_path / "model.onnx")).graph.input[0]
    assert onnx_input.type.tensor_type.shape.dim[0].dim_param == "batch"


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class _Program:
    """An exported program stand-in: ``module()`` runs ``fn`` (what a capture produced)."""

    output_names = ["out"]

    def __init__(self, fn) -> None:  # noqa: ANN001
        self.exported_program = type("EP", (), {"module": lambda _self: fn})()


@pytest.mark.parametrize("captured, passed, message", [
    (lambda x: x * 2, True, None),
    # a capture that baked the example's batch into a reshape: right at batch 2, wrong at batch 3
    (lambda x: x * 2 if x.shape[0] == 2 else x.roll(1, 0) * 2,
     False, "output out at batch 3 differs from forward() by"),
    (lambda x: x.view(2, 4) * 2, False, "output every output at batch 3 differs from forward() by the exported "
                                        "program fails: RuntimeError"),
])
def test_second_size_compares_the_program_with_eager(captured, passed, message) -> None:
    from onnxsight.zoo._result import ModelResult
    from onnxsight.zoo._worker import _second_size

    spec = ModelSpec("double", _inputs, dynamic={"x": {0: "batch"}})
    result = ModelResult(name="double", suite="t", status="failed", verification={})
    x = torch.arange(8.0).reshape(2, 4)
    assert _second_size(result, Double(), (x,), {}, _Program(captured), spec) is passed
    assert result.verification["second_size"]["sizes"] == {"batch": 3}
    assert result.verification["second_size"]["passed"] is passed
    codes = [d["rule"] for d in result.diagnostics]
    assert codes == ([] if passed else ["ACC007"])
    if message:
        assert message in result.diagnostics[0]["message"]
