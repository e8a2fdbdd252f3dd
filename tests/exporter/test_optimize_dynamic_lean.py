"""Dynamic-size exports without their run-time size arithmetic (optimize/_shapes.py), and BERT's additive
padding mask (optimize/_padding.py) with dynamic sizes and in half precision.

Each pass on a small hand-built graph computes what the graph computed before (onnx's reference evaluator, at
several sizes); on transformers' GPT-2, LLaMA and BERT exported with a dynamic batch and sequence, the passes
shrink the graph, the export matches eager PyTorch and ``onnxsight.verify`` passes at several sizes, and ONNX
Runtime's transformer optimizer still fuses what it fused before.
"""

from __future__ import annotations

import contextlib
import io
from collections import Counter
from typing import Any, Callable

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from torch import nn

import onnxsight
from onnxsight.exporter.optimize import _shapes
from onnxsight.exporter.optimize._graph import Graph
from onnxsight.exporter.optimize._passes import dead_code
from tests.exporter.test_optimize_attention import PaddedAttention   # the same HIDDEN, HEADS

F, I64 = TensorProto.FLOAT, TensorProto.INT64
HIDDEN, HEADS, LAYERS = 32, 4, 2
DIMS = {0: "batch", 1: "seq"}
SIZES = ((2, 8), (3, 5), (1, 12))


# -- the passes on hand-built graphs ---------------------------------------------------------------------------
def _graph(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list]], outputs: list[str],
           value_info: dict[str, tuple[int, list]] | None = None,
           initializers: dict[str, torch.Tensor] | None = None) -> Graph:
    declared = value_info or {}
    proto = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, *declared.get(n, (TensorProto.UNDEFINED, None))) for n in outputs],
        value_info=[helper.make_tensor_value_info(n, t, s) for n, (t, s) in declared.items() if n not in outputs])
    return Graph.build(proto, dict(initializers or {}), {"": 18}, weights=set())


def _model(graph: Graph) -> onnx.ModelProto:
    graph.commit()
    proto = onnx.GraphProto()
    proto.CopyFrom(graph.proto)
    read = {i for n in graph.nodes for i in n.input}
    proto.initializer.extend(onnx.numpy_helper.from_array(t.contiguous().numpy(), name)
                             for name, t in graph.initializers.items() if name in read)
    return helper.make_model(proto, opset_imports=[helper.make_opsetid("", 18)])


def _i64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def _size(source: str, axis: int, out: str) -> list[onnx.NodeProto]:
    """``out`` = the size ``source.shape[axis]`` as the translator writes it: a Squeeze of a Shape slice."""
    return [helper.make_node("Shape", [source], [f"{out}_1d"], start=axis, end=axis + 1),
            helper.make_node("Squeeze", [f"{out}_1d", "zero"], [out])]


def _view_heads() -> Graph:
    """x.view(batch, seq, 4, -1) with its shape built from the sizes at run time (allowzero=1, as translated)."""
    return _graph([*_size("x", 0, "b"), *_size("x", 1, "s"),
                   helper.make_node("Reshape", ["b", "minus_one"], ["b1"]),
                   helper.make_node("Reshape", ["s", "minus_one"], ["s1"]),
                   helper.make_node("Concat", ["b1", "s1", "heads", "minus_one"], ["shape"], axis=0),
                   helper.make_node("Reshape", ["x", "shape"], ["y"], allowzero=1)],
                  {"x": (F, ["batch", "seq", 8])}, ["y"], {"y": (F, ["batch", "seq", 4, 2])},
                  {"zero": _i64(0), "minus_one": _i64(-1), "heads": _i64(4)})


def _two_sizes() -> Graph:
    """The same size read from two values that declare the same symbol, and the same Range computed twice."""
    return _graph([*_size("x", 0, "b"), *_size("z", 0, "b2"),
                   helper.make_node("Range", ["start", "b", "step"], ["r1"]),
                   helper.make_node("Range", ["start", "b2", "step"], ["r2"]),
                   helper.make_node("Add", ["r1", "r2"], ["y"])],
                  {"x": (F, ["batch", 3]), "z": (F, ["batch", 5])}, ["y"], {"r1": (I64, ["batch"]),
                                                                             "r2": (I64, ["batch"])},
                  {"zero": _i64(0), "start": torch.tensor(0), "step": torch.tensor(1)})


