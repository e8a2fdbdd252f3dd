"""The torchvision and timm suites: every model the issue names, built with random weights and calibrated
BatchNorm, outputs of a meaningful scale; two of them through the zoo worker, verified per node.

Needs torchvision and timm, which `make test-vision` installs into .venv-vision; skipped elsewhere
(`make test` collects this file and skips it).
"""

from __future__ import annotations

import pytest

try:  # PyPI's torchvision raises RuntimeError/OSError (not ImportError) on a CPU torch without the shim
    import timm  # noqa: F401
    import torchvision  # noqa: F401
except Exception as exc:  # noqa: BLE001
    pytest.skip(f"torchvision/timm do not import here ({type(exc).__name__}): make test-vision sets them up",
                allow_module_level=True)

import torch
from torch.utils import _pytree as pytree

from onnxsight.zoo._spec import load_suite
from onnxsight.zoo._worker import _normalize, degenerate_scale, run_model

TORCHVISION = {
    "resnet18", "resnet50", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny",
    "vit_b_16", "swin_t", "regnet_y_400mf", "densenet121", "squeezenet1_0", "deeplabv3_mobilenet_v3_large",
    "fcn_resnet50", "lraspp_mobilenet_v3_large", "r3d_18", "raft_small", "fasterrcnn_mobilenet_v3_large_fpn",
    "retinanet_resnet50_fpn", "maskrcnn_resnet50_fpn", "fcos_resnet50_fpn", "ssdlite320_mobilenet_v3_large",
    "keypointrcnn_resnet50_fpn",
}
TIMM_FAMILIES = ("resnet", "efficientnet", "convnext", "vit_", "deit", "swin", "mobilevit", "regnet", "levit", "coat",
                 "maxvit", "efficientformer")
SPECS = [(suite, spec.name) for suite in ("torchvision", "timm") for spec in load_suite(suite).specs]


def test_torchvision_suite_lists_every_model() -> None:
    assert {s.name for s in load_suite("torchvision").specs} == {f"tv_{name}" for name in TORCHVISION}


def test_timm_suite_covers_cnns_vits_and_hybrids() -> None:
    names = [s.name for s in load_suite("timm").specs]
    assert len(names) >= 15
    assert [f for f in TIMM_FAMILIES if not any(f in n for n in names)] == []


@pytest.mark.parametrize("suite, model", SPECS)
def test_model_builds_calibrated_with_meaningful_outputs(suite: str, model: str) -> None:
    spec = load_suite(suite).spec(model)
    net, args, kwargs = _normalize(spec.build())
    assert not net.training
    for norm in (m for m in net.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)):
        assert not torch.equal(norm.running_var, torch.ones_like(norm.running_var)), "statistics left at init"
        assert not torch.equal(norm.weight, torch.ones_like(norm.weight)), "affine left at init"
    assert spec.dynamic, "every vision model exports with a dynamic dim"
    with torch.no_grad():
        outputs = net(*args, **kwargs)
    assert degenerate_scale(outputs) is None
    floats = [t for t in pytree.tree_leaves(outputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert all(bool(t.isfinite().all()) for t in floats) and max(float(t.abs().max()) for t in floats) < 1e4
    if "detection" in spec.tags:
        assert floats[0].shape[0] >= 3, "a detector must keep several boxes for the comparison to mean something"


@pytest.mark.parametrize("suite, model", [("torchvision", "tv_resnet18"), ("timm", "timm_vit_tiny_patch16_224"),
                                          # nms keeps other boxes from ONNX Runtime's own inputs (ACC011)
                                          ("torchvision", "tv_fasterrcnn_mobilenet_v3_large_fpn")])
def test_zoo_worker_passes_per_node_at_several_sizes(suite: str, model: str, tmp_path) -> None:
    result = run_model({"model": model, "suite": suite, "model_dir": str(tmp_path), "per_node": True,
                        "providers": ["CPUExecutionProvider"], "opset": None, "source": {}})
    assert (result.status, result.stage) == ("passed", "done"), (result.error, result.root_cause)
    assert len(result.verification["sizes_checked"]) >= 2 and result.verification["second_size"]["passed"]
    assert result.max_abs_diff < 1e-4 < result.reference_max_abs
