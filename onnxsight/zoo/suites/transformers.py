"""The transformers suite: small configs with random weights, never downloaded.

Each builder makes a tiny config (two layers, hidden size 32, small vocab),
builds the model from it with a fixed seed and returns example inputs. The
KV-cache decode step wraps LLaMA so the cache crosses the graph boundary as
plain tensors, the way a generation loop feeds an exported decoder.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from onnxsight.zoo._spec import ModelSpec, import_or_unavailable

VOCAB, HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 128, 32, 2, 4, 64, 64
TEXT = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=FFN, max_position_embeddings=POSITIONS)
DECODER = dict(TEXT, num_key_value_heads=2, use_cache=False, pad_token_id=0)


# What deployments vary (the zoo exports with these dims dynamic and verifies at other sizes).
BATCH = {0: "batch"}
TOKENS = {0: "batch", 1: "sequence"}
TEXT_DYNAMIC = {"input_ids": TOKENS, "attention_mask": TOKENS}
SEQ2SEQ_DYNAMIC = dict(TEXT_DYNAMIC, decoder_input_ids={0: "batch", 1: "decoder_sequence"})
IMAGE_DYNAMIC = {"pixel_values": BATCH}                                    # fixed-size position embeddings
DENSE_DYNAMIC = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}    # convolutions: any size
KV_DYNAMIC = {"input_ids": BATCH, "attention_mask": {0: "batch", 1: "past+1"},
              "past_keys": {0: "batch", 2: "past"}, "past_values": {0: "batch", 2: "past"}}
# MobileNetV2 computes TF-style "same" padding from the input's height and width in Python ints, which
# fixes them (CAP005): only the batch varies.
# Whisper's encoder requires exactly 2 * max_source_positions frames: only batch and the decoder length vary.
WHISPER_DYNAMIC = {"input_features": BATCH, "decoder_input_ids": {0: "batch", 1: "decoder_sequence"}}


def _text_inputs(batch: int = 2, length: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, :2] = 0
    return ids, mask


def _pixels(size: int = 32) -> torch.Tensor:
    return torch.randn(1, 3, size, size)


def _eval(model: nn.Module) -> nn.Module:
    return model.eval()


def bert() -> tuple:
    from transformers import BertConfig, BertModel
    ids, mask = _text_inputs()
    return _eval(BertModel(BertConfig(**TEXT))), (), {"input_ids": ids, "attention_mask": mask}


def distilbert() -> tuple:
    from transformers import DistilBertConfig, DistilBertModel
    config = DistilBertConfig(vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS, hidden_dim=FFN,
                              max_position_embeddings=POSITIONS)
    ids, mask = _text_inputs()
    return _eval(DistilBertModel(config)), (), {"input_ids": ids, "attention_mask": mask}


def gpt2() -> tuple:
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS,
                        bos_token_id=1, eos_token_id=2, use_cache=False)
    ids, mask = _text_inputs()
    return _eval(GPT2LMHeadModel(config)), (), {"input_ids": ids, "attention_mask": mask}


def t5() -> tuple:
    from transformers import T5Config, T5ForConditionalGeneration
    config = T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS,
                      use_cache=False, decoder_start_token_id=0)
    ids, mask = _text_inputs()
    decoder_ids = torch.randint(1, VOCAB, (2, 5))
    return (_eval(T5ForConditionalGeneration(config)), (),
            {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": decoder_ids})


def bart() -> tuple:
    from transformers import BartConfig, BartModel
    config = BartConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
                        decoder_ffn_dim=FFN, max_position_embeddings=POSITIONS, use_cache=False)
    ids, mask = _text_inputs()
    return _eval(BartModel(config)), (), {"input_ids": ids, "attention_mask": mask,
                                          "decoder_input_ids": torch.randint(3, VOCAB, (2, 5))}


def _causal_lm(config_name: str, model_name: str) -> tuple:
    import transformers
    config = getattr(transformers, config_name)(**DECODER)
    ids, mask = _text_inputs()
    model = getattr(transformers, model_name)(config)
    return _eval(model), (), {"input_ids": ids, "attention_mask": mask}


def llama() -> tuple:
    return _causal_lm("LlamaConfig", "LlamaForCausalLM")


def mistral() -> tuple:
    return _causal_lm("MistralConfig", "MistralForCausalLM")


def qwen2() -> tuple:
    return _causal_lm("Qwen2Config", "Qwen2ForCausalLM")


def cache_argument(model: Any = None) -> str:
    """forward()'s name for the KV cache: ``cache`` in newer transformers 5.x (5.24), ``past_key_values`` before.

    NOTE: 5.24 still renames a ``past_key_values=`` keyword to ``cache`` (deprecated, to be removed in
    5.40), but only at run time: forward()'s signature, which dynamic_shapes are keyed by, has ``cache``.
    """
    if model is None:
        from transformers import LlamaForCausalLM as model
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class DecodeStep(nn.Module):
    """One LLaMA decode step: new token + past keys/values as tensors -> logits + updated cache."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_keys: tuple[torch.Tensor, ...],
                past_values: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for layer, (key, value) in enumerate(zip(past_keys, past_values)):
            cache.update(key, value, layer)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                         **{cache_argument(self.model): cache})
        layers = (out.cache if "cache" in out else out.past_key_values).layers  # 5.24 renamed it
        return out.logits, tuple(entry.keys for entry in layers), tuple(entry.values for entry in layers)