def _index_arithmetic() -> Graph:
    """arange(n)[:, None] % n + 0, times 1, and a size squeezed and reshaped back to [1]: all computing nothing."""
    return _graph([*_size("x", 0, "n"),
                   helper.make_node("Range", ["start", "n", "step"], ["r"]),
                   helper.make_node("Unsqueeze", ["r", "one_axis"], ["u"]),
                   helper.make_node("Mod", ["u", "n"], ["m"]),
                   helper.make_node("Add", ["m", "zero_scalar"], ["a"]),
                   helper.make_node("Mul", ["a", "one"], ["y"]),
                   helper.make_node("Reshape", ["n", "minus_one"], ["n1"]),
                   helper.make_node("Concat", ["n1", "three"], ["shape"], axis=0),
                   helper.make_node("Expand", ["y", "shape"], ["z"])],
                  {"x": (F, ["n", 2])}, ["z"], {"r": (I64, ["n"]), "u": (I64, ["n", 1]), "m": (I64, ["n", 1]),
                                                "a": (I64, ["n", 1]), "y": (I64, ["n", 1])},
                  {"zero": _i64(0), "start": torch.tensor(0), "step": torch.tensor(1), "one_axis": _i64(1),
                   "zero_scalar": torch.tensor(0), "one": torch.tensor(1), "minus_one": _i64(-1),
                   "three": _i64(3)})


def _all_passes(graph: Graph) -> int:
    done = 0
    for _ in range(3):
        done += sum(run(graph) for run in (_shapes.constant_reshapes, _shapes.shape_sources, _shapes.no_ops,
                                           _shapes.common_subexpressions, dead_code))
    return done


PASS_CASES: list[tuple[str, Callable[[], Graph], Callable[[Graph], int], list[str]]] = [
    ("reshape-to-its-own-dims", _view_heads, _all_passes, ["Reshape"]),
    ("one-size-read-once", _two_sizes, _all_passes, ["Shape", "Squeeze", "Range", "Add"]),
    ("index-arithmetic", _index_arithmetic, _all_passes, ["Shape", "Squeeze", "Range", "Unsqueeze", "Concat",
                                                          "Expand"]),
]


@pytest.mark.parametrize(("case", "build", "run", "left"), PASS_CASES, ids=[c[0] for c in PASS_CASES])
def test_the_size_passes_remove_the_arithmetic_and_compute_the_same(case: str, build: Callable[[], Graph],
                                                                    run: Callable[[Graph], int],
                                                                    left: list[str]) -> None:
    before = _model(build())
    graph = build()
    assert run(graph) > 0
    assert sorted(n.op_type for n in graph.nodes) == sorted(left)
    after = _model(graph)
    rng = np.random.default_rng(0)
    for batch, seq in ((2, 3), (5, 1), (1, 7)):
        feeds = {i.name: rng.standard_normal([batch if d.dim_param in ("batch", "n") else seq
                                              if d.dim_param == "seq" else d.dim_value
                                              for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                 for i in before.graph.input}
        expected, got = ReferenceEvaluator(before).run(None, feeds), ReferenceEvaluator(after).run(None, feeds)
        for e, g in zip(expected, got):
            np.testing.assert_array_equal(g, e)


def test_a_reshape_keeps_its_run_time_shape_where_two_dims_are_not_its_inputs() -> None:
    """[batch * seq, 8] -> [batch, seq, 8]: neither size is the input's own dim, so no constant fits."""
    graph = _graph([*_size("x", 0, "b"), *_size("x", 1, "s"),
                    helper.make_node("Reshape", ["x", "flat"], ["f"]),
                    helper.make_node("Reshape", ["b", "minus_one"], ["b1"]),
                    helper.make_node("Reshape", ["s", "minus_one"], ["s1"]),
                    helper.make_node("Concat", ["b1", "s1", "eight"], ["shape"], axis=0),
                    helper.make_node("Reshape", ["f", "shape"], ["y"], allowzero=1)],
                   {"x": (F, ["batch", "seq", 8])}, ["y"], {"f": (F, ["seq*batch", 8]),
                                                            "y": (F, ["batch", "seq", 8])},
                   {"zero": _i64(0), "minus_one": _i64(-1), "flat": _i64(-1, 8), "eight": _i64(8)})
    assert _shapes.constant_reshapes(graph) == 0
    assert graph.constant(graph.producer["y"].input[1]) is None
    _all_passes(graph)
    concat = graph.producer[graph.producer["y"].input[1]]
    assert [graph.producer[i].op_type for i in concat.input[:2]] == ["Shape", "Shape"]   # the sizes, read once


def test_random_draws_are_never_merged() -> None:
    graph = _graph([helper.make_node("RandomNormalLike", ["x"], ["r1"]),
                    helper.make_node("RandomNormalLike", ["x"], ["r2"]), helper.make_node("Add", ["r1", "r2"], ["y"])],
                   {"x": (F, [2])}, ["y"])
    assert _shapes.common_subexpressions(graph) == 0
    assert len(graph.nodes) == 3


def test_a_graph_output_computed_twice_keeps_both_names() -> None:
    graph = _graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["z"])],
                   {"x": (F, [2])}, ["y", "z"])
    assert _shapes.common_subexpressions(graph) == 0
    assert len(graph.nodes) == 2


