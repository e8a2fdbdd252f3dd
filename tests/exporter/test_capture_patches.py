"""Capture patches: installed only for models of the patch's library, reported (CAP010/CAP011), always undone."""

from __future__ import annotations

import sys
import types
from typing import Any, Callable, Iterator

import pytest
import torch

from onnxsight.diagnostics import DiagnosticContext
from onnxsight.exporter.capture import _patches
from onnxsight.exporter.capture._patches import Patch

LIB = "fakelib_for_patches"


def _double(original: Callable[..., Any]) -> Callable[..., Any]:
    return lambda *args: original(*args) * 2


@pytest.fixture
def fakelib() -> Iterator[types.ModuleType]:
    """A library module with a function and a module class, as a model's library would be."""
    lib = types.ModuleType(LIB)
    exec("import torch\n"  # noqa: S102 - the fake library's source
         "def helper(x):\n    return x + 1\n"
         "class Block(torch.nn.Module):\n"
         "    def forward(self, x):\n        return helper(x)\n"
         "    def extra(self, x):\n        return x\n", lib.__dict__)
    sys.modules[LIB] = lib
    yield lib
    del sys.modules[LIB]


def _codes(ctx: DiagnosticContext) -> list[str]:
    return [d.rule.code for d in ctx.diagnostics]


TABLE = (Patch(LIB, "helper", _double, "it is a test", LIB), Patch(LIB, "Block.extra", _double, "a method", LIB))


def test_applied_for_a_model_of_the_library_and_undone(fakelib: types.ModuleType) -> None:
    original, method = fakelib.helper, fakelib.Block.extra
    model = torch.nn.Sequential(fakelib.Block())
    ctx = DiagnosticContext()
    with _patches.applied(model, ctx, TABLE) as done:
        assert [p.attribute for p in done] == ["helper", "Block.extra"]
        assert model(torch.ones(1)).item() == 4.0          # (1 + 1) * 2: the block calls the patched helper
        assert fakelib.Block().extra(torch.ones(1)).item() == 2.0
    assert fakelib.helper is original and fakelib.Block.extra is method
    assert _codes(ctx) == ["CAP010", "CAP010"]
    message = ctx.diagnostics[0].message
    assert f"`{LIB}.helper`" in message and "it is a test" in message


def test_undone_when_capture_raises(fakelib: types.ModuleType) -> None:
    original = fakelib.helper
    with pytest.raises(RuntimeError), _patches.applied(torch.nn.Sequential(fakelib.Block()), DiagnosticContext(),
                                                       TABLE):
        raise RuntimeError("capture failed")
    assert fakelib.helper is original


def test_not_applied_to_other_models(fakelib: types.ModuleType) -> None:
    ctx = DiagnosticContext()
    with _patches.applied(torch.nn.Linear(2, 2), ctx, TABLE) as done:
        assert done == [] and fakelib.helper(1) == 2
    assert _codes(ctx) == []


@pytest.mark.parametrize(("attribute", "missing"), [("gone", "gone"), ("Nope.extra", "Nope"), ("Block.gone", "gone")])
def test_missing_function_is_cap011_and_capture_goes_on(fakelib: types.ModuleType, attribute: str,
                                                        missing: str) -> None:
    ctx = DiagnosticContext()
    table = (Patch(LIB, attribute, _double, "x", LIB), TABLE[0])
    with _patches.applied(torch.nn.Sequential(fakelib.Block()), ctx, table) as done:
        assert [p.attribute for p in done] == ["helper"]
    assert _codes(ctx) == ["CAP011", "CAP010"]
    assert f"`{LIB}.{attribute}`" in ctx.diagnostics[0].message and missing in ctx.diagnostics[0].message


def test_the_table_names_real_torchvision_functions() -> None:
    """Every entry of the shipped table resolves against the installed torchvision (when there is one)."""
    pytest.importorskip("torchvision")
    import torchvision.models.detection  # noqa: F401 - loads the modules the table names

    for patch in _patches.PATCHES:
        owner, name, original = _patches._resolve(patch)
        assert callable(original), patch.function
