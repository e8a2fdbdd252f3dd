"""onnxsight.export: the public contract, argument errors, naming and metadata."""

from __future__ import annotations

import inspect

import onnx
import pytest
import torch

import onnxsight
from onnxsight.exporter import CaptureError, InvalidArgumentError, TranslationError

THIS_FILE = __file__


class TinyMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) + y * 2


def test_export_runs_and_matches_eager() -> None:
    model, x, y = TinyMLP(), torch.randn(2, 4), torch.randn(2, 3)
    program = onnxsight.export(model, (x, y))
    assert isinstance(program, onnxsight.ONNXProgram)
    assert isinstance(program.model_proto, onnx.ModelProto)
    assert isinstance(program.exported_program, torch.export.ExportedProgram)
    (out,) = program(x, y)
    torch.testing.assert_close(out, model(x, y), atol=1e-5, rtol=1e-5)
    assert program.model_proto.opset_import[0].version == 18


def test_values_are_named_after_fx_nodes_and_weights_after_state_dict() -> None:
    program = onnxsight.export(TinyMLP(), (torch.randn(2, 4), torch.randn(2, 3)))
    graph = program.model_proto.graph
    produced = {name for node in graph.node for name in node.output}
    fx_names = [n.name for n in program.exported_program.graph.nodes if n.op == "call_function"]
    assert fx_names and all(name in produced for name in fx_names)
    weights = {i.name for i in graph.initializer if any(p.key.endswith("InputSpec.kind") for p in i.metadata_props)}
    assert weights == {"fc.weight", "fc.bias"}  # the other initializers are the exporter's constants
    assert program.value_names["p_fc_weight"] == "fc.weight"


def test_node_metadata_matches_torch_onnx_keys() -> None:
    program = onnxsight.export(TinyMLP(), (torch.randn(2, 4), torch.randn(2, 3)))
    gemm = next(n for n in program.model_proto.graph.node if n.op_type == "Gemm")
    props = {p.key: p.value for p in gemm.metadata_props}
    assert set(props) >= {"namespace", "pkg.torch.onnx.class_hierarchy", "pkg.torch.onnx.fx_node",
                          "pkg.torch.onnx.name_scopes", "pkg.torch.onnx.stack_trace"}
    assert "fc: torch.nn.modules.linear.Linear" in props["namespace"]
    assert THIS_FILE in props["pkg.torch.onnx.stack_trace"]
    kinds = {i.name: {p.key: p.value for p in i.metadata_props} for i in program.model_proto.graph.initializer}
    assert kinds["fc.weight"]["pkg.torch.export.graph_signature.InputSpec.kind"] == "PARAMETER"
    inputs = {p.key: p.value for p in program.model_proto.graph.input[0].metadata_props}
    assert inputs["pkg.torch.export.graph_signature.InputSpec.kind"] == "USER_INPUT"
    graph_meta = {p.key for p in program.model_proto.metadata_props}
    assert "pkg.torch.export.ExportedProgram.graph_signature" in graph_meta


def test_input_and_output_names_rename_graph_io() -> None:
    program = onnxsight.export(TinyMLP(), (torch.randn(2, 4), torch.randn(2, 3)),
                               input_names=["features", "bias"], output_names=["scores"])
    graph = program.model_proto.graph
    assert [i.name for i in graph.input] == ["features", "bias"]
    assert [o.name for o in graph.output] == ["scores"]
    onnx.checker.check_model(program.model_proto)


