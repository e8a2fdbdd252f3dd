"""Shared fixtures and markers."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("ONNXSIGHT_TEST", "1")


def cuda_available() -> bool:
    try:
        import onnxruntime as ort
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and "CUDAExecutionProvider" in ort.get_available_providers()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda and onnxruntime's CUDAExecutionProvider are not available here")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
