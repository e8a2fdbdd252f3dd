"""What onnxsight relies on inside torch and transformers, checked against the installed versions.

onnxsight uses a few private torch APIs and reads torch's ShapeEnv log records (capture/_torchlog.py),
and flattens transformers' caches (inputs/_pytree_libs.py). Those are tested with the versions of the
lock (torch 2.13.0, transformers 5.24.0) by `make test`, and with the newest releases by
`make test-latest` (torch 2.14.1 here): a release that moves one of them fails here, by name, instead of
a diagnostic silently losing its line (docs/environments.md).
"""

from __future__ import annotations

import importlib
import inspect
import logging

import pytest
import torch
from torch.export import Dim

# (module, attribute, what onnxsight uses it for)
PRIVATE_TORCH = [
    ("torch.utils._pytree", "_private_register_pytree_node", "inputs/_pytree_libs: a removable registration"),
    ("torch.utils._pytree", "_deregister_pytree_node", "inputs/_pytree_libs: removed after the export"),
    ("torch.utils._pytree", "SUPPORTED_NODES", "inputs/_pytree_libs: a user's registration set aside"),
    ("torch.utils._pytree", "SUPPORTED_SERIALIZED_TYPES", "inputs/_pytree_libs: ... and restored"),
    ("torch.utils._pytree", "SERIALIZED_TYPE_TO_PYTHON_TYPE", "inputs/_pytree_libs: ... and restored"),
    ("torch.fx._pytree", "SUPPORTED_NODES", "inputs/_pytree_libs: torch.fx's twin registration"),
    ("torch.fx._pytree", "SUPPORTED_NODES_EXACT_MATCH", "inputs/_pytree_libs: torch.fx's twin registration"),
    ("torch._guards", "TracingContext", "capture/_torchlog: the user's line of a guard in strict mode"),
    ("torch.fx.experimental._config", "backed_size_oblivious", "capture/_strategies: size-oblivious retry"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily", "inputs/_fake: real constants in fake mode"),
    ("torch._subclasses.fake_tensor", "FakeTensorMode", "inputs/_fake: onnxsight.fake_mode()"),
    ("torch._dynamo.exc", "UserErrorType", "capture/_strategies: classifying a failure"),
    ("torch._prims_common", "elementwise_dtypes", "_builder: type promotion"),
]


@pytest.mark.parametrize("module, attribute, use", PRIVATE_TORCH, ids=[f"{m}.{a}" for m, a, _ in PRIVATE_TORCH])
def test_the_private_torch_apis_onnxsight_uses_exist(module: str, attribute: str, use: str) -> None:
    assert hasattr(importlib.import_module(module), attribute), \
        f"torch {torch.__version__} has no {module}.{attribute}, which {use}"


class _Fixed(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(2, -1) * 2


def test_torchs_shape_log_records_carry_what_capture_reads() -> None:
    """create_symbol / [guard added] / set_replacement with their arguments: CAP005/CAP007 locate from them."""
    from onnxsight.exporter.capture._torchlog import recording

    with recording(frozenset({"L['x'].size()[0]"})) as log:
        with pytest.raises(Exception):
            torch.export.export(_Fixed(), (torch.randn(2, 3),), dynamic_shapes={"x": {0: Dim("batch")}},
                                strict=False)
    kinds = {event.kind for event in log.events}
    assert {"symbol", "replacement"} <= kinds, (torch.__version__, log.events)
    assert any(e.location is not None and e.location.file == __file__ for e in log.events)
    assert logging.getLogger("torch.fx.experimental.symbolic_shapes").handlers != [log]  # put back


def test_transformers_cache_api_the_flattening_uses() -> None:
    """DynamicCache with ``layers`` of DynamicLayer / DynamicSlidingWindowLayer (transformers >= 4.56)."""
    transformers = pytest.importorskip("transformers")
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    cache = DynamicCache([(torch.zeros(1, 2, 3, 4), torch.ones(1, 2, 3, 4))])
    assert isinstance(cache.layers[0], DynamicLayer) and cache.layers[0].keys.shape == (1, 2, 3, 4)
    assert "layers" in inspect.signature(Cache.__init__).parameters, transformers.__version__
    assert DynamicSlidingWindowLayer(sliding_window=4) is not None


@pytest.mark.parametrize("spelling", ["past_key_values", "cache"])
def test_the_kv_cache_argument_is_read_from_forward(spelling: str) -> None:
    """transformers 4.x and early 5.x: ``past_key_values=``; 5.24: ``cache=`` (both tested on any install)."""
    from onnxsight.zoo.suites.transformers import cache_argument

    namespace: dict = {}
    exec(f"def forward(self, input_ids=None, {spelling}=None, **kwargs): pass", namespace)
    model = type("Decoder", (torch.nn.Module,), {"forward": namespace["forward"]})
    assert cache_argument(model) == spelling
