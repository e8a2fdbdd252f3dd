"""Model specs and suites: what the zoo job runs.

A suite is a Python module or file that defines ``suite()`` returning
:class:`ModelSpec` objects. Built-in suites live in ``onnxsight.zoo.suites``;
any other name is read as a path to a ``.py`` file. A suite whose
dependencies do not import raises :class:`SuiteUnavailable` from ``suite()``
and is reported as skipped, never as a crash.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

BUILTIN_SUITES: dict[str, str] = {
    "smoke": "onnxsight.zoo.suites.smoke",
    "tricky": "onnxsight.zoo.suites.tricky",
    "transformers": "onnxsight.zoo.suites.transformers",
    "torchvision": "onnxsight.zoo.suites.torchvision",
    "timm": "onnxsight.zoo.suites.timm",
    "quantized": "onnxsight.zoo.suites.quantized",
    "generation": "onnxsight.zoo.suites.generation",
}


class SuiteUnavailable(Exception):
    """Raised by ``suite()`` when the suite cannot run here (a dependency does not import)."""


@dataclass(frozen=True)
class ModelSpec:
    """One model of a suite.

    ``build()`` returns ``(model, args)`` or ``(model, args, kwargs)``; it runs
    in the worker process, so it may be slow or allocate freely. Tags select
    models (``--filter tag:vision``) and scheduling (``gpu`` needs a GPU worker).
    ``custom_translations`` is passed to ``onnxsight.export`` as is (``{op: translation}``),
    for a model with a custom op or one whose ATen op needs a translation of its own.
    ``dynamic`` names the dims that vary when the model is deployed, ``{input: {axis: name}}``
    (see :func:`dynamic_shapes_for`); the worker exports with them and verifies at other sizes.
    An explicit ``dynamic_shapes`` (torch.export style) takes precedence.
    ``module_functions`` is passed to ``onnxsight.export`` (True, or nn.Module classes): the model is
    exported with its module calls as ONNX functions, run and verified that way.
    ``unavailable`` says why the model cannot run here (a package that does not import): it is not run,
    and the run lists it as skipped with that reason.
    ``generation_steps`` (a generative model): ``build()`` returns ``(model, prompt)``; the worker exports
    its step programs (``onnxsight.export_generation``) and verifies that many steps of greedy decoding
    (``onnxsight.verify_generation``) instead of one call.
    """

    name: str
    build: Callable[[], tuple[Any, ...]]
    tags: tuple[str, ...] = ()
    dynamic_shapes: Any = None
    tolerance: Any = None
    opset: int | None = None
    custom_translations: Mapping[Any, Callable[..., Any]] | None = None
    dynamic: Mapping[str, Mapping[int, str]] | None = None
    module_functions: Any = False
    unavailable: str | None = None
    generation_steps: int = 0

    def __init__(self, name: str, build: Callable[[], tuple[Any, ...]], *, tags: Sequence[str] = (),
                 dynamic_shapes: Any = None, tolerance: Any = None, opset: int | None = None,
                 custom_translations: Mapping[Any, Callable[..., Any]] | None = None,
                 dynamic: Mapping[str, Mapping[int, str]] | None = None, module_functions: Any = False,
                 unavailable: str | None = None, generation_steps: int = 0) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "build", build)
        object.__setattr__(self, "tags", tuple(tags))
        object.__setattr__(self, "dynamic_shapes", dynamic_shapes)
        object.__setattr__(self, "tolerance", tolerance)
        object.__setattr__(self, "opset", opset)
        object.__setattr__(self, "custom_translations", custom_translations)
        object.__setattr__(self, "dynamic", dict(dynamic) if dynamic else None)
        object.__setattr__(self, "module_functions", module_functions)
        object.__setattr__(self, "unavailable", unavailable)
        object.__setattr__(self, "generation_steps", int(generation_steps))

    @property
    def source(self) -> tuple[str | None, int | None]:
        """(file, line) where ``build`` is defined: the location of zoo-level diagnostics."""
        target = inspect.unwrap(self.build)
        try:
            return inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
        except (TypeError, OSError):
            return None, None

    def dynamic_shapes_for(self, model: Any, args: tuple, kwargs: Mapping[str, Any]) -> Any:
        """The torch.export ``dynamic_shapes`` this spec exports with: ``dynamic_shapes`` as given, else
        ``dynamic`` turned into Dims for these inputs, else None (a static export)."""
        if self.dynamic_shapes is not None or not self.dynamic:
            return self.dynamic_shapes
        return dynamic_shapes_for(self.dynamic, model, args, kwargs)

    def matches(self, pattern: str | None) -> bool:
        """``--filter``: comma-separated globs on the name, or ``tag:T`` on the tags."""
        if not pattern:
            return True
        for part in (p.strip() for p in pattern.split(",")):
            if part.startswith("tag:") and part[4:] in self.tags:
                return True
            if part and fnmatch.fnmatchcase(self.name.lower(), part.lower()):
                return True
            if part and not any(ch in part for ch in "*?[") and part.lower() in self.name.lower():
                return True
        return False


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its reference (name or file), models, or the reason it was skipped; ``skipped_models``:
    ``(model, reason)`` for the models that cannot run here (``ModelSpec.unavailable``), not in ``specs``."""

    ref: str
    name: str
    specs: tuple[ModelSpec, ...] = ()
    skipped: str | None = None
    skipped_models: tuple[tuple[str, str], ...] = ()

    def spec(self, model: str) -> ModelSpec:
        for spec in self.specs:
            if spec.name == model:
                return spec
        raise KeyError(f"suite {self.name} has no model {model!r}; it has {', '.join(s.name for s in self.specs)}")


