"""onnxsight.verify and verify_onnx end to end: results, diagnostics, inputs, chunks, providers, artifacts."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import onnxsight
from onnxsight import verification
from onnxsight.verification import Tolerance, VerificationError
from tests.conftest import cuda_available
from tests.verification.faults import scale_value
from tests.verification.models import build, exported

REQUIRED_COLUMNS = {"value", "fx_node", "target", "onnx_op", "dtype", "shape", "max_abs_diff", "max_rel_diff",
                    "mismatch_fraction", "cosine", "passed", "root_cause", "file", "line"}
MODELS = ["mlp", "attention", "gated"]
needs_no_cuda = pytest.mark.skipif(cuda_available(), reason="checks the error raised where CUDA is missing")


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
@pytest.mark.parametrize("model", MODELS)
def test_correct_export_passes_without_root_causes(model: str, mode: str) -> None:
    result = onnxsight.verify(exported(model), mode=mode)
    assert result.passed, result.nodes[~result.nodes["passed"]]
    assert result.root_causes.empty
    assert not [d for d in result.diagnostics if d.code.startswith("ACC") and d.code != "ACC008"]
    assert REQUIRED_COLUMNS <= set(result.nodes.columns)
    assert len(result.outputs) == len(exported(model).output_names)
    assert result.nodes["file"].str.endswith("models.py").all()
    assert result.info["sessions"] == 1


def test_every_fx_value_is_compared_with_its_onnx_value() -> None:
    prog = exported("mlp")
    result = onnxsight.verify(prog)
    computed = {n.name for n in prog.exported_program.graph.nodes if n.op == "call_function"}
    assert set(result.nodes["fx_node"]) == computed
    assert (result.nodes["value"] == result.nodes["fx_node"]).all()
    assert result.nodes.set_index("value").loc["linear", "onnx_op"] == "Gemm"


@pytest.mark.parametrize("model", ["mlp", "attention"])
def test_float16_models_use_float16_tolerance(model: str) -> None:
    result = onnxsight.verify(exported(model, torch.float16))
    assert result.passed
    assert set(result.nodes["dtype"]) == {"float16"}
    fp16 = Tolerance().for_value("", "float16")
    assert (result.nodes["atol"] == fp16.atol).all() and (result.nodes["rtol"] == fp16.rtol).all()


def test_float16_fault_is_still_localised() -> None:
    prog = exported("mlp", torch.float16)
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "linear_1", 1.1))
    assert list(result.root_causes["value"])[:1] == ["linear_1"]


def test_bfloat16_without_kernels_reports_ort001_instead_of_crashing() -> None:
    result = onnxsight.verify(exported("mlp", torch.bfloat16))
    assert not result.passed
    assert "ORT001" in [d.code for d in result.diagnostics]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_provider_and_cuda_torch(dtype: torch.dtype) -> None:
    prog = exported("mlp", dtype)
    result = onnxsight.verify(prog, providers=("CUDAExecutionProvider",), torch_device="cuda")
    assert result.passed, result.nodes[~result.nodes["passed"]]
    assert result.info["providers"][0] == "CUDAExecutionProvider"
    assert set(result.nodes["dtype"]) == {str(dtype).removeprefix("torch.")}


@pytest.mark.cuda
def test_verify_onnx_cpu_against_cuda() -> None:
    result = onnxsight.verify_onnx(exported("attention").model_proto)
    assert result.passed and len(result.nodes) > 0


def test_verify_onnx_compares_every_value_of_one_model_on_two_providers() -> None:
    prog = exported("gated")
    result = onnxsight.verify_onnx(prog.model_proto, target="CPUExecutionProvider")
    assert result.passed
    computed = {o for n in prog.model_proto.graph.node for o in n.output}
    assert set(result.nodes["value"]) == computed
    assert result.nodes.set_index("value").loc["sigmoid", "fx_node"] == "sigmoid"
    assert result.nodes.set_index("value").loc["sigmoid", "file"].endswith("models.py")
    outputs_only = onnxsight.verify_onnx(prog.model_proto, target="CPUExecutionProvider", per_node=False)
    assert list(outputs_only.nodes["value"]) == prog.output_names


@needs_no_cuda
def test_unavailable_provider_lists_the_available_ones() -> None:
    with pytest.raises(VerificationError, match="CPUExecutionProvider") as info:
        onnxsight.verify(exported("mlp"), providers=("CUDAExecutionProvider",))
    assert [d.code for d in info.value.diagnostics] == ["ORT003"]
    with pytest.raises(VerificationError, match="available providers"):
        onnxsight.verify_onnx(exported("mlp").model_proto)


@needs_no_cuda
def test_provider_fallback_is_recorded() -> None:
    result = onnxsight.verify(exported("mlp"), providers=("CUDAExecutionProvider", "CPUExecutionProvider"),
                              provider_fallback=True)
    assert result.passed
    assert result.info["providers"] == ["CPUExecutionProvider"]
    assert [d.code for d in result.diagnostics] == ["ORT004", "ACC008"]


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_small_memory_budget_splits_into_chunks_with_the_same_results(mode: str) -> None:
    prog = exported("mlp")
    whole = onnxsight.verify(prog, mode=mode)
    faulty = scale_value(prog.model_proto, "add_1")
    chunked = onnxsight.verify(prog, mode=mode, memory_budget=1, onnx_model=faulty)
    assert chunked.info["chunks"] == len(whole.nodes) and chunked.info["sessions"] == len(whole.nodes)
    assert list(chunked.root_causes["value"]) [:1] == ["add_1"]
    fine = onnxsight.verify(prog, mode=mode, memory_budget=1)
    np.testing.assert_allclose(fine.nodes["max_abs_diff"], whole.nodes["max_abs_diff"])


def test_per_node_false_compares_outputs_only() -> None:
    prog = exported("mlp")
    result = onnxsight.verify(prog, per_node=False)
    assert list(result.nodes["value"]) == prog.output_names and result.passed


def test_random_inputs_with_dynamic_dims_at_other_sizes() -> None:
    model, args = build("mlp")
    batch = torch.export.Dim("batch", min=1, max=64)
    prog = onnxsight.export(model, args, dynamic_shapes=({0: batch}, {0: batch}))
    result = onnxsight.verify(prog, random_inputs=True, seed=1)
    assert result.passed and result.nodes["shape"].iloc[0][0] != args[0].shape[0]
    sized = onnxsight.verify(prog, random_inputs=True, dim_sizes={"batch": 11})
    assert sized.passed and sized.nodes["shape"].iloc[0] == (11, 16)
    again = onnxsight.verify(prog, random_inputs=True, dim_sizes={"batch": 11})
    np.testing.assert_array_equal(sized.nodes["max_abs_diff"], again.nodes["max_abs_diff"])


def test_explicit_inputs_are_used() -> None:
    prog = exported("attention")
    result = onnxsight.verify(prog, (torch.zeros(8, 8),))
    assert result.passed


def test_onnx_model_from_a_path_pairs_values_whose_names_survive(tmp_path) -> None:
    prog = exported("mlp")
    renamed = onnx.ModelProto()
    renamed.CopyFrom(prog.model_proto)
    for node in renamed.graph.node:
        node.output[:] = ["renamed" if o == "relu" else o for o in node.output]
        node.input[:] = ["renamed" if i == "relu" else i for i in node.input]
    path = tmp_path / "optimised.onnx"
    onnx.save_model(renamed, path)
    result = onnxsight.verify(prog, onnx_model=str(path))
    assert result.passed
    assert "relu" not in set(result.nodes["value"]) and "relu_1" in set(result.nodes["value"])


def test_result_serialises_to_json() -> None:
    prog = exported("gated")
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "sigmoid"))
    data = json.loads(result.to_json())
    assert data["passed"] is False and data["root_causes"] == ["sigmoid"]
    assert {d["rule"] for d in data["diagnostics"]} >= {"ACC001", "ACC002"}
    assert len(data["nodes"]) == len(result.nodes)


def test_nan_introduced_is_reported_as_acc003() -> None:
    prog = exported("mlp")
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "relu_1", float("nan")))
    assert list(result.root_causes["value"]) == ["relu_1"]
    assert {"ACC002", "ACC003"} <= {d.code for d in result.diagnostics}


def test_repro_bundle_reproduces_the_divergence(tmp_path) -> None:
    import onnxruntime as ort

    prog = exported("attention")
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "mm"), mode="isolated")
    paths = result.write_repro(tmp_path)
    assert os.path.exists(tmp_path / "model.onnx") and os.path.exists(tmp_path / "test_data_set_0" / "output_0.pb")
    model = onnx.load(tmp_path / "model.onnx")
    onnx.checker.check_model(model)
    feeds = {}
    for i, value in enumerate(model.graph.input):
        tensor = onnx.TensorProto()
        tensor.ParseFromString((tmp_path / "test_data_set_0" / f"input_{i}.pb").read_bytes())
        feeds[value.name] = numpy_helper.to_array(tensor)
    expected = onnx.TensorProto()
    expected.ParseFromString((tmp_path / "test_data_set_0" / "output_0.pb").read_bytes())
    (actual,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert not np.allclose(actual, numpy_helper.to_array(expected), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(actual, numpy_helper.to_array(expected) * 1.01, rtol=1e-5, atol=1e-6)
    assert {os.path.basename(p) for p in paths} >= {"model.onnx", "input_0.pb", "output_0.pb"}


def test_model_explorer_overlay(tmp_path) -> None:
    prog = exported("mlp")
    result = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "mul"))
    path = result.write_model_explorer(tmp_path / "overlay.json")
    data = json.loads(open(path).read())
    graph = data[prog.model_proto.graph.name]
    assert set(graph["results"]) == set(result.nodes["value"])
    assert graph["results"]["mul"]["value"] == pytest.approx(result.nodes.set_index("value").loc["mul", "max_abs_diff"])
    assert [g["stop"] for g in graph["gradient"]][0] == 0 and graph["gradient"][-1]["stop"] == 1


def test_export_verify_attaches_the_result() -> None:
    model, args = build("gated")
    prog = onnxsight.export(model, args, verify=True)
    assert prog.verification is not None and prog.verification.passed
    assert prog.record.stages[-1].name == "accuracy"


def test_public_api() -> None:
    assert onnxsight.verify is verification.verify and onnxsight.verify_onnx is verification.verify_onnx
    assert onnxsight.Tolerance is Tolerance and onnxsight.VerificationResult is verification.VerificationResult
    assert sorted(verification.__all__) == sorted([
        "GenerationPrograms", "GenerationResult", "Tolerance", "VerificationError", "VerificationResult", "verify",
        "verify_onnx"])


def test_invalid_mode() -> None:
    with pytest.raises(VerificationError, match="propagated, isolated") as info:
        onnxsight.verify(exported("mlp"), mode="fast")
    assert info.value.rule == "VER010"


def test_cuda_runs_without_tf32_on_both_sides() -> None:
    # Ampere+ GPUs run float32 matmuls and convolutions in TF32 by default in ONNX Runtime's CUDA provider
    # (and in cuDNN under PyTorch): a correct MLP then "diverged" by 5e-4 at every Gemm on an H100.
    from onnxsight.verification._bundle_text import script
    from onnxsight.verification._runners import with_provider_options

    providers = with_provider_options(["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert providers == [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
    bundle_script = script(1e-4, 1e-4)
    assert '"use_tf32": "0"' in bundle_script
    compile(bundle_script, "repro.py", "exec")


@pytest.mark.cuda
@pytest.mark.parametrize("user_tf32", [False, True])
def test_cuda_verdict_ignores_the_users_tf32_setting_and_restores_it(user_tf32: bool) -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 30 * 30, 10)).eval()
    prog = onnxsight.export(model, (torch.randn(2, 3, 32, 32),))
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = user_tf32
    try:
        result = onnxsight.verify(prog, providers=("CUDAExecutionProvider",), torch_device="cuda")
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (user_tf32, user_tf32)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    assert result.passed, result.nodes[~result.nodes["passed"]]


class _ZeroDimConstants(torch.nn.Module):
    """``torch.tensor(...)`` of a size: a 0-d constant (int64, and float32), as DeBERTa-v2's attention scale."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        span = torch.tensor(x.size(-1))
        scale = torch.sqrt(torch.tensor(x.size(-1), dtype=torch.float) * 2.0)
        return x * span / scale


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_zero_dim_constants_keep_their_shape_when_verification_embeds_them(mode: str) -> None:
    # verify() reads a fresh program's weights from its tensors and embeds them in the session's model;
    # np.ascontiguousarray made every 0-d one shape [1]: a false ACC004 + ACC002 root cause on a clean model
    prog = onnxsight.export(_ZeroDimConstants(), (torch.randn(2, 8),))
    result = onnxsight.verify(prog, mode=mode)
    assert result.passed, result.nodes[~result.nodes["passed"]]
    assert not [d for d in result.diagnostics if d.code in ("ACC002", "ACC004")]


