"""Lazy package attributes (PEP 562): a package's names are imported when first used.

``import onnxsight`` and the light subpackages (rules, diagnostics, reports)
must not import torch, onnx or ONNX Runtime: ``onnxsight rules`` or a script
that post-processes SARIF would otherwise wait seconds for an exporter it
never runs. Each package's ``__init__`` lists where its names live;
:func:`lazy_names` builds the module-level ``__getattr__`` and ``__dir__``
that import them on first access.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Iterable, Mapping


def lazy_names(package: str, names: Mapping[str, str], *, submodules: Iterable[str] = (),
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``names`` maps each attribute to the module defining it.

    ``submodules`` are subpackages reachable as attributes without importing
    them first (``import onnxsight; onnxsight.reports.write_sarif(...)``).
    A resolved name is stored in the package, so the import happens once.
    """
    namespace = sys.modules[package].__dict__
    children = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        elif name in children:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names) | children)

    return __getattr__, __dir__