def llama_kv_cache_decode() -> tuple:
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(**dict(DECODER, use_cache=True))
    model = _eval(LlamaForCausalLM(config))
    past, kv_heads, head_dim = 6, config.num_key_value_heads, HIDDEN // HEADS
    keys = tuple(torch.randn(1, kv_heads, past, head_dim) for _ in range(LAYERS))
    values = tuple(torch.randn(1, kv_heads, past, head_dim) for _ in range(LAYERS))
    ids = torch.randint(1, VOCAB, (1, 1))
    mask = torch.ones(1, past + 1, dtype=torch.long)
    return DecodeStep(model), (ids, mask, keys, values)


def whisper() -> tuple:
    from transformers import WhisperConfig, WhisperModel
    config = WhisperConfig(vocab_size=VOCAB, num_mel_bins=16, encoder_layers=LAYERS, decoder_layers=LAYERS,
                           encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, d_model=HIDDEN,
                           encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, max_source_positions=16,
                           max_target_positions=POSITIONS, use_cache=False, pad_token_id=0,
                           decoder_start_token_id=1)
    features = torch.randn(1, 16, 32)  # (batch, mel bins, 2 * max_source_positions)
    return _eval(WhisperModel(config)), (), {"input_features": features,
                                             "decoder_input_ids": torch.randint(2, VOCAB, (1, 4))}


def vit() -> tuple:
    from transformers import ViTConfig, ViTModel
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, intermediate_size=FFN)
    return _eval(ViTModel(config)), (_pixels(),)


def swin() -> tuple:
    from transformers import SwinConfig, SwinModel
    config = SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)
    return _eval(SwinModel(config)), (_pixels(),)


def convnext() -> tuple:
    from transformers import ConvNextConfig, ConvNextModel
    config = ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
    return _eval(ConvNextModel(config)), (_pixels(),)


def _resnet_config(**extra: Any) -> Any:
    from transformers import ResNetConfig
    return ResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], **extra)


def resnet() -> tuple:
    from transformers import ResNetForImageClassification
    return _eval(ResNetForImageClassification(_resnet_config(num_labels=5))), (_pixels(),)


def mobilenet_v2() -> tuple:
    from transformers import MobileNetV2Config, MobileNetV2Model
    # The default init (std 0.02) makes the outputs vanish (~1e-25) and any comparison meaningless.
    config = MobileNetV2Config(image_size=32, depth_multiplier=0.35, initializer_range=0.3)
    return _eval(MobileNetV2Model(config)), (_pixels(),)


