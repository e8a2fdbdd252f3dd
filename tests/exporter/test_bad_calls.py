"""Every bad call to export() ends in one clear ARG error before any work, naming the argument.

Each row: the call, the exception class, the rule code, and words the message
must contain (the argument, the concrete value, the valid alternatives).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import onnx
import pytest
import torch

import onnxsight
from onnxsight.exporter import InvalidArgumentError

HERE = os.path.abspath(__file__)


class One(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


class Two(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y


class Pair(torch.nn.Module):
    def forward(self, pair: list[torch.Tensor]) -> torch.Tensor:
        return pair[0] * pair[1]


class Big(torch.nn.Module):
    """3 GB of weights on the meta device: large for the size checks, free to build."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(3 * 1024**3 // 4, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


X4 = torch.randn(2, 3, 4, 5)
X = torch.randn(2, 3)


def _identity(b: Any, x: Any) -> Any:
    return x


@dataclass(frozen=True)
class Bad:
    """A call to export() that must fail with ``code`` and a message containing ``words``."""

    id: str
    model: Callable[[], torch.nn.Module]
    args: tuple
    options: dict[str, Any]
    code: str
    words: tuple[str, ...]
    error: type[Exception] = InvalidArgumentError
    paths: tuple[str, ...] = field(default=())   # options that are paths inside tmp_path (given relative)


_NOT_A_FOLDER = "a_file.txt"

BAD_CALLS = (
    Bad("opset-as-string", One, (X,), {"opset_version": "18"}, "ARG006", ("opset_version must be an int", "str '18'")),
    Bad("opset-as-float", One, (X,), {"opset_version": 18.0}, "ARG006", ("float 18.0",)),
    Bad("opset-as-bool", One, (X,), {"opset_version": True}, "ARG006", ("bool True",)),
    Bad("opset-out-of-range", One, (X,), {"opset_version": 99}, "ARG004", ("opset_version 99", "15..25")),
    Bad("output-names-string", One, (X,), {"output_names": "logits"}, "ARG007",
        ("output_names must be a list of strings", "'logits'", "letter by letter", "6 names", "['logits']")),
    Bad("input-names-string", One, (X,), {"input_names": "x"}, "ARG007", ("input_names", "['x']")),
    Bad("input-names-not-strings", One, (X,), {"input_names": [3]}, "ARG007", ("entry 0 is int 3",)),
    Bad("output-names-duplicate", Two, (X, X.clone()), {"output_names": ["a", "a"]}, "ARG007",
        ("'a' more than once",)),
    Bad("f-is-a-folder", One, (X,), {"f": "."}, "ARG008", ("it is a folder", "model.onnx"), paths=("f",)),
    Bad("f-under-a-file", One, (X,), {"f": f"{_NOT_A_FOLDER}/m.onnx"}, "ARG008",
        ("a_file.txt", "is a file, so no folder can be created"), paths=("f",)),
    Bad("f-wrong-type", One, (X,), {"f": 42}, "ARG008", ("<int>", "binary file object")),
    Bad("f-text-mode", One, (X,), {"f": io.StringIO()}, "ARG008", ("text mode", "'wb'")),
    Bad("bytesio-external-data", One, (X,), {"f": io.BytesIO(), "external_data": True}, "ARG013",
        ("file object", "external_data=True")),
    Bad("bytesio-above-2gb", Big, (X,), {"f": io.BytesIO()}, "ARG013", ("3.0 GB", "above 2 GB")),
    Bad("artifacts-dir-is-a-file", One, (X,), {"report": True, "artifacts_dir": _NOT_A_FOLDER}, "ARG009",
        ("artifacts_dir=", "a_file.txt", "it is a file, not a folder"), paths=("artifacts_dir",)),
    Bad("artifacts-dir-under-a-file", One, (X,), {"report": True, "artifacts_dir": f"{_NOT_A_FOLDER}/reports"},
        "ARG009", ("no folder can be created inside it",), paths=("artifacts_dir",)),
    Bad("artifacts-dir-not-a-path", One, (X,), {"report": True, "artifacts_dir": 3}, "ARG009",
        ("expected a folder path, got int",)),
    Bad("translation-key-without-namespace", One, (X,), {"custom_translations": {"relu": _identity}}, "ARG010",
        ("'relu' has no namespace", "did you mean 'aten::relu'")),
    Bad("translation-key-without-namespace-custom", One, (X,), {"custom_translations": {"frobnicate": _identity}},
        "ARG010", ("'frobnicate'", "mylib::frobnicate")),
    Bad("translation-for-misspelt-op", One, (X,), {"custom_translations": {"aten::reluu": _identity}}, "ARG011",
        ("'aten::reluu' matches no operator", "no operator 'reluu'", "aten::relu")),
    Bad("translation-for-missing-overload", One, (X,), {"custom_translations": {"aten::transpose": _identity}},
        "ARG011",
        ("aten::transpose has no overload 'default'", "its overloads are int", "aten::transpose.<overload>")),
    Bad("translation-for-packet-without-default", One, (X,),
        {"custom_translations": {torch.ops.aten.transpose: _identity}}, "ARG011",
        ("torch.ops.aten.transpose matches no operator", "no overload 'default'", "int")),
    Bad("translation-in-unknown-namespace", One, (X,), {"custom_translations": {"nolib::op": _identity}},
        "ARG011", ("no operator is registered in namespace 'nolib'",)),
    Bad("translations-not-a-dict", One, (X,), {"custom_translations": [_identity]}, "ARG005",
        ("custom_translations", "expected a dict")),
    Bad("translation-not-callable", One, (X,), {"custom_translations": {"aten::relu": 3}}, "ARG005",
        ("not callable",)),
    Bad("dynamic-axes-axis-out-of-range", One, (X4,), {"dynamic_axes": {"x": {7: "b"}}}, "ARG003",
        ("axis 7 of input x does not exist", "rank 4", "axes 0..3")),
    Bad("dynamic-axes-negative-axis", One, (X4,), {"dynamic_axes": {"x": [-1]}}, "ARG003",
        ("axis -1 of input x", "axes 0..3")),
    Bad("dynamic-axes-by-input-name", One, (X4,), {"dynamic_axes": {"features": {5: "b"}},
                                                   "input_names": ["features"]}, "ARG003",
        ("axis 5 of input x (input_names: 'features')", "rank 4")),
    Bad("dynamic-axes-not-a-dict", One, (X4,), {"dynamic_axes": [0]}, "ARG003", ("must be a dict",)),
    Bad("dynamic-shapes-axis-out-of-range", One, (X4,), {"dynamic_shapes": {"x": {7: torch.export.Dim("b")}}},
        "ARG003", ("axis 7 of input x does not exist", "rank 4", "axes 0..3")),
    Bad("dynamic-shapes-tuple-axis-out-of-range", One, (X4,), {"dynamic_shapes": ({4: torch.export.Dim("b")},)},
        "ARG003", ("axis 4 of input x",)),
    Bad("dynamic-shapes-list-too-short", One, (X4,), {"dynamic_shapes": {"x": [torch.export.Dim("b")]}},
        "ARG003", ("input x has rank 4 but its entry lists 1 axes",)),
    Bad("dynamic-shapes-nested-axis", Pair, ([X, X.clone()],),
        {"dynamic_shapes": {"pair": [{0: torch.export.Dim("b")}, {2: torch.export.Dim("c")}]}}, "ARG003",
        ("axis 2 of input pair[1]", "rank 2")),
    Bad("dynamic-shapes-unknown-key", One, (X4,), {"dynamic_shapes": {"input": {0: torch.export.Dim("b")}}},
        "ARG003", ("keys ['input'] are not arguments of forward()", "['x']")),
)


