"""Shared fixtures and markers."""

from __future__ import annotations

import logging
import os
from typing import Iterator

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
    # `large` tests need several GB of memory (models above 2 GB): they run only when selected
    # (`-m large`, as `make bench-large` does), never as part of `make test` or `make test-all`.
    if "large" not in (config.getoption("markexpr", "") or ""):
        skip_large = pytest.mark.skip(reason="needs several GB of memory: run with -m large (make bench-large)")
        for item in items:
            if "large" in item.keywords:
                item.add_marker(skip_large)
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA: torch.cuda and onnxruntime's CUDAExecutionProvider are not available here")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _onnxsight_logger_as_found() -> Iterator[None]:
    """Each test starts with the onnxsight logger as a fresh process has it: an in-process CLI run
    configures it for its console (propagate off), which pytest 8.0's caplog then cannot see."""
    logger = logging.getLogger("onnxsight")
    saved = logger.level, logger.propagate, list(logger.handlers), logger.disabled
    yield
    logger.setLevel(saved[0])
    logger.propagate, logger.handlers, logger.disabled = saved[1], saved[2], saved[3]
