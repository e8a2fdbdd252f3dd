"""Two tiny models; the second waits while the file named by $ONNXSIGHT_ZOO_TEST_BLOCK exists."""

from __future__ import annotations

import os
import time

import torch

from onnxsight.zoo import ModelSpec


def _first() -> tuple:
    return torch.nn.Linear(3, 3), (torch.randn(2, 3),)


def _second() -> tuple:
    block = os.environ.get("ONNXSIGHT_ZOO_TEST_BLOCK", "")
    while block and os.path.exists(block):
        time.sleep(0.1)
    return torch.nn.Linear(3, 1), (torch.randn(2, 3),)


def suite() -> list[ModelSpec]:
    return [ModelSpec("first", _first), ModelSpec("second", _second)]
