"""Diagnostics: locations from FX stack traces, the context's options, logging, serialisation."""

from __future__ import annotations

import dataclasses
import logging
import os

import pytest
import torch

from onnxsight import rules
from onnxsight.diagnostics import (Diagnostic, DiagnosticContext, Level, Location, as_location, is_user_file,
                                   parse_stack_trace, user_frame)

HERE = os.path.abspath(__file__)
TORCH_FILE = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "module.py")

TRACE = f'''  File "{HERE}", line 10, in outer
    model(x)
  File "{TORCH_FILE}", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
  File "{HERE}", line 42, in forward
    y = torch.special.zeta(x, 2.0)
'''


class FakeNode:
    def __init__(self, meta: object) -> None:
        self.meta, self.name, self.target = meta, "zeta", "aten.special_zeta.default"


@pytest.mark.parametrize("text, expected", [
    (TRACE, [(HERE, 10), (TORCH_FILE, 1775), (HERE, 42)]),
    ("", []), (None, []), (12, []), ("not a trace at all\n\x00\x01", []),
    ('File "a.py", line 3\n  File "b.py", line 4, in f\n', [("a.py", 3), ("b.py", 4)]),
    ([f'  File "{HERE}", line 5, in f', "    x = 1"], [(HERE, 5)]),
])
def test_parse_stack_trace_formats(text: object, expected: list) -> None:
    assert [(f.file, f.line) for f in parse_stack_trace(text)] == expected  # type: ignore[arg-type]


def test_user_frame_skips_torch_onnxsight_and_pseudo_files() -> None:
    frames = parse_stack_trace(TRACE)
    frame = user_frame(frames)
    assert (frame.line, frame.function, frame.code) == (42, "forward", "y = torch.special.zeta(x, 2.0)")
    assert not is_user_file(TORCH_FILE) and not is_user_file("<frozen runpy>") and not is_user_file("")
    assert not is_user_file(rules.__file__) and is_user_file(HERE)
    assert user_frame((Location("<string>", 1), Location(TORCH_FILE, 2))) is None


def test_emit_with_node_takes_location_stack_module_and_properties() -> None:
    ctx = DiagnosticContext()
    node = FakeNode({"stack_trace": TRACE, "nn_module_stack": {"a": ("encoder", object), "b": ("encoder.attn", object)}})
    diagnostic = ctx.emit(rules.UNSUPPORTED_OP, node=node, op="aten.special_zeta.default")
    assert diagnostic.location.line == 42 and len(diagnostic.stack) == 3
    assert diagnostic.module_path == "encoder.attn"
    assert diagnostic.properties == {"fx_node": "zeta", "target": "aten.special_zeta.default"}


@pytest.mark.parametrize("meta", [None, {}, {"stack_trace": 3, "nn_module_stack": "x"}, "meta"])
def test_emit_with_odd_node_meta_uses_the_fallback(meta: object) -> None:
    fallback = Location(HERE, 1)
    diagnostic = DiagnosticContext(fallback_location=fallback).emit(rules.UNSUPPORTED_OP, node=FakeNode(meta), op="x")
    assert diagnostic.location == fallback and diagnostic.module_path is None


def test_locations_given_as_paths_are_coerced() -> None:
    diagnostic = DiagnosticContext().emit(rules.EXTERNAL_DATA_WRITTEN, location="/tmp/w.data",
                                          stack=("a.py", 3, None), count=1, size="1 MB", data_file="w.data")
    assert diagnostic.location == Location("/tmp/w.data") and diagnostic.stack == (Location("a.py"),)
    assert as_location(os.path) is None and as_location("") is None


def test_levels_warnings_as_errors_and_min_level(caplog: pytest.LogCaptureFixture) -> None:
    strict = DiagnosticContext(warnings_as_errors=True)
    assert strict.emit(rules.UNUSED_INPUT, input="m").level is Level.ERROR and len(strict.errors) == 1
    quiet = DiagnosticContext(min_level=Level.WARNING)
    assert quiet.emit(rules.EDGE_CASE_SEMANTICS, op="x", detail="y") is None and quiet.diagnostics == []
    with caplog.at_level(logging.INFO, logger="onnxsight"):
        DiagnosticContext().emit(rules.UNSUPPORTED_CUSTOM_OP, location=Location(HERE, 9), op="my.op")
    assert f"{HERE}:9: error OPS001 [custom-op-without-translation] custom operator my.op" in caplog.text
    assert caplog.records[-1].levelno == logging.ERROR


def test_diagnostic_is_frozen_and_round_trips_through_dict() -> None:
    diagnostic = DiagnosticContext().emit(rules.OUTPUT_MISMATCH, location=Location(HERE, 3, "f", "y"),
                                          stack=(Location(HERE, 3),), module="m", properties={"nan": float("nan")},
                                          output="y", reference="torch", max_abs_diff=0.1, max_rel_diff=0.2,
                                          atol=1e-5, rtol=1e-3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        diagnostic.message = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        diagnostic.properties["x"] = 1  # type: ignore[index]
    data = diagnostic.to_dict()
    assert data["properties"]["nan"] == "nan"
    again = Diagnostic.from_dict(data)
    assert (again.rule, again.message, again.location, again.module_path) == (
        diagnostic.rule, diagnostic.message, diagnostic.location, diagnostic.module_path)
