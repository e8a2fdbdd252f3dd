"""Matrix products, driven by OpInfo samples."""

from __future__ import annotations

import pytest

from tests.exporter.ops.opinfo_harness import assert_op_passes

OPS = ["nn.functional.linear", "mm", "addmm"]


@pytest.mark.parametrize("name", OPS)
def test_opinfo(name: str) -> None:
    assert_op_passes(name)