def _call(bad: Bad, tmp_path: str) -> None:
    options = dict(bad.options)
    with open(os.path.join(tmp_path, _NOT_A_FOLDER), "w", encoding="utf-8") as handle:
        handle.write("not a folder")
    for name in bad.paths:
        options[name] = os.path.join(tmp_path, options[name])
    onnxsight.export(bad.model(), bad.args, **options)


@pytest.mark.parametrize("bad", BAD_CALLS, ids=[b.id for b in BAD_CALLS])
def test_bad_call_is_one_clear_argument_error(bad: Bad, tmp_path: Any) -> None:
    with pytest.raises(bad.error) as info:
        _call(bad, str(tmp_path))
    errors = [d for d in info.value.diagnostics if d.level.value == "error"]
    assert [d.rule.code for d in errors] == [bad.code], [str(d) for d in errors]
    message = errors[0].message
    for words in bad.words:
        assert words in message, f"{words!r} not in {message!r}"
    assert info.value.record.stages[-1].name == "arguments", "the error must come before any capture work"
    assert errors[0].location is not None and errors[0].location.file == HERE


@pytest.mark.parametrize("external_data", [None, False])
def test_bytesio_receives_the_serialized_model(external_data: bool | None) -> None:
    buffer = io.BytesIO()
    program = onnxsight.export(One(), (X,), buffer, external_data=external_data)
    model = onnx.load_from_string(buffer.getvalue())
    assert model == program.model_proto
    assert [n.op_type for n in model.graph.node] == ["Relu"]


def test_binary_file_object_receives_the_model(tmp_path: Any) -> None:
    path = os.path.join(str(tmp_path), "m.onnx")
    with open(path, "wb") as handle:
        onnxsight.export(One(), (X,), handle)
    assert onnx.load(path).graph.node[0].op_type == "Relu"


@pytest.mark.parametrize("options", [
    {"dynamic_axes": {"x": {0: "batch"}, "logits": {0: "batch"}}, "output_names": ["logits"]},
    {"dynamic_axes": {"features": [0, 3]}, "input_names": ["features"]},
    {"dynamic_shapes": {"x": {3: torch.export.Dim("w")}}},
    {"custom_translations": {"aten.relu.default": lambda b, x: b.op("Relu", x)}},
    {"custom_translations": {"aten::relu": lambda b, x: b.op("Relu", x)}},
], ids=["output-axes-ignored", "list-of-axes", "last-axis", "dotted-key", "packet-key"])
def test_good_calls_next_to_the_bad_ones_still_export(options: dict[str, Any]) -> None:
    program = onnxsight.export(One(), (X4,), **options)
    assert not [d for d in program.diagnostics if d.rule.code.startswith("ARG")]


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.glu(x, -1),
    lambda x: torch.lerp(x, x * 2, 0.3),
    lambda x: x.clone().unsqueeze(0).add_(1),  # written through a view: functionalized by the re-trace
], ids=["glu", "lerp", "in-place"])
def test_decomposition_prints_no_torch_future_warning(fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """torch's pytree FutureWarning during run_decompositions never reaches the user's terminal."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = onnxsight.export(Fn(fn), (torch.randn(2, 4),))
    assert [s.status for s in program.record.stages if s.name == "decompose"] == ["ok"]
    assert not [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
