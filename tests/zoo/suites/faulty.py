"""A suite of models that crash, hang, run out of memory or raise, next to one that passes."""

from __future__ import annotations

import ctypes
import os
import time

import torch

from onnxsight.zoo import ModelSpec

CHUNK_BYTES = 32 * 2**20
MAX_CHUNKS = 96          # 3 GB at most, should the watchdog ever fail
HANG_SECONDS = 3600


def _ok() -> tuple:
    return torch.nn.Linear(4, 2), (torch.randn(1, 4),)


def _abort() -> tuple:
    os.abort()


def _segfault() -> tuple:
    ctypes.string_at(0)  # reads address 0: SIGSEGV
    raise AssertionError("unreachable")


def _hang() -> tuple:
    time.sleep(HANG_SECONDS)
    raise AssertionError("unreachable")


def _oom() -> tuple:
    hoard = []
    for _ in range(MAX_CHUNKS):
        hoard.append(b"\x01" * CHUNK_BYTES)  # touched pages: resident memory grows
        time.sleep(0.02)
    raise AssertionError(f"allocated {len(hoard)} chunks without being stopped")


def _raises() -> tuple:
    raise ValueError("this model cannot be built <b>here</b>")


def suite() -> list[ModelSpec]:
    return [
        ModelSpec("ok_linear", _ok, tags=("ok",)),
        ModelSpec("aborts", _abort, tags=("faulty",)),
        ModelSpec("segfaults", _segfault, tags=("faulty",)),
        ModelSpec("hangs", _hang, tags=("faulty",)),
        ModelSpec("eats_memory", _oom, tags=("faulty",)),
        ModelSpec("raises", _raises, tags=("faulty",)),
    ]