def test_a_zero_dim_numpy_input_is_accepted_as_its_tensor() -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
            return x * s

    prog = onnxsight.export(Scale(), (torch.randn(2, 3), torch.tensor(2.0)))
    result = onnxsight.verify(prog, args=(np.ones((2, 3), np.float32), np.array(3.0, np.float32)))
    assert result.passed, result.nodes[~result.nodes["passed"]]


class _Router(torch.nn.Module):
    """Mixtral's grouping: tokens sorted by expert id (ids tie by design), processed, put back in order."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(8, 4)
        self.expert = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expert = self.gate(x).argmax(-1)
        _, order = torch.sort(expert)
        grouped = self.expert(x[order]) * (expert[order].unsqueeze(-1) + 1)
        return torch.zeros_like(grouped).index_copy(0, order, grouped)


@pytest.mark.parametrize("mode", ["propagated", "isolated"])
def test_sort_indices_among_equal_keys_are_not_root_causes(mode: str) -> None:
    torch.manual_seed(0)
    prog = onnxsight.export(_Router().eval(), (torch.randn(32, 8),))
    result = onnxsight.verify(prog, mode=mode)
    assert result.passed, result.nodes[~result.nodes["passed"]]
    assert result.coverage_summary["order among equal keys"] == 1
    assert "sort" in set(result.nodes["fx_node"])  # the sorted keys themselves are compared
    faulty = onnxsight.verify(prog, mode=mode, onnx_model=scale_value(prog.model_proto, "linear_1", 1.01))
    assert list(faulty.root_causes["value"])[:1] == ["linear_1"]


class _ProbSparse(torch.nn.Module):
    """Informer's ProbSparse attention: the queries of the top-u scores, in topk(sorted=False)'s order, updated and
    scattered back in place, so the output does not depend on that order."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        top = self.q(x).amax(-1).topk(5, sorted=False)[1]
        rows = torch.arange(x.shape[0])[:, None]
        out = x.clone()
        out[rows, top] = self.q(x[rows, top]) * 2
        return out


def test_an_unsorted_topks_order_is_not_a_root_cause() -> None:
    """torch.topk(sorted=False) returns the top k in an order PyTorch leaves unspecified (ONNX's TopK sorts them):
    both outputs are fed on, not compared (Informer's ProbSparse attention failed verify with its outputs exact)."""
    torch.manual_seed(0)
    prog = onnxsight.export(_ProbSparse().eval(), (torch.randn(2, 32, 8),), dynamic_shapes=({0: "batch"},))
    result = onnxsight.verify(prog, other_sizes=True)
    assert result.passed, result.nodes[~result.nodes["passed"]]
    assert result.coverage_summary["order of an unsorted topk"] == 2
    faulty = onnxsight.verify(prog, onnx_model=scale_value(prog.model_proto, "linear", 1.01))
    assert list(faulty.root_causes["value"])[:1] == ["linear"]


def test_sort_indices_that_are_a_graph_output_are_still_compared() -> None:
    class Argsort(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.sort(x, dim=-1)

    prog = onnxsight.export(Argsort(), (torch.randn(4, 16),))  # no ties: one right answer
    result = onnxsight.verify(prog)
    assert result.passed and "order among equal keys" not in result.coverage_summary
    assert set(prog.output_names) <= set(result.nodes["value"])
