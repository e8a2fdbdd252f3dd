"""The lock (requirements/lock.txt) is what `make test` installs: complete, consistent, and used.

A fresh clone's `make test` (and CI's fresh path, ``ONNXSIGHT_CI_FRESH=1 .ci/run``) installs every
distribution at the version pinned here, so a new release of a dependency cannot turn it red; moving
the pins is `make lock` (docs/environments.md).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK_FILE = os.path.join(ROOT, "requirements", "lock.txt")


def _lock_module():
    spec = importlib.util.spec_from_file_location("onnxsight_lock", os.path.join(ROOT, "requirements", "lock.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _make_variable(name: str) -> str:
    text = open(os.path.join(ROOT, "Makefile")).read()
    return re.search(rf"^{name}\s*\?=\s*(\S+)", text, re.M).group(1)


def test_every_requirement_of_make_test_is_pinned_within_its_range() -> None:
    lock = _lock_module()
    pins = lock.read_lock(LOCK_FILE)
    extras = _make_variable("EXTRAS").split(",")
    missing, outside = [], []
    for req in lock.requirements(extras):
        version = pins.get(canonicalize_name(req.name))
        if version is None:
            missing.append(str(req))
        elif not req.specifier.contains(version, prereleases=True):
            outside.append(f"{req} (locked {version})")
    assert not missing, f"not in {LOCK_FILE} (run `make lock`, or add the pin: docs/environments.md): {missing}"
    assert not outside, f"locked outside pyproject.toml's range: {outside}"


def test_the_lock_pins_the_torch_of_the_makefile() -> None:
    torch = Requirement(_make_variable("TORCH"))
    assert _lock_module().read_lock(LOCK_FILE)["torch"] in torch.specifier


def test_this_environment_is_the_locked_one() -> None:
    """The suite runs on the versions the lock names (where onnxsight's dependencies are installed)."""
    lock = _lock_module()
    pins = lock.read_lock(LOCK_FILE)
    installed = lock.closure(_make_variable("EXTRAS").split(","))
    drift = {name: (version, pins.get(name)) for name, version in installed.items()
             if version.split("+")[0] != pins.get(name)}
    assert not drift, f"installed (version, locked) differ: {drift}"


@pytest.mark.parametrize("target, locked", [("setup", True), ("lock", False), ("test-latest", False),
                                            ("test-oldest", False)])
def test_which_targets_install_against_the_lock(tmp_path, target: str, locked: bool) -> None:
    """make setup (so make test, and .ci/run's fresh path) installs with -c the lock; lock and test-latest
    resolve the newest releases, test-oldest the floors."""
    out = subprocess.run(["make", "-n", "-C", ROOT, target, f"VENV={tmp_path / 'venv'}"],
                         capture_output=True, text=True, check=True).stdout
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert len(installs) >= 2
    assert all(("-c requirements/lock.txt" in line) is locked for line in installs), installs