# -- transformers models with a dynamic batch and sequence -------------------------------------------------------
def _bert() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=100, max_position_embeddings=32, num_hidden_layers=LAYERS,
                                     hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=4 * HIDDEN)
    return transformers.BertModel(config, add_pooling_layer=False)


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS)
    return transformers.GPT2Model(config)


def _llama() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=100, max_position_embeddings=32, num_hidden_layers=LAYERS,
                                      hidden_size=HIDDEN, num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                      intermediate_size=4 * HIDDEN)
    return transformers.LlamaModel(config)


# model, ORT's model_type, the residual norms ORT fuses (two per layer)
MODELS = [("bert", _bert, "bert", "SkipLayerNormalization"), ("gpt2", _gpt2, "gpt2", "SkipLayerNormalization"),
          ("llama", _llama, "gpt2", "SkipSimplifiedLayerNormalization")]


def _eval(build: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    model = build()
    model.config.use_cache = False
    model.config.return_dict = False
    return model.eval()


def _fused(program: Any, path: str, model_type: str) -> Counter:
    from onnxruntime.transformers.optimizer import optimize_model

    program.save(path)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        optimized = optimize_model(path, model_type=model_type, num_heads=HEADS, hidden_size=HIDDEN)
    return Counter(n.op_type for n in optimized.model.graph.node)


def _without_size_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("constant_reshapes", "shape_sources", "no_ops", "common_subexpressions"):
        monkeypatch.setattr(_shapes, name, lambda graph: 0)


@pytest.mark.parametrize(("name", "build", "model_type", "norm"), MODELS, ids=[m[0] for m in MODELS])
def test_a_dynamic_export_sheds_its_size_arithmetic_and_matches_pytorch(name: str, build: Callable[[], nn.Module],
                                                                        model_type: str, norm: str, tmp_path: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime")
    model = _eval(build)
    ids = torch.randint(0, 100, (2, 8))
    program = onnxsight.export(model, (ids,), dynamic_shapes={"input_ids": DIMS})
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    # every head split and merge reads a constant shape ([0, 0, 4, 8], [0, 0, -1]); nothing computes an index mod
    reshapes = [n for n in program.model_proto.graph.node if n.op_type == "Reshape"]
    constants = {t.name for t in program.model_proto.graph.initializer}
    assert sum(r.input[1] in constants for r in reshapes) >= 4 * LAYERS, ops
    assert "Mod" not in ops and ops["Shape"] <= 4, ops
    with monkeypatch.context() as patched:
        _without_size_passes(patched)
        before = onnxsight.export(model, (ids,), dynamic_shapes={"input_ids": DIMS})
    assert len(program.model_proto.graph.node) < len(before.model_proto.graph.node) - 12 * LAYERS
    fused = _fused(program, str(tmp_path / f"{name}.onnx"), model_type)
    assert fused[norm] == 2 * LAYERS, fused
    if name == "bert":
        assert fused["Attention"] == LAYERS, fused
    for shape in SIZES:
        other = torch.randint(0, 100, shape)
        with torch.no_grad():
            expected = model(other)[0]
        torch.testing.assert_close(program(other)[0], expected, rtol=1e-4, atol=1e-4)
        assert onnxsight.verify(program, (other,)).passed, shape


# -- BERT's additive padding mask, dynamic sizes and half precision ---------------------------------------------
def _padded(shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = torch.randint(0, 100, shape), torch.ones(shape, dtype=torch.int64)
    mask[0, shape[1] // 2:] = 0   # the first sequence half padding
    return ids, mask


def test_bert_with_a_dynamic_padding_mask_fuses_one_attention_per_layer(tmp_path: Any) -> None:
    pytest.importorskip("onnxruntime")
    model = _eval(_bert)
    program = onnxsight.export(model, _padded((2, 8)),
                               dynamic_shapes={"input_ids": DIMS, "attention_mask": dict(DIMS)})
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert "TopK" not in ops and ops["Where"] == 1 and ops["Sub"] == 1, ops   # the additive form, no guard
    assert any(d.code == "ONX008" for d in program.diagnostics)
    from onnxruntime.transformers.optimizer import optimize_model

    path = str(tmp_path / "bert-mask.onnx")
    program.save(path)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        fused = optimize_model(path, model_type="bert", num_heads=HEADS, hidden_size=HIDDEN)
    counts = Counter(n.op_type for n in fused.model.graph.node)
    assert counts["Attention"] == LAYERS and counts["SkipLayerNormalization"] == 2 * LAYERS, counts
    for shape in SIZES:
        args = _padded(shape)
        with torch.no_grad():
            expected = model(*args)[0]
        torch.testing.assert_close(program(*args)[0], expected, rtol=1e-4, atol=1e-4)
        assert onnxsight.verify(program, args).passed, shape
        assert onnxsight.verify(program, args, onnx_model=fused.model).passed, shape


def _keys(batch: int, seq: int) -> torch.Tensor:
    keys = torch.rand(batch, seq) > 0.4
    keys[:, 0] = True   # every sequence attends to a key
    return keys


def _run(program: Any, x: torch.Tensor, keys: torch.Tensor) -> np.ndarray:
    """The export's output, by ONNX Runtime where it runs the dtype (float32, float16), else onnx's reference."""
    if x.dtype != torch.bfloat16:
        return program(x, keys)[0].float().numpy()
    import ml_dtypes

    feeds = {"x": x.float().numpy().astype(ml_dtypes.bfloat16), "mask": keys.numpy()}
    return ReferenceEvaluator(program.model_proto).run(None, feeds)[0].astype(np.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_half_precision_padding_mask_takes_the_additive_form_with_its_dtypes_lowest(dtype: torch.dtype,
                                                                                      dynamic: bool) -> None:
    torch.manual_seed(0)
    model = PaddedAttention().eval().to(dtype)
    x, keys = torch.randn(2, 6, HIDDEN).to(dtype), _keys(2, 6)
    shapes = {"x": dict(DIMS), "mask": dict(DIMS)} if dynamic else None
    exact = onnxsight.export(model, (x, keys), dynamic_shapes=shapes, optimize=False)   # torch's guard (ReduceMax)
    program = onnxsight.export(model, (x, keys), dynamic_shapes=shapes)
    ops = Counter(n.op_type for n in program.model_proto.graph.node)
    assert "ReduceMax" not in ops and ops["Where"] == 1 and ops["Sub"] == 1, ops
    assert any(d.code == "ONX008" for d in program.diagnostics)
    where = next(n for n in program.model_proto.graph.node if n.op_type == "Where")
    lowest = next(t for t in program.model_proto.graph.initializer if t.name == where.input[1])
    assert lowest.data_type == (TensorProto.FLOAT16 if dtype == torch.float16 else TensorProto.BFLOAT16)
    value = torch.tensor(onnx.numpy_helper.to_array(lowest).astype(np.float32))
    assert float(value) == torch.finfo(dtype).min
    for batch, seq in ((2, 6), (3, 4), (1, 9)) if dynamic else ((2, 6),):
        x, keys = torch.randn(batch, seq, HIDDEN).to(dtype), _keys(batch, seq)
        got, guarded = _run(program, x, keys), _run(exact, x, keys)
        np.testing.assert_array_equal(got, guarded)   # rows that attend: the same numbers as torch's guard form
        with torch.no_grad():
            expected = model(x, keys).float().numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-2 if dtype == torch.bfloat16 else 4e-3)
