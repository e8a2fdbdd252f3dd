"""GPT-2 exported with ``dynamic_shapes`` and with a KV cache, and ONNX Runtime's transformer optimizer.

With dynamic sizes transformers builds the causal mask at run time. The optimize stage runs that mask at many
sizes (``_sized_mask``): where it leaves every query a key, torch's fully-masked-row guard goes (by default), and
where it is causal, ``optimize="ort-fusion"`` writes it in the form ORT's GPT-2 fuser matches, so one
``Attention`` per layer fuses and the fused model matches PyTorch at every size. A decode step taking a
``DynamicCache`` exports and verifies with a past of any length; ORT's GPT-2 fuser with past wants one stacked
``past``/``present`` tensor per layer, so on that graph only the layer norms and GELUs fuse (docs/optimization.md).
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

import onnxsight
from onnxsight.exporter.optimize._graph import Graph
from onnxsight.exporter.optimize._sized_mask import causal_fill_at_sizes

LAYERS, HIDDEN, HEADS, VOCAB = 2, 64, 4, 100
DYNAMIC = {"input_ids": {0: "batch", 1: "seq"}}


def _gpt2(use_cache: bool = False) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                     use_cache=use_cache)
    model = transformers.GPT2Model(config).eval()
    model.config.return_dict = False
    return model


def _llama() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                      num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                      intermediate_size=2 * HIDDEN, max_position_embeddings=64, use_cache=False)
    model = transformers.LlamaModel(config).eval()
    model.config.return_dict = False
    return model


def _optimized(path: str, **options: Any) -> Any:
    pytest.importorskip("onnxruntime")
    from onnxruntime.transformers.optimizer import optimize_model

    with contextlib.redirect_stdout(io.StringIO()):
        return optimize_model(path, model_type="gpt2", num_heads=HEADS, hidden_size=HIDDEN, **options)


def _stats(optimized: Any) -> dict[str, int]:
    return {op: n for op, n in optimized.get_fused_operator_statistics().items() if n}


@pytest.fixture(scope="module")
def dynamic_gpt2(tmp_path_factory: Any) -> tuple[torch.nn.Module, onnxsight.ONNXProgram, str]:
    model = _gpt2()
    program = onnxsight.export(model, (torch.randint(0, VOCAB, (2, 8)),), dynamic_shapes=DYNAMIC,
                               optimize="ort-fusion")
    path = str(tmp_path_factory.mktemp("gpt2-dynamic") / "gpt2.onnx")
    program.save(path)
    return model, program, path


@pytest.mark.parametrize("opt_level", [0, 1])
def test_dynamic_gpt2_fuses_one_attention_per_layer_and_matches_pytorch(dynamic_gpt2: Any, opt_level: int) -> None:
    # with run-time sizes ORT's level-1 constant folding has nothing to fold first: both levels fuse
    model, program, path = dynamic_gpt2
    optimized = _optimized(path, opt_level=opt_level)
    stats = _stats(optimized)
    assert stats["Attention"] == LAYERS and stats["SkipLayerNormalization"] == 2 * LAYERS, stats
    assert [a.i for n in optimized.model.graph.node if n.op_type == "Attention" for a in n.attribute
            if a.name == "unidirectional"] == [1] * LAYERS
    args = (torch.randint(0, VOCAB, (2, 8)),)
    result = onnxsight.verify(program, args, onnx_model=optimized.model)
    assert result.passed and result.info["compared"] > LAYERS
    import onnxruntime as ort

    session = ort.InferenceSession(optimized.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((3, 5), (1, 12), (2, 1), (1, 40)):
        ids = torch.randint(0, VOCAB, shape)
        with torch.no_grad():
            expected = model(ids)[0]
        got = session.run(None, {"input_ids": ids.numpy()})[0]
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4, err_msg=str(shape))


def test_a_dynamic_batch_alone_fuses_too(tmp_path: Any) -> None:
    # the sequence fixed at export: the run-time mask is causal over that length at every batch size sampled
    model = _gpt2()
    program = onnxsight.export(model, (torch.randint(0, VOCAB, (2, 8)),), dynamic_shapes={"input_ids": {0: "batch"}},
                               optimize="ort-fusion")
    path = str(tmp_path / "gpt2-batch.onnx")
    program.save(path)
    optimized = _optimized(path, opt_level=0)
    assert _stats(optimized)["Attention"] == LAYERS
    ids = torch.randint(0, VOCAB, (3, 8))
    assert onnxsight.verify(program, (ids,), onnx_model=optimized.model).passed


def test_dynamic_gpt2_export_verifies_at_other_sizes(dynamic_gpt2: Any) -> None:
    model, program, _ = dynamic_gpt2
    for shape in ((3, 5), (1, 1)):
        ids = torch.randint(0, VOCAB, shape)
        assert onnxsight.verify(program, (ids,)).passed, shape
        with torch.no_grad():
            torch.testing.assert_close(program(ids)[0], model(ids)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_the_default_export_computes_the_causal_mask_in_a_few_nodes_without_its_guard(name: str) -> None:
    # transformers' run-time mask (Range/Mod/GatherND/comparisons) is causal at every size run: it becomes
    # Range(L) <= Range(L)[:, None] once for all layers, and torch's fully-masked-row guard goes
    model = _gpt2() if name == "gpt2" else _llama()
    program = onnxsight.export(model, (torch.randint(0, VOCAB, (2, 8)),), dynamic_shapes=DYNAMIC)
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert "TopK" not in ops and "GatherND" not in ops and ops["LessOrEqual"] == 1, ops
    for shape in ((3, 5), (1, 1), (2, 13)):
        ids = torch.randint(0, VOCAB, shape)
        assert onnxsight.verify(program, (ids,)).passed, shape
        with torch.no_grad():
            torch.testing.assert_close(program(ids)[0], model(ids)[0], rtol=1e-4, atol=1e-4)


class SizedSdpa(torch.nn.Module):
    """sdpa with a bool mask built from the sequence length; ``strict``: the first query sees no key (a dead row)."""

    def __init__(self, strict: bool) -> None:
        super().__init__()
        self.strict = strict

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(q.shape[2])
        keep = positions[None, :] < positions[:, None] if self.strict else positions[None, :] <= positions[:, None]
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=keep)


@pytest.mark.parametrize("strict", [False, True], ids=["causal", "dead-first-row"])
def test_the_guard_of_a_run_time_mask_goes_only_when_no_row_is_masked_throughout(strict: bool) -> None:
    module = SizedSdpa(strict)
    program = onnxsight.export(module, (torch.randn(1, 2, 6, 8),), dynamic_shapes={"q": {2: "seq"}})
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert ("IsNaN" in ops) == strict and "TopK" not in ops, ops   # a guard kept is written as torch.onnx does
    for length in (1, 3, 9):
        q = torch.randn(1, 2, length, 8)
        torch.testing.assert_close(program(q)[0], module(q), rtol=1e-5, atol=1e-5)   # torch's zeros where dead


# -- the mask check, on masks computed from a dynamic size ------------------------------------------------------

class SizedMask(torch.nn.Module):
    """scores + an additive mask built from the sequence length: causal, banded (a sliding window) or padded."""

    def __init__(self, window: int | None = None, padded: bool = False) -> None:
        super().__init__()
        self.window, self.padded = window, padded

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(scores.shape[-1])
        keep = positions[None, :] <= positions[:, None]
        if self.window is not None:
            keep = keep & (positions[None, :] > positions[:, None] - self.window)
        if self.padded:   # reads the scores' values: not a function of the sizes
            keep = keep & (scores[0, 0] > -100)
        return scores + torch.where(keep, 0.0, float("-inf"))


@pytest.mark.parametrize("module, expected", [
    (SizedMask(), float("-inf")),
    (SizedMask(window=4), None),      # causal up to 4 positions, banded beyond: the sizes sampled reach 8
    (SizedMask(window=20), None),     # the sizes around the constant 20 are sampled too
    (SizedMask(window=5000), None),   # too large a constant to run the mask at: refused
    (SizedMask(padded=True), None),
], ids=["causal", "window-4", "window-20", "window-5000", "reads-values"])
def test_only_a_mask_causal_at_every_size_sampled_is_accepted(module: torch.nn.Module, expected: Any) -> None:
    scores = torch.randn(1, 2, 6, 6)
    program = onnxsight.export(module, (scores,), dynamic_shapes={"scores": {2: "seq", 3: "seq"}})
    proto = program.model_proto.graph
    initializers = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in proto.initializer}
    graph = Graph.build(proto, initializers, {o.domain: o.version for o in program.model_proto.opset_import},
                        weights=set())
    (add,) = [n for n in graph.nodes if n.op_type == "Add" and n.output[0] == proto.output[0].name]
    mask = next(name for name in add.input if name != proto.input[0].name)
    assert causal_fill_at_sizes(graph, mask, "seq") == expected


# -- KV cache ----------------------------------------------------------------------------------------------------

def _cache(batch: int, past: int) -> Any:
    from transformers import DynamicCache

    head = HIDDEN // HEADS
    return DynamicCache([(torch.randn(batch, HEADS, past, head), torch.randn(batch, HEADS, past, head))
                         for _ in range(LAYERS)])


def test_gpt2_with_a_kv_cache_exports_verifies_and_keeps_its_layer_norm_fusions(tmp_path: Any) -> None:
    from torch.export import Dim

    model = _gpt2(use_cache=True)
    batch, seq, past = Dim("batch"), Dim("seq"), Dim("past", min=1, max=1024)
    dynamic = {"input_ids": {0: batch, 1: seq}, "cache": [{0: batch, 2: past}] * (2 * LAYERS)}
    program = onnxsight.export(model, (), kwargs={"input_ids": torch.randint(0, VOCAB, (2, 3)), "cache": _cache(2, 5)},
                               dynamic_shapes=dynamic, optimize="ort-fusion")
    graph = program.model_proto.graph
    assert [v.name for v in graph.input][1:3] == ["past_key_values.0.key", "past_key_values.0.value"]
    assert [v.name for v in graph.output][1:3] == ["present.0.key", "present.0.value"]
    for batch_size, length, past_length in ((2, 3, 5), (1, 1, 9), (3, 4, 1)):
        kwargs = {"input_ids": torch.randint(0, VOCAB, (batch_size, length)),
                  "cache": _cache(batch_size, past_length)}
        assert onnxsight.verify(program, (), kwargs).passed, (batch_size, length, past_length)
    path = str(tmp_path / "gpt2-cache.onnx")
    program.save(path)
    optimized = _optimized(path, opt_level=0)
    stats = _stats(optimized)
    # NOTE: ORT's GPT-2 fuser with past (fusion_gpt_attention.py) wants each layer's cache as one stacked
    # past_i (2, batch, heads, past, head size) input and present_i output, the layout its Attention op takes;
    # a DynamicCache is a key and a value per layer, so attention is not fused, for any exporter
    assert "Attention" not in stats and stats["SkipLayerNormalization"] == 2 * LAYERS, stats
    assert "TopK" not in {n.op_type for n in graph.node}   # the causal mask over past + new keys has no dead row
    kwargs = {"input_ids": torch.randint(0, VOCAB, (2, 3)), "cache": _cache(2, 5)}
    assert onnxsight.verify(program, (), kwargs, onnx_model=optimized.model).passed
