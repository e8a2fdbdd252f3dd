"""Export never changes the user's module: every submodule's own mode survives, PT2E modules export."""

from __future__ import annotations

import copy

import pytest
import torch

from onnxsight.exporter._api import export


class Mixed(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.bn(self.conv(x))).mean((2, 3)))


@pytest.mark.parametrize("top_training", [True, False])
def test_every_submodule_keeps_its_own_mode(top_training: bool) -> None:
    model = Mixed().train(top_training)
    model.bn.eval()                  # frozen BatchNorm inside a training model
    model.head[1].train()            # a training BatchNorm inside an eval model
    before = {name: m.training for name, m in model.named_modules()}
    state = {k: v.clone() for k, v in model.state_dict().items()}
    export(model, (torch.randn(2, 3, 6, 6),))
    assert {name: m.training for name, m in model.named_modules()} == before
    for key, value in model.state_dict().items():  # running stats untouched: captured in eval semantics
        assert torch.equal(value, state[key]), key


def test_captured_in_eval_semantics() -> None:
    model = Mixed().train()
    x = torch.randn(2, 3, 6, 6)
    program = export(model, (x,))
    with torch.no_grad():
        expected = copy.deepcopy(model).eval()(x)
    assert "Dropout" not in {n.op_type for n in program.model_proto.graph.node}
    torch.testing.assert_close(torch.as_tensor(program(x)[0]), expected, rtol=1e-4, atol=1e-5)


def test_exported_graph_module_is_not_switched() -> None:
    """torch.export's .module() (and PT2E's convert_pt2e) graphs: train()/eval() are never called."""
    graph = torch.export.export(Mixed().eval(), (torch.randn(2, 3, 6, 6),)).module()

    def refuse(mode: bool = True) -> None:
        raise NotImplementedError("Calling train() or eval() is not supported for exported models.")

    graph.train, graph.eval = refuse, refuse  # what torchao's PT2E does to its graph modules
    training = {name: m.training for name, m in graph.named_modules()}
    export(graph, (torch.randn(2, 3, 6, 6),))
    assert {name: m.training for name, m in graph.named_modules()} == training


def test_pt2e_quantized_module_exports() -> None:
    models = pytest.importorskip("tests.quantized.models", reason="torchao is not installed")
    _, quantized, args, _ = models.conv_bn_residual()
    training = {name: m.training for name, m in quantized.named_modules()}
    program = export(quantized, args)
    assert program.model_proto.graph.node
    assert {name: m.training for name, m in quantized.named_modules()} == training
