"""What the decoder forms of ``optimize="ort-fusion"`` cost in nodes: per layer, what ONNX Runtime's fusers
need per layer, and once per graph, the shared cos/sin and mask (docs/optimization.md, "The switch"). Each model is
exported with 1 and 2 layers, at the defaults and with ``optimize="ort-fusion"``; the
form's nodes per layer are the growth of the difference from 1 to 2 layers.

- GPT-2 (``fusion_gpt_attention_no_past.py``): the mask ``Where(Slice(Slice(table, Unsqueeze(Sub(Squeeze(
  Slice(Shape(scores))))))), scores, fill)`` in place of ``scores + mask`` (7 nodes more: its path ends at the
  layer's own ``Div``, ``div_qk != div_mask``) and the heads' merge ``Reshape`` (the fuser's path has two
  ``Reshape``s between the ``Transpose`` and the ``Gemm``): 8.
- LLaMA (``fusion_rotary_attention.py``): the Q/K/V and output Reshape shapes, ``Concat(Unsqueeze(Gather(
  Shape(root))), ...)`` from the layer's own Q/K/V input (``shape_1.input[0] != root_input``; one Concat for
  Q, K and V, one for the output; 7), and rotate_half's split ``Unsqueeze(Div(Gather(Shape(x), 3), 2))`` from
  each rotated value's own Transpose (4 for Q, 4 for K): 15. The first layer's Shape/Gather/Unsqueeze set is
  also the sizes the shared forms read.
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
import torch

import onnxsight

HIDDEN, HEADS, SEQ = 64, 4, 8


def _model(kind: str, layers: int) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        config: Any = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=HIDDEN, n_layer=layers,
                                              n_head=HEADS)
        model = transformers.GPT2Model(config)
    else:
        config = transformers.LlamaConfig(vocab_size=100, hidden_size=HIDDEN, num_hidden_layers=layers,
                                          num_attention_heads=HEADS, num_key_value_heads=HEADS,
                                          intermediate_size=2 * HIDDEN, max_position_embeddings=32)
        model = transformers.LlamaModel(config)
    model.config.use_cache = kind == "llama-cache"
    model.config.return_dict = False
    return model.eval()


def _inputs(kind: str, layers: int) -> tuple[tuple, dict, dict | None]:
    """(args, kwargs, dynamic_shapes) of a static export (``gpt2``, ``llama``), a dynamic batch and sequence
    (``llama-dynamic``), or a decode step over a cache of 5 past positions (``llama-cache``)."""
    from torch.export import Dim

    ids = torch.randint(0, 100, (2, SEQ))
    if kind in ("gpt2", "llama"):
        return (ids,), {}, None
    batch, seq = Dim("batch"), Dim("seq")
    if kind == "llama-dynamic":
        return (ids,), {}, {"input_ids": {0: batch, 1: seq}}
    from transformers import DynamicCache

    shape = (2, HEADS, 5, HIDDEN // HEADS)
    cache = DynamicCache([(torch.randn(shape), torch.randn(shape)) for _ in range(layers)])
    past = Dim("past", min=1, max=64)
    return (), {"input_ids": ids[:, :3], "cache": cache}, \
        {"input_ids": {0: batch, 1: seq}, "cache": [{0: batch, 2: past}] * (2 * layers)}


def _nodes(kind: str, layers: int, optimize: Any, tmp_path: Any) -> int:
    args, kwargs, dynamic = _inputs(kind, layers)
    program = onnxsight.export(_model(kind, layers), args, kwargs=kwargs or None, optimize=optimize,
                               dynamic_shapes=dynamic)
    path = str(tmp_path / f"{kind}-{layers}-{optimize}.onnx")
    program.save(path)
    return len(onnx.load(path, load_external_data=False).graph.node)


def _form_cost(kind: str, tmp_path: Any) -> tuple[int, int]:
    """(nodes the form adds per layer, nodes it adds once) over the default export."""
    extra = [_nodes(kind, n, "ort-fusion", tmp_path) - _nodes(kind, n, True, tmp_path) for n in (1, 2)]
    per_layer = extra[1] - extra[0]
    return per_layer, extra[0] - per_layer


# (per layer, once): GPT-2 no shared nodes (the static causal table is a constant), 3 of its 11 the Gemm form of its
# Conv1Ds' linear layers, which the default writes as MatMul + Add on 3-D inputs; LLaMA static: cos/sin
# gathered from two Constant caches sliced to Shape(hidden)[1] rows (a Shape of its own: ORT's
# FusionRotaryEmbeddings removes that path, Shape included, before the attention fuser reads the first layer's
# Shape) and the mask, less the model's own cos/sin; dynamic: the on-the-fly cos/sin and the mask from the first
# layer's sizes, less the model's cos/sin and mask
@pytest.mark.parametrize("kind, per_layer, once", [
    ("gpt2", 11, 0),
    ("llama", 15, 10),
    ("llama-dynamic", 15, 7),
    ("llama-cache", 15, 6),
])
def test_the_decoder_forms_cost_what_the_fusers_need_per_layer(kind: str, per_layer: int, once: int,
                                                               tmp_path: Any) -> None:
    assert _form_cost(kind, tmp_path) == (per_layer, once)
