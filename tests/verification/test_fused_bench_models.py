"""Every model of ``bench/ort_fusion.py`` (issue 33), exported by onnxsight at its defaults with static and with dynamic
sizes, fused by ONNX Runtime's transformer optimizer and by onnxscript's ``optimize_for_ort`` at their defaults: the
fused model loads in ONNX Runtime, holds the fusions the generated pages report, and verifies against PyTorch per
node at the default tolerance (``make test-ort-fusion``). The bench's masks pad the end of each sequence, so no row
is fully masked (that case is the note ONX008, tests/verification/test_optimized_models.py)."""

from __future__ import annotations

import collections
import contextlib
import io
import os
import sys
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

pytest.importorskip("transformers")
pytest.importorskip("onnxscript")
pytest.importorskip("onnxruntime")

import ort_fusion  # noqa: E402

import onnxsight  # noqa: E402

pytestmark = pytest.mark.slow

LAYERS = ort_fusion.LAYERS
ENCODERS = ("bert", "bert-mask", "vit")
DECODERS = ("gpt2", "llama", "llama-gqa", "llama-mask", "llama-cache", "gpt2-cache")


def _expected(name: str, fuser: str, dynamic: bool) -> dict[str, int]:
    """The attention and residual-norm ops the fuser makes in onnxsight's graph (docs/ort-fusion*.md)."""
    gpt2 = name.startswith("gpt2")
    skip = "SkipLayerNormalization" if name in ENCODERS or gpt2 else "SkipSimplifiedLayerNormalization"
    if fuser == "onnxscript":
        attention = "Attention" if name in ENCODERS else "MultiHeadAttention"
        return {attention: LAYERS, skip: 2 * LAYERS}
    # ORT's optimizer: no attention in a decoder at the default opt_level; ViT's only with dynamic sizes (its
    # level-1 MatMulAddFusion rewrites a static pre-LN block's projections into Reshape/Gemm/Reshape)
    if name in ENCODERS and (name != "vit" or dynamic):
        return {"Attention": LAYERS, skip: 2 * LAYERS}
    return {skip: 2 * LAYERS}


def _fused(path: str, name: str, fuser: str) -> Any:
    if fuser == "ort":
        from onnxruntime.transformers.optimizer import optimize_model

        with contextlib.redirect_stdout(io.StringIO()):
            return optimize_model(path, model_type=ort_fusion.MODEL_TYPES[name], num_heads=ort_fusion.HEADS,
                                  hidden_size=ort_fusion.HIDDEN).model
    import onnx_ir as ir
    from onnxscript.rewriter.ort_fusions import optimize_for_ort

    model, _ = optimize_for_ort(ir.load(path))
    return ir.serde.serialize_model(model)


def _split(args: tuple) -> tuple[tuple, dict | None]:
    return (args[:-1], args[-1]) if args and isinstance(args[-1], dict) else (args, None)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: Any) -> Any:
    cache: dict[tuple[str, bool], tuple[onnxsight.ONNXProgram, str]] = {}

    def get(name: str, dynamic: bool) -> tuple[onnxsight.ONNXProgram, str]:
        if (name, dynamic) not in cache:
            model, args = ort_fusion.build(name)
            args, kwargs = _split(args)
            program = onnxsight.export(model, args, kwargs=kwargs,
                                       dynamic_shapes=ort_fusion.dynamic_shapes(name) if dynamic else None)
            path = str(tmp_path_factory.mktemp(name) / f"{name}.onnx")
            program.save(path)
            cache[name, dynamic] = program, path
        return cache[name, dynamic]
    return get


@pytest.mark.parametrize("fuser", ["ort", "onnxscript"])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", [*ENCODERS, *DECODERS])
def test_the_fused_model_holds_its_fusions_and_verifies(exported: Any, name: str, dynamic: bool, fuser: str) -> None:
    import onnxruntime as ort

    program, path = exported(name, dynamic)
    fused = _fused(path, name, fuser)
    ops = collections.Counter(node.op_type for node in fused.graph.node)
    expected = _expected(name, fuser, dynamic)
    for op, count in expected.items():   # a residual norm at least per half layer (the embeddings' too, here and there)
        assert ops[op] == count if "Attention" in op else ops[op] >= count, dict(ops)
    assert len(fused.graph.node) < len(program.model_proto.graph.node)
    ort.InferenceSession(fused.SerializeToString(), providers=["CPUExecutionProvider"])
    _, args = ort_fusion.build(name)   # afresh: the export ran forward(), which appended to the example's cache
    args, kwargs = _split(args)
    result = onnxsight.verify(program, args, kwargs, onnx_model=fused)
    assert result.passed, result.root_causes
    assert result.info["compared"] >= 2 * LAYERS   # the values that survive fusion are still compared