def dynamic_shapes_for(dynamic: Mapping[str, Mapping[int, str]], model: Any, args: tuple,
                       kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``{input: {axis: name}}`` -> torch.export ``dynamic_shapes`` keyed by forward()'s arguments.

    One ``Dim`` per name, shared by every input that uses it (``batch`` on all inputs is one
    symbol); ``"past+1"`` is the Dim ``past`` plus 1 (a mask one longer than the cache). An input
    holding a tuple, list or dict of tensors (a KV cache) gets the axes on each of its tensors.
    """
    import torch

    bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    unknown = sorted(set(dynamic) - set(bound))
    if unknown:
        raise ValueError(f"dynamic names {unknown}, which are not arguments of forward(); they are {list(bound)}")
    dims: dict[str, Any] = {}

    def dim(name: str) -> Any:
        base, _, offset = name.replace(" ", "").partition("+")
        if base not in dims:
            dims[base] = torch.export.Dim(base)
        return dims[base] + int(offset) if offset else dims[base]

    def leaf_spec(value: Any, axes: Mapping[int, str]) -> Any:
        if isinstance(value, torch.Tensor):
            return {axis: dim(name) for axis, name in axes.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(leaf_spec(v, axes) for v in value)
        if isinstance(value, Mapping):
            return {k: leaf_spec(v, axes) for k, v in value.items()}
        leaves = _container_leaves(value)  # a KV cache object: the axes on each of its tensors
        return None if leaves is None else [leaf_spec(leaf, axes) for leaf in leaves]

    return {arg: leaf_spec(value, dynamic[arg]) if arg in dynamic else None for arg, value in bound.items()}


def _container_leaves(value: Any) -> list[Any] | None:
    """The tensors a library container (transformers' DynamicCache) flattens to, in order; else None."""
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.exporter import library_pytrees

    with library_pytrees():
        leaves = pytree.tree_leaves(value)
    if not leaves or leaves == [value] or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        return None
    return leaves


def grown_inputs(dynamic: Mapping[str, Mapping[int, str]], model: Any, args: tuple, kwargs: Mapping[str, Any]
                 ) -> tuple[tuple, dict[str, Any], dict[str, int]]:
    """The inputs at a second size: every dynamic dim one larger, grown by repeating the inputs' own slices
    (token ids stay valid), the call's form kept (positional stays positional); and the sizes, by dim name."""
    import torch
    from torch.utils import _pytree as pytree

    from onnxsight.exporter import library_pytrees

    positional = list(inspect.signature(model.forward).bind_partial(*args).arguments)
    sizes: dict[str, int] = {}

    def grow(value: Any, axes: Mapping[int, str]) -> Any:
        def one(leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor):
                return leaf
            for axis, name in axes.items():
                size = leaf.shape[axis] + 1
                base, _, offset = name.replace(" ", "").partition("+")
                sizes[base] = size - int(offset or 0)
                leaf = leaf.index_select(axis, torch.arange(size) % leaf.shape[axis])
            return leaf.contiguous()
        return pytree.tree_map(one, value)

    with library_pytrees():  # a KV cache object grows tensor by tensor
        args = tuple(grow(v, dynamic[n]) if n in dynamic else v for n, v in zip(positional, args))
        kwargs = {n: grow(v, dynamic[n]) if n in dynamic else v for n, v in kwargs.items()}
    return args, kwargs, dict(sorted(sizes.items()))


def _load_module(ref: str) -> ModuleType:
    if ref in BUILTIN_SUITES:
        return importlib.import_module(BUILTIN_SUITES[ref])
    path = os.path.abspath(ref)
    if not os.path.isfile(path):
        known = ", ".join(BUILTIN_SUITES)
        raise ValueError(f"unknown suite {ref!r}: not a built-in suite ({known}) and not a Python file")
    module_name = "onnxsight_zoo_suite_" + "".join(c if c.isalnum() else "_" for c in path)
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load suite file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def suite_ref(ref: str) -> str:
    """The reference a worker process can load: built-in names stay, files become absolute paths."""
    return ref if ref in BUILTIN_SUITES else os.path.abspath(ref)


def load_suite(ref: str) -> Suite:
    """Load one suite by built-in name or file path. Unavailable suites come back with ``skipped`` set."""
    ref = suite_ref(ref)
    name = ref if ref in BUILTIN_SUITES else os.path.splitext(os.path.basename(ref))[0]
    try:
        module = _load_module(ref)
    except ImportError as exc:
        return Suite(ref, name, skipped=f"suite {name} cannot be imported here: {exc}")
    make = getattr(module, "suite", None)
    if not callable(make):
        raise ValueError(f"suite {ref} does not define suite()")
    try:
        specs = tuple(make())
    except SuiteUnavailable as exc:
        return Suite(ref, name, skipped=str(exc))
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"suite {name} has duplicate model names: {', '.join(duplicates)}")
    return Suite(ref, name, specs=tuple(s for s in specs if not s.unavailable),
                 skipped_models=tuple((s.name, s.unavailable) for s in specs if s.unavailable))


def load_suites(refs: Sequence[str] | str) -> list[Suite]:
    """Load suites from a list or a comma-separated string."""
    if isinstance(refs, str):
        refs = [r for r in (p.strip() for p in refs.split(",")) if r]
    return [load_suite(ref) for ref in refs]


def import_or_unavailable(module: str, suite: str) -> ModuleType:
    """Import ``module`` for a suite, turning any import failure into :class:`SuiteUnavailable`."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001  (torchvision built for CUDA raises RuntimeError, not ImportError)
        raise SuiteUnavailable(f"{module} does not import here, so the {suite} suite cannot run "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