def test_export_writes_file(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnxsight.export(TinyMLP(), (torch.randn(2, 4), torch.randn(2, 3)), path)
    onnx.checker.check_model(onnx.load(str(path)))


@pytest.mark.parametrize("opset", [17, 18, 20, 23])
def test_supported_opsets(opset: int) -> None:
    model, x, y = TinyMLP(), torch.randn(2, 4), torch.randn(2, 3)
    program = onnxsight.export(model, (x, y), opset_version=opset)
    assert program.model_proto.opset_import[0].version == opset
    torch.testing.assert_close(program(x, y)[0], model(x, y), atol=1e-5, rtol=1e-5)


# -- bad arguments: a clear ExportError before any work is done -------------------------------------
def _line_of(text: str) -> int:
    lines, start = inspect.getsourcelines(test_bad_arguments_name_the_problem)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("case, code, words", [
    ("not-a-module", "ARG001", "expects a torch.nn.Module, got function"),
    ("opset", "ARG004", "opset_version 12 is not supported; supported versions are 15..25"),
    ("too-many-args", "ARG002", "too many positional arguments"),
    ("dynamic-shapes-keys", "ARG003", "keys ['nope'] are not arguments of forward()"),
    ("dynamic-shapes-length", "ARG003", "3 entries for 2 inputs"),
    ("both-dynamic", "ARG005", "not both"),
])
def test_bad_arguments_name_the_problem(case: str, code: str, words: str) -> None:
    model, x, y = TinyMLP(), torch.randn(2, 4), torch.randn(2, 3)
    kwargs: dict = {}
    args: tuple = (x, y)
    if case == "not-a-module":
        model = lambda a, b: a  # noqa: E731
    elif case == "opset":
        kwargs["opset_version"] = 12
    elif case == "too-many-args":
        args = (x, y, y)
    elif case == "dynamic-shapes-keys":
        kwargs["dynamic_shapes"] = {"nope": {0: torch.export.Dim("b")}}
    elif case == "dynamic-shapes-length":
        kwargs["dynamic_shapes"] = ({0: torch.export.Dim("b")}, None, None)
    elif case == "both-dynamic":
        kwargs.update(dynamic_shapes={"x": {0: torch.export.Dim("b")}}, dynamic_axes={"x": [0]})
    with pytest.raises(InvalidArgumentError) as info:
        onnxsight.export(model, args, **kwargs)  # the call site
    error = info.value
    assert code in str(error) and words in str(error)
    assert [d.code for d in error.diagnostics if d.level.value == "error"] == [code]
    located = error.diagnostics[0].location
    assert located is not None and located.file == THIS_FILE and located.line == _line_of("# the call site")
    assert [s.name for s in error.record.stages] == ["arguments"]  # nothing else was attempted


def test_unsupported_ops_are_all_listed_with_source_lines() -> None:
    class Unsupported(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = torch.special.bessel_j0(x)  # line A
            b = torch.special.bessel_j1(x)  # line B
            return a + b

    with pytest.raises(TranslationError) as info:
        onnxsight.export(Unsupported(), (torch.randn(3),))
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.code for d in errors] == ["OPS002", "OPS002"]
    lines, start = inspect.getsourcelines(Unsupported)
    expected = [start + i for i, line in enumerate(lines) if "# line" in line]
    assert [d.location.line for d in errors] == expected
    assert all(d.location.file == THIS_FILE for d in errors)
    text = str(info.value)
    assert "aten.special_bessel_j0.default" in text and "aten.special_bessel_j1.default" in text
    assert f"{THIS_FILE}:{expected[0]}" in text


def test_capture_failure_records_every_strategy() -> None:
    class DataDependent(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent Python branch
                return x + 1
            return x - 1

    with pytest.raises(CaptureError) as info:
        onnxsight.export(DataDependent(), (torch.randn(3),))
    attempts = info.value.record.attempts
    assert [a.strategy for a in attempts] == ["torch.export(strict=False)", "torch.export(strict=True)"]
    assert not any(a.success for a in attempts)
    codes = [d.code for d in info.value.diagnostics]
    assert codes.count("CAP001") == 2 and "CAP002" in codes
    cap002 = next(d for d in info.value.diagnostics if d.code == "CAP002")
    assert cap002.location is not None and cap002.location.file == THIS_FILE


def test_model_left_in_training_mode_is_restored() -> None:
    model = TinyMLP().train()
    onnxsight.export(model, (torch.randn(2, 4), torch.randn(2, 3)))
    assert model.training


def test_weights_no_node_reads_are_left_out() -> None:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).eval()
    program = onnxsight.export(model, (torch.randn(1, 3, 8, 8),))
    names = {i.name for i in program.model_proto.graph.initializer}
    read = {name for node in program.model_proto.graph.node for name in node.input}
    assert names <= read and "1.num_batches_tracked" not in names   # the batch norm is folded into the conv
    plain = onnxsight.export(model, (torch.randn(1, 3, 8, 8),), optimize=False)
    names = {i.name for i in plain.model_proto.graph.initializer}
    assert "1.running_mean" in names and "1.num_batches_tracked" not in names
