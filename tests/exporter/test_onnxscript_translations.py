"""torch.onnx's ``custom_translation_table`` (ONNX Script functions) given to ``onnxsight.export`` unchanged.

The cases are upstream's (``test/onnx/exporter/test_api.py``, ``TestCustomTranslationTable``) as a user moving
from torch.onnx writes them; ONNX Runtime checks the numbers besides the node types upstream checks.
"""

from __future__ import annotations

import pytest
import torch

import onnxsight

pytest.importorskip("onnxscript")

from onnxscript import FLOAT, opset18 as op  # noqa: E402


def _ops(program: onnxsight.ONNXProgram) -> list[str]:
    return [node.op_type for node in program.model_proto.graph.node]


def test_an_aten_op_translated_by_an_onnx_script_function() -> None:
    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return x + y

    def custom_add(self, other):  # noqa: ANN001, ANN202 - written as upstream writes it
        return op.Sub(self, other)  # replace add with sub

    x, y = torch.randn(2, 2), torch.randn(2, 2)
    program = onnxsight.export(Model(), (x, y), custom_translation_table={torch.ops.aten.add.Tensor: custom_add})
    assert "Sub" in _ops(program) and "Add" not in _ops(program)
    torch.testing.assert_close(program(x, y)[0], x - y)


def test_a_custom_op_translated_by_an_onnx_script_function() -> None:
    @torch.library.custom_op("onnxsight_test::add", mutates_args=())
    def custom_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    @custom_add.register_fake
    def _(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(a) + torch.empty_like(b)

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return custom_add(x, y)

    def onnx_add(self: FLOAT, other: FLOAT) -> FLOAT:
        return op.Sub(self, other)

    x, y = torch.randn(3), torch.randn(3)
    program = onnxsight.export(Model(), (x, y),
                               custom_translation_table={torch.ops.onnxsight_test.add.default: onnx_add})
    assert "Sub" in _ops(program) and "Add" not in _ops(program)
    torch.testing.assert_close(program(x, y)[0], x - y)


def test_a_custom_op_with_a_decomposition_is_kept_for_its_onnx_script_translation() -> None:
    with torch.library._scoped_library("onnxsight_test_lib", "FRAGMENT") as lib:
        torch.library.define("onnxsight_test_lib::foo", "(Tensor a, Tensor b) -> Tensor",
                             tags=torch.Tag.pt2_compliant_tag, lib=lib)

        @torch.library.impl("onnxsight_test_lib::foo", "CompositeImplicitAutograd", lib=lib)
        @torch.library.register_fake("onnxsight_test_lib::foo")
        def foo_impl(a, b):  # noqa: ANN001, ANN202
            return a + b

        class M(torch.nn.Module):
            def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
                return torch.ops.onnxsight_test_lib.foo(x, y)

        def onnx_add(self: FLOAT, other: FLOAT) -> FLOAT:
            return op.Sub(self, other)

        x, y = torch.ones(3, 3), torch.full((3, 3), 2.0)
        program = onnxsight.export(M(), (x, y),
                                   custom_translation_table={torch.ops.onnxsight_test_lib.foo.default: onnx_add})
        assert "Sub" in _ops(program) and "Add" not in _ops(program)
        torch.testing.assert_close(program(x, y)[0], x - y)
        decomposed = onnxsight.export(M(), (x, y))   # without the table, the op's decomposition
        assert "Add" in _ops(decomposed) and "Sub" not in _ops(decomposed)


def test_an_onnx_script_translation_with_constants_attributes_and_several_outputs() -> None:
    """Python numbers take the tensor's dtype, int lists are int64 shapes, keywords not inputs are attributes,
    Split's outputs are counted from its attribute, and an ``@script`` function runs op by op."""
    import onnxscript

    @onnxscript.script()
    def scaled(x: FLOAT) -> FLOAT:
        return op.Mul(x, op.Constant(value_float=3.0))

    def gelu(self, approximate: str = "none"):  # noqa: ANN001, ANN202
        halves = op.Split(op.Reshape(self, [2, -1]), axis=0, num_outputs=2)
        return op.Reshape(op.Concat(scaled(halves[0]), op.Add(halves[1], 1.0), axis=0), op.Shape(self))

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(x)

    x = torch.randn(4, 3)
    program = onnxsight.export(Model(), (x,), custom_translation_table={torch.ops.aten.gelu.default: gelu})
    expected = torch.cat([x.reshape(2, -1)[0] * 3, x.reshape(2, -1)[1] + 1]).reshape(4, 3)
    torch.testing.assert_close(program(x)[0], expected)


def test_a_table_entry_that_is_not_one_function_is_refused_by_name() -> None:
    with pytest.raises(onnxsight.InvalidArgumentError) as info:
        onnxsight.export(torch.nn.ReLU(), (torch.randn(2),),
                         custom_translation_table={torch.ops.aten.relu.default: [op.Relu, op.Relu]})
    (diagnostic,) = info.value.diagnostics
    assert diagnostic.code == "ARG018" and "aten.relu.default" in diagnostic.message
