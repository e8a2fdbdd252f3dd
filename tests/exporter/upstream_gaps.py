"""The upstream export tests torch.onnx passed and onnxsight did not (issue 34), written again for both exporters.

PyTorch's ``test/onnx/test_pytorch_onnx_onnxruntime.py`` checks a model with ``run_test(model, args,
input_names=, output_names=, dynamic_axes=, additional_test_inputs=)``: export, run the example and every
additional input in ONNX Runtime, compare with eager (shape, dtype, ``rtol=1e-3, atol=1e-7``).
``test/onnx/exporter/test_small_models_e2e.py`` and ``test_api.py`` export with ``dynamic_shapes=`` and
compare the example's outputs with ``torch.testing.assert_close`` (Python numbers as ``torch.tensor`` of
them). Each case below makes the calls its upstream test makes, with the test's own model, inputs and
options; the models are this module's own, not torch's code.

    .venv/bin/python -m tests.exporter.upstream_gaps              # every case, both exporters

``torch.onnx`` is ``torch.onnx.export(..., dynamo=True)`` with the same options, run the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import logging
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch.utils import _pytree as pytree

from tests.exporter.ops.exporters import _cache_torchlib_registry, run_onnx
from tests.exporter.rnn_matrix import Outcome  # (case, exporter, status: passed/export/runtime/mismatch, detail)

RUN_TEST = {"rtol": 1e-3, "atol": 1e-7}   # run_test's defaults
ASSERT_CLOSE: dict[str, float] = {}       # assert_onnx_program: torch.testing's defaults for the dtype


@dataclass
class Call:
    """One export and its checks, as one call of the upstream test makes them."""

    model: torch.nn.Module
    args: tuple
    options: dict[str, Any] = field(default_factory=dict)  # export keywords: dynamic_axes, input_names, ...
    more: list[tuple] = field(default_factory=list)         # additional_test_inputs
    tolerance: dict[str, float] = field(default_factory=lambda: dict(RUN_TEST))


@dataclass(frozen=True)
class Case:
    name: str                        # the upstream test's name
    source: str                      # the upstream file
    calls: Callable[[], list[Call]]  # built fresh per run (seeded): the models and inputs of the test


# -- test_small_models_e2e.py / test_api.py ----------------------------------------------------------------

class CatThenAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.cat((x, y), axis=1) + z


def _dynamic_dimension_is_one() -> list[Call]:
    names = {0: "batch", 1: "sequence"}
    return [Call(CatThenAdd(), (torch.randn(1, 3), torch.randn(1, 5), torch.randn(1, 8)),
                 {"dynamic_shapes": (dict(names), dict(names), dict(names))}, tolerance=ASSERT_CLOSE)]


class IntCarry(torch.nn.Module):
    """A while_loop whose counter is a Python int, used to index and to size a result."""

    def forward(self, x: torch.Tensor) -> tuple:
        def keep_going(step: Any, values: torch.Tensor) -> Any:
            return step < values.shape[0]

        def body(step: Any, values: torch.Tensor) -> tuple:
            updated = values.clone()
            torch._check(step >= 0)
            torch._check(step < values.shape[0])
            updated.select(0, step).copy_(updated.select(0, step) + step)
            return step + 1, updated

        steps, out = torch.ops.higher_order.while_loop(keep_going, body, (0, x), ())
        torch._check(steps > 0)
        return steps + 1, steps + out, steps < x.shape[0], torch.ones(steps * 2)


def _while_loop_int_carry() -> list[Call]:
    return [Call(IntCarry(), (torch.tensor([10.0, 20.0, 30.0]),), tolerance=ASSERT_CLOSE)]


class RowsAsFloat(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.sym_float(x.shape[0])


def _sym_float() -> list[Call]:
    dynamic = {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}
    return [Call(RowsAsFloat(), (torch.zeros((2, 2)),), {"dynamic_shapes": (dynamic,)}, tolerance=ASSERT_CLOSE)]


# -- test_pytorch_onnx_onnxruntime.py ----------------------------------------------------------------------

class Baddbmm(torch.nn.Module):
    def forward(self, input: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, alpha: torch.Tensor,
                beta: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(input, batch1, batch2, alpha=alpha, beta=beta)


def _baddbmm_dynamic() -> list[Call]:
    return [Call(Baddbmm(), (torch.randn(10, 3, 5), torch.randn(10, 3, 4), torch.randn(10, 4, 5),
                             torch.tensor(5), torch.tensor(3.5)))]


def _embedding_bag() -> list[Call]:
    offsets = torch.tensor([0, 2, 5, 6])
    return [Call(torch.nn.EmbeddingBag(10, 5, mode="sum", scale_grad_by_freq=True), (torch.randint(10, (7,)), offsets)),
            Call(torch.nn.EmbeddingBag(10, 5, mode="sum", include_last_offset=True), (torch.randint(10, (7,)), offsets)),
            Call(torch.nn.EmbeddingBag(10, 5, mode="max"), (torch.randint(10, (7, 5)),))]


def _embedding_renorm() -> list[Call]:
    return [Call(torch.nn.Embedding(7, 5, max_norm=0.2), (torch.tensor([2, 1]),)),
            Call(torch.nn.Embedding(7, 5, max_norm=0.5, norm_type=1.0), (torch.tensor([4, 3, 4, 2]),))]


class DrawWithReplacement(torch.nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(weight, 3, replacement=True)


class DrawOne(torch.nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(weight, 1)


def _multinomial() -> list[Call]:
    # one category of weight per row: every draw is that category, in PyTorch and in ONNX Runtime
    weight = torch.tensor([[0, 10, 0, 0], [0, 0, 100, 0]], dtype=torch.float)
    return [Call(DrawWithReplacement(), (weight,)), Call(DrawOne(), (weight,))]


class SqueezeAll(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.squeeze(x)


def _squeeze_all_dims() -> list[Call]:
    return [Call(SqueezeAll(), (torch.randn(2, 1, 4),),
                 {"input_names": ["input"], "dynamic_axes": {"input": {0: "0", 1: "1", 2: "2"}}},
                 more=[(torch.randn(2, 2, 3),)])]


class SlicesBySize(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple:
        return tuple(x[: x.size(0) - i, i: x.size(2), i:3] for i in range(4))


def _slice_dynamic() -> list[Call]:
    return [Call(SlicesBySize(), (torch.rand(5, 5, 5),),
                 {"input_names": ["input_1"], "output_names": ["output_1"],
                  "dynamic_axes": {"input_1": [0, 1, 2], "output_1": [0, 1, 2]}},
                 more=[(torch.randn(6, 7, 8),)])]


class AddIfGiven(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: Optional[torch.Tensor]) -> torch.Tensor:
        if y is not None:
            return x + y
        return x


def _mixed_optional() -> list[Call]:
    x = torch.randn(2, 3)
    return [Call(AddIfGiven(), (x, None)), Call(AddIfGiven(), (x, x))]


class ScatterReductions(torch.nn.Module):
    def forward(self, x: torch.Tensor, index: torch.Tensor, input: torch.Tensor) -> tuple:
        return tuple(input.scatter_reduce(0, index, x, reduce=r) for r in ("amax", "sum", "amin", "prod"))


def _scatter_reduce_self_rank_zero() -> list[Call]:
    empty = torch.tensor([])
    return [Call(ScatterReductions(), (empty, torch.tensor([], dtype=torch.int64), empty))]


class GridSample(torch.nn.Module):
    def __init__(self, mode: str, padding_mode: str, align_corners: bool) -> None:
        super().__init__()
        self.mode, self.padding_mode, self.align_corners = mode, padding_mode, align_corners

    def forward(self, input: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.grid_sample(input, grid, self.mode, self.padding_mode, self.align_corners)


def _grid_sample() -> list[Call]:
    # the test's volumes (N, C, D, H, W) for every 3-D mode, padding and align_corners, at its opset 20
    volume, grid = torch.randn(1, 1, 2, 3, 2), torch.randn(1, 3, 2, 4, 3)
    return [Call(GridSample(mode, padding, align), (volume, grid), {"opset_version": 20})
            for mode in ("bilinear", "nearest") for padding in ("zeros", "border", "reflection")
            for align in (True, False)]


class FakeQuantizeConstant(torch.nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(input, 1.0 / 127, 0, -128, 127)


class FakeQuantizeGiven(torch.nn.Module):
    def forward(self, input: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor) -> torch.Tensor:
        return torch.fake_quantize_per_tensor_affine(input, scale, zero_point, -128, 127)


class FakeQuantizeChannels(torch.nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        scale = torch.ones(4) / 127.0
        zero_point = torch.zeros(4, dtype=torch.int)
        once = torch.fake_quantize_per_channel_affine(input, scale, zero_point, 1, 0, 255)
        return torch.fake_quantize_per_channel_affine(once, scale, zero_point, 1, -128, 127)


class RandIntLike(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.randint_like(x, 3, 4) + x   # always 3 + x


E2E, API, ORT = ("test/onnx/exporter/test_small_models_e2e.py", "test/onnx/exporter/test_api.py",
                 "test/onnx/test_pytorch_onnx_onnxruntime.py")
CASES: tuple[Case, ...] = (
    Case("test_export_successful_when_dynamic_dimension_is_one", API, _dynamic_dimension_is_one),
    Case("test_onnx_export_while_loop_int_carry", E2E, _while_loop_int_carry),
    Case("test_export_sym_float", E2E, _sym_float),
    Case("test_baddbmm_dynamic", ORT, _baddbmm_dynamic),
    Case("test_embedding_bag", ORT, _embedding_bag),
    Case("test_embedding_renorm", ORT, _embedding_renorm),
    Case("test_multinomial", ORT, _multinomial),
    Case("test_squeeze_all_dims", ORT, _squeeze_all_dims),
    Case("test_slice_dynamic", ORT, _slice_dynamic),
    Case("test_mixed_optional", ORT, _mixed_optional),
    Case("test_scatter_reduce_self_rank_zero", ORT, _scatter_reduce_self_rank_zero),
    # found by the matrix (tests/exporter/upstream_matrix.py) beyond the twelve
    Case("test_grid_sample", ORT, _grid_sample),
    Case("test_fake_quantize_per_tensor", ORT, lambda: [Call(FakeQuantizeConstant(), (torch.randn(6, 4, 3, 3),))]),
    Case("test_fake_quantize_per_tensor_dynamic_scale_zeropoint", ORT,
         lambda: [Call(FakeQuantizeGiven(), (torch.randn(6, 4, 3, 3), torch.tensor(1.0 / 127), torch.tensor(0)))]),
    Case("test_fake_quantize_per_channel", ORT, lambda: [Call(FakeQuantizeChannels(), (torch.randn(6, 4, 3, 3),))]),
    Case("test_randint_like", ORT, lambda: [Call(RandIntLike(), (torch.randn(2, 3, 4),))]),
)


# -- the harness -------------------------------------------------------------------------------------------

def export_onnxsight(model: torch.nn.Module, args: tuple, options: dict[str, Any]) -> Any:
    import onnxsight

    return onnxsight.export(model, args, **options).model_proto


def export_torch_onnx(model: torch.nn.Module, args: tuple, options: dict[str, Any]) -> Any:
    _cache_torchlib_registry()
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return torch.onnx.export(model, args, dynamo=True, verbose=False, **options).model_proto


EXPORTERS: dict[str, Callable[[torch.nn.Module, tuple, dict[str, Any]], Any]] = {
    "onnxsight": export_onnxsight, "torch.onnx": export_torch_onnx}


def _leaves(tree: Any) -> list[torch.Tensor]:
    """Tensors as the exported graph carries them: None dropped, Python numbers as ``torch.tensor``."""
    return [leaf if isinstance(leaf, torch.Tensor) else torch.tensor(leaf)
            for leaf in pytree.tree_leaves(tree) if leaf is not None]


def _first_line(exc: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return f"{type(exc).__name__}: {(text.splitlines() or [''])[0][:300]}"


def run_call(call: Call, exporter: str) -> tuple[str, str]:
    """(status, detail) of one call: export, then the example and each additional input against eager."""
    model = call.model.eval()
    try:
        proto = EXPORTERS[exporter](model, copy.deepcopy(call.args), dict(call.options))
    except Exception as exc:  # noqa: BLE001 - a refused export is an outcome
        return "export", _first_line(exc)
    names = [value.name for value in proto.graph.input]
    for inputs in (call.args, *call.more):
        with torch.no_grad():
            expected = _leaves(model(*copy.deepcopy(inputs)))
        try:
            actual = run_onnx(proto, names, tuple(_leaves(copy.deepcopy(inputs))))
        except Exception as exc:  # noqa: BLE001
            return "runtime", _first_line(exc)
        if len(actual) != len(expected):
            return "mismatch", f"{len(actual)} outputs, eager {len(expected)}"
        for index, (got, want) in enumerate(zip(actual, expected)):
            try:
                torch.testing.assert_close(got, want, **call.tolerance)
            except AssertionError as exc:
                shapes = f" at input shapes {[tuple(t.shape) for t in _leaves(inputs)]}"
                return "mismatch", f"output {index}{shapes}: {str(exc).strip().splitlines()[0][:200]}"
    return "passed", ""


def run_case(case: Case, exporter: str = "onnxsight") -> Outcome:
    """Every call of ``case`` with ``exporter``; the first that does not pass decides the outcome."""
    torch.manual_seed(0)
    for index, call in enumerate(case.calls()):
        status, detail = run_call(call, exporter)
        if status != "passed":
            return Outcome(case.name, exporter, status, f"call {index + 1}: {detail}")
    return Outcome(case.name, exporter, "passed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exporters", default="onnxsight,torch.onnx")
    parser.add_argument("--filter", default="")
    options = parser.parse_args()
    for exporter in options.exporters.split(","):
        for case in CASES:
            if options.filter in case.name:
                outcome = run_case(case, exporter)
                print(f"{exporter:10} {outcome.status:8} {case.name} {outcome.detail}", flush=True)


if __name__ == "__main__":
    main()