def regnet() -> tuple:
    from transformers import RegNetConfig, RegNetModel
    config = RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8)
    return _eval(RegNetModel(config)), (_pixels(),)


def segformer() -> tuple:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation
    config = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                             num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=16, num_labels=3)
    return _eval(SegformerForSemanticSegmentation(config)), (_pixels(),)


def detr() -> tuple:
    from transformers import DetrConfig, DetrForObjectDetection
    backbone = _resnet_config(out_features=["stage2", "stage3", "stage4"])
    config = DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                        d_model=HIDDEN, encoder_layers=1, decoder_layers=1, encoder_attention_heads=HEADS,
                        decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN, num_queries=5,
                        num_labels=3)
    return _eval(DetrForObjectDetection(config)), (_pixels(64),)


BUILDERS: tuple[tuple[str, Any, tuple[str, ...], dict[str, Any]], ...] = (
    ("bert", bert, ("text", "encoder"), TEXT_DYNAMIC),
    ("distilbert", distilbert, ("text", "encoder"), TEXT_DYNAMIC),
    ("gpt2", gpt2, ("text", "decoder"), TEXT_DYNAMIC),
    ("t5", t5, ("text", "encoder-decoder"), SEQ2SEQ_DYNAMIC),
    ("bart", bart, ("text", "encoder-decoder"), SEQ2SEQ_DYNAMIC),
    ("llama", llama, ("text", "decoder"), TEXT_DYNAMIC),
    ("mistral", mistral, ("text", "decoder"), TEXT_DYNAMIC),
    ("qwen2", qwen2, ("text", "decoder"), TEXT_DYNAMIC),
    ("llama_kv_cache_decode", llama_kv_cache_decode, ("text", "decoder", "kv-cache"), KV_DYNAMIC),
    ("whisper", whisper, ("audio", "encoder-decoder"), WHISPER_DYNAMIC),
    ("vit", vit, ("vision", "attention"), IMAGE_DYNAMIC),
    ("swin", swin, ("vision", "attention"), IMAGE_DYNAMIC),
    ("convnext", convnext, ("vision", "cnn"), DENSE_DYNAMIC),
    ("resnet", resnet, ("vision", "cnn"), DENSE_DYNAMIC),
    ("mobilenet_v2", mobilenet_v2, ("vision", "cnn"), IMAGE_DYNAMIC),
    ("regnet", regnet, ("vision", "cnn"), DENSE_DYNAMIC),
    ("segformer", segformer, ("vision", "segmentation"), DENSE_DYNAMIC),
    ("detr", detr, ("vision", "detection"), IMAGE_DYNAMIC),
)


def _breadth() -> list[tuple[str, Any, tuple[str, ...], dict[str, Any]]]:
    """The rows of ``_hf_breadth``: more architectures, and decode steps taking a DynamicCache."""
    from functools import partial, update_wrapper

    from onnxsight.zoo.suites import _hf_breadth as more

    rows = [(arch.name, update_wrapper(partial(more.build, arch), more.build), arch.tags, arch.dynamic)
            for arch in more.ARCHS]
    rows += [(name, update_wrapper(partial(more.dynamic_cache_decode, config, model), more.dynamic_cache_decode),
              ("text", "decoder", "kv-cache"), more.cache_dynamic()) for name, config, model in more.CACHE_DECODERS]
    return rows


def _seeded(build: Any) -> Any:
    def seeded() -> tuple:
        torch.manual_seed(0)
        return build()
    seeded.__name__ = build.__name__
    seeded.__wrapped__ = build
    return seeded


def suite() -> list[ModelSpec]:
    import_or_unavailable("transformers", "transformers")
    return [ModelSpec(f"hf_{name}", _seeded(build), tags=("transformers",) + tags, dynamic=dynamic)
            for name, build, tags, dynamic in (*BUILDERS, *_breadth())]
