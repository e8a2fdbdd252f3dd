"""Upstream's export cases that both exporters fail (issue 34), refused with a rule that says what to write:
each refusal here is checked with the upstream form, and the rewrite the rule's page gives is checked to
export and match eager.

The models are written again from test/onnx/test_pytorch_onnx_onnxruntime.py (test_arange_out, test_linspace,
test_one_hot, test_copy_, test_slice_with_input_step_size, test_where_with_byte_tensor, test_index_mask,
test_dict_output, test_set_); upstream's code is not copied.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable

import pytest
import torch
import torch.utils._pytree as pytree

import onnxsight
from tests.exporter.ops.eager_check import FunctionModule as _Fn



def _refused(fn: Callable[..., Any], *args: Any) -> list[str]:
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(fn if isinstance(fn, torch.nn.Module) else _Fn(fn), args)
    return [d.code for d in info.value.diagnostics if d.level.name == "ERROR"]


def _exports(fn: Callable[..., Any], *args: torch.Tensor) -> None:
    module = fn if isinstance(fn, torch.nn.Module) else _Fn(fn)
    expected = pytree.tree_leaves(module(*[a.clone() for a in args]))
    actual = onnxsight.export(module, tuple(a.clone() for a in args))(*[a.clone() for a in args])
    assert len(actual) == len(expected)
    for want, got in zip(expected, actual):
        torch.testing.assert_close(got, want)


def _arange_out(end: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(0, dtype=torch.int64)
    return torch.arange(end, out=out)


def _one_hot(x: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(x, classes[0])


def _index_0d(x: torch.Tensor, index: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    x[index] = data
    return x


def _slice_steps(x: torch.Tensor, stop: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    x[:stop:step, 0::step, :] = 1
    return x


def _addmm_tensor_beta(x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    return torch.addmm(x, a, b, beta=beta)


DATA_DEPENDENT_INTEGERS = [
    (_arange_out, (torch.tensor(7),)),
    (lambda s, e, n: torch.linspace(s, e, n), (torch.tensor(-1.0), torch.tensor(2.0), torch.tensor(5))),
    (_one_hot, (torch.tensor([0, 3, 2]), torch.tensor([5]))),
    (_index_0d, (torch.zeros(4, 3), torch.tensor(1), torch.ones(3))),
    (_slice_steps, (torch.zeros(5, 5, 5), torch.tensor(3), torch.tensor(2))),
    # a 0-d tensor as a scalar argument, which torch compares with 0 (the message said "integer"; it is a float)
    (_addmm_tensor_beta, (torch.randn(2, 4), torch.randn(2, 3), torch.randn(3, 4), torch.tensor(0.5))),
]


@pytest.mark.parametrize(("fn", "args"), DATA_DEPENDENT_INTEGERS,
                         ids=["arange-out", "linspace", "one_hot", "0-d-index", "slice-step", "addmm-tensor-beta"])
def test_an_integer_read_from_data_is_cap018(fn: Callable[..., Any], args: tuple) -> None:
    assert _refused(fn, *args) == ["CAP018"]


def _arange_item(end: torch.Tensor) -> torch.Tensor:
    n = end.item()
    torch._check(n >= 0)
    return torch.arange(n)


def _linspace_item(start: torch.Tensor, end: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    n = steps.item()
    torch._check(n >= 2)
    return start + (end - start) * torch.arange(n) / (n - 1)


def _one_hot_item(x: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    k = classes[0].item()
    torch._check(k >= 1)
    return (x.unsqueeze(-1) == torch.arange(k)).long()


def _index_1d(x: torch.Tensor, index: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    x[index.reshape(1)] = data
    return x


def _slice_arange(x: torch.Tensor, stop: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    end, stride = stop.item(), step.item()
    torch._check(end >= 0)
    torch._check(stride >= 1)
    rows = torch.arange(0, end, stride).clamp(max=x.shape[0] - 1)
    cols = torch.arange(0, x.shape[1], stride)
    x[rows[:, None], cols[None, :]] = 1
    return x


@pytest.mark.parametrize(("fn", "args"), [
    (_arange_item, (torch.tensor(7),)),
    (_linspace_item, (torch.tensor(-1.0), torch.tensor(2.0), torch.tensor(5))),
    (_one_hot_item, (torch.tensor([0, 3, 2]), torch.tensor([5]))),
    (_index_1d, (torch.zeros(4, 3), torch.tensor(1), torch.ones(3))),
    (_slice_arange, (torch.zeros(5, 5, 5), torch.tensor(3), torch.tensor(2))),
], ids=["arange", "linspace", "one_hot", "1-element-index", "slice-as-index"])
def test_cap018_rewrites_export(fn: Callable[..., Any], args: tuple) -> None:
    _exports(fn, *args)


def test_uint8_where_condition_and_index_mask_are_cap019() -> None:
    cond = torch.tensor([[1, 0, 1], [0, 1, 1]], dtype=torch.uint8)
    assert _refused(lambda c, a, b: torch.where(c, a, b), cond, torch.randn(2, 3), torch.ones(2, 3)) == ["CAP019"]
    assert _refused(lambda x: x[torch.tensor([0, 1, 0], dtype=torch.uint8)], torch.randn(3, 4, 5)) == ["CAP019"]
    _exports(lambda c, a, b: torch.where(c.bool(), a, b), cond, torch.randn(2, 3), torch.ones(2, 3))
    _exports(lambda x: x[torch.tensor([False, True, False])], torch.randn(3, 4, 5))


class Outputs(OrderedDict):
    """A user's OrderedDict subclass, as upstream's test_dict_output returns."""


class _Registered(OrderedDict):
    pass


pytree.register_pytree_node(_Registered, lambda out: (list(out.values()), list(out.keys())),
                            lambda values, keys: _Registered(zip(keys, values)))


def test_an_unregistered_dict_subclass_output_is_cap020_and_registering_it_exports() -> None:
    assert _refused(lambda a, b: Outputs(tensor_out=a, tuple_out=(b, a)), torch.randn(2, 3), torch.randn(2, 3)) \
        == ["CAP020"]
    _exports(lambda a, b: _Registered(tensor_out=a, tuple_out=(b, a)), torch.randn(2, 3), torch.randn(2, 3))
    _exports(lambda a, b: dict(Outputs(tensor_out=a, tuple_out=(b, a))), torch.randn(2, 3), torch.randn(2, 3))


def test_set_on_an_input_is_dec003_and_a_rename_exports() -> None:
    def swap(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.set_(y)
        return x

    assert _refused(swap, torch.ones(2, 3), torch.randn(4, 6)) == ["DEC003"]
    _exports(lambda x, y: y, torch.ones(2, 3), torch.randn(4, 6))


def test_a_python_value_beside_tensors_is_left_out_with_val011() -> None:
    """upstream's test_tuple_primitive_input and test_arithmetic_prim_bool: the int/bool output is named."""
    class TupleInput(torch.nn.Module):
        def forward(self, a: tuple[int, torch.Tensor], b: torch.Tensor) -> tuple[int, torch.Tensor]:
            return a[0], a[1] + b

    program = onnxsight.export(TupleInput(), ((3, torch.randn(4, 3)), torch.randn(4, 3)))
    [dropped] = [d for d in program.diagnostics if d.code == "VAL011"]
    assert dropped.message.startswith("output [0] is a Python value (3)")
    assert len(program.model_proto.graph.output) == 1


