"""Capture diagnostics do not depend on the process's logging or warnings configuration.

A service or a notebook turns logging down (``logging.disable``, a root logger at ERROR, a
``dictConfig`` that disables existing loggers, ``TORCH_LOGS`` switching torch's logs off) or ignores
warnings; CAP005/CAP007 must still name the model's own line, as test_capture_diagnostics.py checks under
the default configuration, and the configuration is the user's again afterwards.
"""

from __future__ import annotations

import contextlib
import logging
import logging.config
import warnings
from typing import Iterator

import pytest

from tests.exporter.test_capture_diagnostics import CASES, HERE, _export, _line


@contextlib.contextmanager
def _disabled() -> Iterator[None]:
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


@contextlib.contextmanager
def _warnings_ignored() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def _warnings_are_errors() -> Iterator[None]:
    """python -W error (or PYTHONWARNINGS=error): a warning inside torch must not become a capture failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@contextlib.contextmanager
def _root_at_error() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


@contextlib.contextmanager
def _dict_config() -> Iterator[None]:
    """logging.config.dictConfig's default: every logger that exists already is disabled."""
    loggers = [lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    saved = [(lg, lg.disabled) for lg in loggers]
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    logging.config.dictConfig({"version": 1, "root": {"level": "ERROR"}})
    try:
        yield
    finally:
        for lg, disabled in saved:
            lg.disabled = disabled
        root.setLevel(level)
        root.handlers = handlers


@contextlib.contextmanager
def _torch_logs_off() -> Iterator[None]:
    """What TORCH_LOGS="-all" (torch's loggers at ERROR) does, set in-process."""
    import torch._logging

    torch._logging.set_logs(all=logging.ERROR, dynamic=logging.ERROR)
    try:
        yield
    finally:
        torch._logging.set_logs()


CONFIGS = {"logging.disable": _disabled, "warnings-ignored": _warnings_ignored,
           "warnings-are-errors": _warnings_are_errors, "root-at-error": _root_at_error,
           "dictConfig": _dict_config, "torch-logs-off": _torch_logs_off}
LOCATED = [c for c in CASES if c.id in ("view-specialises-batch", "bert-seq-max", "nested-dict")]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("case", LOCATED, ids=[c.id for c in LOCATED])
def test_the_models_line_under_any_logging_configuration(case, config: str) -> None:
    disabled_before = logging.root.manager.disable
    with CONFIGS[config]():
        program, diagnostics, _ = _export(case)
        assert logging.root.manager.disable == (logging.WARNING if config == "logging.disable" else disabled_before)
    found = [d for d in diagnostics if d.code == case.code]
    assert found, [str(d) for d in diagnostics]
    where = _line(case.marker)
    assert (found[0].location.file, found[0].location.line) == (HERE, where), str(found[0])
    for word in case.words:
        assert word in found[0].message, (word, found[0].message)
