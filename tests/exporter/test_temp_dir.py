"""The temporary folder a >2 GB program writes its model into for ONNX Runtime goes away with the program."""

from __future__ import annotations

import gc
import os

import pytest
import torch

import onnxsight
from onnxsight.exporter.program import _onnx_program as _program


def _large_program(monkeypatch: pytest.MonkeyPatch) -> tuple[object, torch.Tensor]:
    monkeypatch.setattr(_program, "EXTERNAL_DATA_THRESHOLD", 16)  # a 4x3 Linear counts as "large"
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).eval()
    x = torch.randn(2, 4)
    return onnxsight.export(model, (x,)), x


def _drop_by_del(prog: object) -> None:
    del prog


def _drop_by_close(prog: object) -> None:
    prog.close()


def _drop_by_with(prog: object) -> None:
    with prog:
        pass


@pytest.mark.parametrize("drop", [_drop_by_del, _drop_by_close, _drop_by_with], ids=["gc", "close", "with"])
def test_temp_dir_removed_with_program(drop, monkeypatch: pytest.MonkeyPatch) -> None:
    prog, x = _large_program(monkeypatch)
    torch.testing.assert_close(prog(x)[0], prog.exported_program.module()(x))
    directory = prog._temp_dir
    assert directory is not None and os.path.isdir(directory) and os.listdir(directory)
    drop(prog)
    del prog
    gc.collect()
    assert not os.path.exists(directory)


def test_temp_dir_removed_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The finalizer is registered to run at interpreter exit too (weakref.finalize.atexit)."""
    prog, x = _large_program(monkeypatch)
    prog(x)
    assert prog._cleanup is not None and prog._cleanup.alive and prog._cleanup.atexit


def test_closed_program_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    prog, x = _large_program(monkeypatch)
    first = prog(x)[0]
    prog.close()
    torch.testing.assert_close(prog(x)[0], first)
    prog.close()