def test_a_distribution_validating_its_arguments_is_cap002_at_the_library_line() -> None:
    """upstream's test_dist_normal/_uniform: the branch is torch.distributions' own, shown before the user's
    line; validate_args=False (the rule's fix) exports the sampling."""
    loc, scale = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0, 4.0]])
    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(_Fn(lambda m, s: torch.distributions.Normal(m, s).sample([100])), (loc, scale))
    [found] = [d for d in info.value.diagnostics if d.level.name == "ERROR"]
    assert found.code == "CAP002" and "torch/distributions/" in found.message and "called from" in found.message
    program = onnxsight.export(_Fn(lambda m, s: torch.distributions.Normal(m, s, validate_args=False).sample([4000])),
                               (loc, scale))
    draws = program(loc, scale)[0]
    assert draws.shape == (4000, 1, 2) and abs(draws[..., 1].mean().item() - 2.0) < 0.5


def test_a_size_one_example_the_op_needs_is_cap008() -> None:
    """upstream's test_dynamic_repeat_interleave: repeats of size 1 (one count for every element) marked dynamic;
    torch's own check fails size-oblivious and at the grown example: the size 1 is the cause (CAP008), not
    torch's RuntimeError (CAP006)."""
    class Repeat(torch.nn.Module):
        def forward(self, x: torch.Tensor, repeats: torch.Tensor) -> torch.Tensor:
            return torch.repeat_interleave(x, repeats, dim=1)

    with pytest.raises(onnxsight.ExportError) as info:
        onnxsight.export(Repeat(), (torch.tensor([[1, 2, 4], [3, 4, 7]]), torch.tensor([2])),
                         dynamic_shapes={"x": {1: "w"}, "repeats": {0: "r"}})
    [found] = [d for d in info.value.diagnostics if d.level.name == "ERROR"]
    assert found.code == "CAP008" and found.message.startswith("input `repeats` axis 0 (r)")
