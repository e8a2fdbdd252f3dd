"""Module hierarchy as ONNX local functions: ``export(..., module_functions=True | {classes})``.

Each selected module call is one node calling a FunctionProto named after its
class (domain ``pkg.onnxsight.modules``), the node named after the module
path; calls with the same signature share a function, weights are function
inputs. The model must pass the full checker, run in ONNX Runtime like eager
PyTorch, inline back to the flat export's graph (names included), and verify
value by value inside the functions.
"""

from __future__ import annotations

import json
from typing import Any

import onnx
import pytest
import torch
from torch import nn

import onnxsight
from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter import inline_functions
from onnxsight.exporter.translate._functions import FUNCTION_DOMAIN, ModuleCall, Modularizer
from onnxsight.exporter.translate._inline import NAMES_KEY
from tests.verification.faults import change_attribute, scale_value


class Block(nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2.0


class Stack(nn.Module):
    """``first`` called twice, two more Blocks, a head of another shape: one Block function, two Linears."""

    def __init__(self) -> None:
        super().__init__()
        self.first = Block()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(self.first(x))
        for block in self.blocks:
            x = block(x)
        return self.head(x) + 2.0


class Slopes(nn.Module):
    """The same class with different attributes: two functions."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.LeakyReLU(0.1), nn.LeakyReLU(0.2), nn.LeakyReLU(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(self.b(self.a(x)))


class Branch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() + 1, (x,))


class Branches(nn.Module):
    """If nodes inside a shared function: subgraph names must come back per call when inlined."""

    def __init__(self) -> None:
        super().__init__()
        self.one, self.two = Branch(), Branch()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.two(self.one(x) - 1.5)


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.encoder(x))


def _export(model: nn.Module, x: torch.Tensor, dynamic: bool = False, **options: Any) -> onnxsight.ONNXProgram:
    torch.manual_seed(0)
    shapes = {"x": {0: torch.export.Dim("batch")}} if dynamic else None
    return onnxsight.export(model.eval(), (x,), dynamic_shapes=shapes, **options)


def _calls(model: onnx.ModelProto) -> dict[str, str]:
    """call node name -> function name, in the main graph and every function body."""
    nodes = [*model.graph.node, *(n for f in model.functions for n in f.node)]
    return {n.name: n.op_type for n in nodes if n.domain == FUNCTION_DOMAIN}


def _outputs(model: onnx.ModelProto) -> set[str]:
    return {o for n in model.graph.node for o in n.output if o}


# -- structure -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("selection", "calls", "functions"), [
    # Block's body (shared by four calls) is its first call's: it calls Linear as first.fc
    (True, {"first": "Block", "first@1": "Block", "blocks.0": "Block", "blocks.1": "Block", "head": "Linear_1",
            "first.fc": "Linear"}, {"Block", "Linear", "Linear_1"}),
    ({Block}, {"first": "Block", "first@1": "Block", "blocks.0": "Block", "blocks.1": "Block"}, {"Block"}),
    ({nn.Linear}, {"first.fc": "Linear", "first.fc@1": "Linear", "blocks.0.fc": "Linear", "blocks.1.fc": "Linear",
                   "head": "Linear_1"}, {"Linear", "Linear_1"}),
])
def test_function_structure(selection: Any, calls: dict[str, str], functions: set[str]) -> None:
    model = _export(Stack(), torch.randn(2, 4), module_functions=selection).model_proto
    assert _calls(model) == calls
    assert {f.name for f in model.functions} == functions
    assert all(f.domain == FUNCTION_DOMAIN for f in model.functions)
    assert any(o.domain == FUNCTION_DOMAIN for o in model.opset_import)
    # weights are function inputs, never embedded: the initializers stay the main graph's
    assert {t.name for t in model.graph.initializer} == {n for n, _ in Stack().named_parameters()}
    block = {f.name: f for f in model.functions}.get("Block")
    if block is not None:
        assert list(block.input)[1:] == ["first.fc.weight", "first.fc.bias"]
        assert ("Linear" in {n.op_type for n in block.node}) is (selection is True)  # nested modules nest


def test_call_nodes_carry_the_module_scope() -> None:
    model = _export(Stack(), torch.randn(2, 4), module_functions=True).model_proto
    call = next(n for n in model.graph.node if n.name == "blocks.1")
    meta = {p.key: p.value for p in call.metadata_props}
    assert meta["namespace"] == f"blocks.1: {__name__}.Block"
    assert json.loads(meta[NAMES_KEY])["values"][-1] == call.output[0]   # its own names, for inlining
    first = next(n for n in model.graph.node if n.name == "first")
    assert NAMES_KEY not in {p.key for p in first.metadata_props}        # the body carries the first call's names


def test_same_class_with_other_attributes_is_another_function() -> None:
    model = _export(Slopes(), torch.randn(2, 4), module_functions=True).model_proto
    assert _calls(model) == {"a": "LeakyReLU", "b": "LeakyReLU_1", "c": "LeakyReLU"}


@pytest.mark.parametrize("dynamic", [False, True])
def test_every_layer_calls_one_function_with_a_dynamic_batch_too(dynamic: bool) -> None:
    """The batch size torch.export reads once (in the first layer) must not make that layer a function apart."""
    program = _export(Encoder(), torch.randn(2, 5, 16), dynamic, module_functions={nn.TransformerEncoderLayer})
    assert _calls(program.model_proto) == {"encoder.layers.0": "TransformerEncoderLayer",
                                           "encoder.layers.1": "TransformerEncoderLayer"}


def test_default_is_flat() -> None:
    model = _export(Stack(), torch.randn(2, 4)).model_proto
    assert not model.functions and not _calls(model)


# -- validity and runtime ----------------------------------------------------------------------------------
CASES = [
    pytest.param(Stack, (2, 4), False, id="stack"),
    pytest.param(Stack, (2, 4), True, id="stack-dynamic-batch"),
    pytest.param(Encoder, (2, 5, 16), True, id="transformer-dynamic-batch"),
    pytest.param(Branches, (3, 4), False, id="if-subgraphs"),
]


@pytest.mark.parametrize(("factory", "shape", "dynamic"), CASES)
def test_runs_in_ort_and_matches_eager(factory: Any, shape: tuple[int, ...], dynamic: bool) -> None:
    torch.manual_seed(0)
    model = factory().eval()
    program = _export(model, torch.randn(*shape), dynamic, module_functions=True)
    onnx.checker.check_model(program.model_proto, full_check=True)
    assert program.model_proto.functions
    sizes = [shape, (5, *shape[1:])] if dynamic else [shape]
    for size in sizes:
        x = torch.randn(*size)
        with torch.no_grad():
            expected = model(x)
        torch.testing.assert_close(program(x)[0], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("factory", "shape", "dynamic"), CASES)
def test_inlining_gives_back_the_flat_export(factory: Any, shape: tuple[int, ...], dynamic: bool) -> None:
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.randn(*shape)
    flat = _export(model, x, dynamic, optimize=False).model_proto  # module functions are not optimised
    inlined = inline_functions(_export(model, x, dynamic, module_functions=True).model_proto)
    assert not inlined.functions and not _calls(inlined)
    assert _outputs(inlined) == _outputs(flat)
    onnx.checker.check_model(inlined, full_check=True)


@pytest.mark.parametrize("external_data", [False, True])
def test_save_inline_functions_writes_a_flat_model(tmp_path: Any, external_data: bool) -> None:
    x = torch.randn(2, 4)
    program = _export(Stack(), x, module_functions=True)
    kept, flat = tmp_path / "functions.onnx", tmp_path / "flat.onnx"
    program.save(kept, external_data=external_data)
    program.save(flat, external_data=external_data, inline_functions=True)
    assert onnx.load(kept).functions
    loaded = onnx.load(flat)
    assert not loaded.functions and not _calls(loaded)
    assert _outputs(loaded) == _outputs(_export(Stack(), x, optimize=False).model_proto)
    import onnxruntime as ort

    results = [ort.InferenceSession(str(p)).run(None, {"x": x.numpy()})[0] for p in (kept, flat)]
    torch.testing.assert_close(torch.from_numpy(results[1]), torch.from_numpy(results[0]))
    torch.testing.assert_close(torch.from_numpy(results[0]), program(x)[0])


# -- verification inside functions ---------------------------------------------------------------------------
@pytest.mark.parametrize(("factory", "shape"), [(Stack, (2, 4)), (Encoder, (2, 5, 16)), (Branches, (3, 4))])
def test_per_node_verification_pairs_every_value_inside_functions(factory: Any, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = factory().eval()
    x = torch.randn(*shape)
    flat = onnxsight.verify(_export(model, x, optimize=False), (x,))
    nested = onnxsight.verify(_export(model, x, module_functions=True), (x,))
    assert flat.passed and nested.passed
    assert nested.info["paired"] == flat.info["paired"] >= 5
    assert list(nested.nodes["value"]) == list(flat.nodes["value"])


@pytest.mark.parametrize(("factory", "function", "fault", "mode", "root_causes"), [
    # the head, called once
    (Stack, "Linear_1", lambda m: scale_value(m, "linear_4"), "propagated", ["linear_4"]),
    # shared by four calls: the first call diverges first, the others are downstream of it
    (Stack, "Block", lambda m: scale_value(m, "relu"), "propagated", ["relu"]),
    # shared by self.a and self.c: each call is wrong where it runs (values mapped per call)
    (Slopes, "LeakyReLU", lambda m: change_attribute(m, "leaky_relu", "alpha", 0.5), "isolated",
     ["leaky_relu", "leaky_relu_2"]),
])
def test_a_fault_inside_a_function_is_located(factory: Any, function: str, fault: Any, mode: str,
                                              root_causes: list[str]) -> None:
    x = torch.randn(2, 4)
    program = _export(factory(), x, module_functions=True)
    faulty = _in_function(program.model_proto, function, fault)
    result = onnxsight.verify(program, (x,), onnx_model=faulty, mode=mode)
    assert not result.passed
    assert list(result.root_causes["value"]) == root_causes


def _in_function(model: onnx.ModelProto, function: str, fault: Any) -> onnx.ModelProto:
    """``fault`` (a tests.verification.faults helper) applied to the body of ``function``, as a graph."""
    faulty = onnx.ModelProto()
    faulty.CopyFrom(model)
    proto = next(f for f in faulty.functions if f.name == function)
    body = fault(onnx.helper.make_model(onnx.helper.make_graph(list(proto.node), "body", [], []))).graph.node
    del proto.node[:]
    proto.node.extend(body)
    return faulty


# -- arguments and diagnostics ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "named"), [
    ("Block", "the string 'Block'"),
    (Block(), "a Block instance"),
    (Block, "the class Block alone"),
    ({int}, "int in the set, which is not a torch.nn.Module class"),
    ({"Block"}, "'Block' in the set"),
    (3, "a int"),
])
def test_bad_module_functions_is_arg015(value: Any, named: str) -> None:
    with pytest.raises(onnxsight.InvalidArgumentError) as info:
        onnxsight.export(Stack(), (torch.randn(2, 4),), module_functions=value)
    [diagnostic] = [d for d in info.value.diagnostics if d.rule.code == "ARG015"]
    assert named in diagnostic.message


def test_a_class_the_model_never_calls_is_onx006() -> None:
    program = _export(Stack(), torch.randn(2, 4), module_functions={nn.TransformerEncoderLayer, Block})
    [diagnostic] = [d for d in program.diagnostics if d.rule.code == "ONX006"]
    assert "TransformerEncoderLayer" in diagnostic.fields["which"] and "Block" not in diagnostic.fields["which"]
    assert "Linear" in diagnostic.fields["called"]
    assert set(_calls(program.model_proto).values()) == {"Block"}


def test_a_call_whose_values_flow_out_and_back_stays_inline_onx005() -> None:
    """A -> B -> C with A and C recorded in module m and B outside it: m cannot be one node."""
    make = onnx.helper.make_node
    nodes = [make("Relu", ["x"], ["a"], name="A"), make("Neg", ["a"], ["b"], name="B"),
             make("Add", ["a", "b"], ["c"], name="C"), make("Relu", ["c"], ["d"], name="D")]
    inner, outer = ModuleCall("m.n", "m.n", "pkg.Inner"), ModuleCall("m", "m", "pkg.Outer")
    stacks = [(outer,), (), (outer, inner), (outer, inner)]
    ctx = DiagnosticContext()
    main, functions = Modularizer(nodes, stacks, {}, ["d"], {"": 18}, ctx).run()
    assert [d.rule.code for d in ctx.diagnostics] == ["ONX005"]
    assert ctx.diagnostics[0].fields["call"] == "m" and ctx.diagnostics[0].module_path == "m"
    assert [n.op_type for n in main] == ["Relu", "Neg", "Inner"]   # m flattened, m.n still a function
    assert [f.name for f in functions] == ["Inner"]


def test_cli_module_functions(tmp_path: Any) -> None:
    from onnxsight import cli

    source = tmp_path / "model.py"
    source.write_text("import torch\n"
                      "def build():\n"
                      "    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), (torch.randn(2, 4),)\n")
    out = tmp_path / "m.onnx"
    assert cli.main(["export", str(source), "-o", str(out), "--module-functions"]) == 0
    assert _calls(onnx.load(out)) == {"0": "Linear", "1": "ReLU"}


def test_report_facts_count_the_ops_inside_functions() -> None:
    from onnxsight.pipeline._facts import model_facts

    x = torch.randn(2, 4)

    def ops(program: onnxsight.ONNXProgram) -> dict[str, int]:
        facts = model_facts(None, None, (x,), {}, program, program.model_proto, program.record)
        return facts["onnx_ops"]

    nested, flat = ops(_export(Stack(), x, module_functions=True)), ops(_export(Stack(), x, optimize=False))
    # each call runs its function's body; a constant the flat graph shares is a copy in each body that reads it
    assert nested.pop("Constant") >= flat.pop("Constant")
    assert nested == flat == {"Gemm": 5, "Relu": 4, "Mul": 4, "Add": 1}
