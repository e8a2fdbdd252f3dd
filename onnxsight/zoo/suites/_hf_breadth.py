"""More transformers architectures for the transformers suite: tiny local configs, random weights.

Each row names a config class, a model class, the config's (small) sizes and the kind of inputs
the model takes; ``build`` makes the model and its example inputs. Nothing is downloaded: every
model is built from its config with a fixed seed (``transformers.py`` seeds it). The decode steps
at the end take transformers' ``DynamicCache`` itself as input (flattened by onnxsight for the
export: CAP012).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

VOCAB, HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 128, 32, 2, 4, 64, 64
TEXT = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            intermediate_size=FFN, max_position_embeddings=POSITIONS)
DECODER = dict(TEXT, num_key_value_heads=2, use_cache=False, pad_token_id=0)
SEQ2SEQ = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
               encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
               decoder_ffn_dim=FFN, max_position_embeddings=POSITIONS, use_cache=False, pad_token_id=0,
               decoder_start_token_id=2)
VIT = dict(image_size=32, patch_size=8, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
           intermediate_size=FFN)
# wav2vec2-style feature extractor, shrunk: 3 conv layers (stride 5, 2, 2 -> one frame per 20 samples).
AUDIO = dict(TEXT, vocab_size=32, conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, do_stable_layer_norm=False)

BATCH = {0: "batch"}
TOKENS = {0: "batch", 1: "sequence"}
TEXT_DYNAMIC = {"input_ids": TOKENS, "attention_mask": TOKENS}
SEQ2SEQ_DYNAMIC = dict(TEXT_DYNAMIC, decoder_input_ids={0: "batch", 1: "decoder_sequence"})
IMAGE_DYNAMIC = {"pixel_values": BATCH}
DENSE_DYNAMIC = {"pixel_values": {0: "batch", 2: "height", 3: "width"}}
AUDIO_DYNAMIC = {"input_values": {0: "batch", 1: "samples"}}


def cache_dynamic() -> dict[str, Any]:
    """The decode step's dynamic axes, its cache keyed as forward() spells it (past_key_values or cache)."""
    from onnxsight.zoo.suites.transformers import cache_argument

    return {"input_ids": BATCH, "attention_mask": {0: "batch", 1: "past+1"}, cache_argument(): {0: "batch", 2: "past"}}


@dataclass(frozen=True)
class Arch:
    """One architecture: ``transformers.<config>(**sizes)`` -> ``transformers.<model>``, fed ``inputs``."""

    name: str
    config: str
    model: str
    sizes: dict[str, Any]
    inputs: str                                   # a key of INPUTS
    tags: tuple[str, ...]
    dynamic: dict[str, Any] = field(default_factory=dict)


def _text(batch: int = 2, length: int = 8) -> dict[str, torch.Tensor]:
    ids = torch.randint(3, VOCAB, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, :2] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _seq2seq() -> dict[str, torch.Tensor]:
    return dict(_text(), decoder_input_ids=torch.randint(3, VOCAB, (2, 5)))


def _pixels(size: int = 32) -> dict[str, torch.Tensor]:
    return {"pixel_values": torch.randn(2, 3, size, size)}


def _detection() -> dict[str, torch.Tensor]:
    return _pixels(64)   # a ResNet backbone's last stage 2x2


def _patches() -> dict[str, torch.Tensor]:
    """SigLIP-2's text and NaFlex image inputs: 16 patches of 8x8x3 in a 4x4 grid per image."""
    return {"input_ids": torch.randint(3, VOCAB, (2, 8)), "pixel_values": torch.randn(2, 16, 192),
            "pixel_attention_mask": torch.ones(2, 16, dtype=torch.long), "spatial_shapes": torch.tensor([[4, 4]] * 2)}


def _audio() -> dict[str, torch.Tensor]:
    return {"input_values": torch.randn(2, 400)}


def _spectrogram() -> dict[str, torch.Tensor]:
    return {"input_values": torch.randn(2, 32, 16)}   # (batch, frames, mel bins), the AST's max_length/num_mel_bins


INPUTS: dict[str, Callable[[], dict[str, torch.Tensor]]] = {
    "text": _text, "seq2seq": _seq2seq, "pixels": _pixels, "audio": _audio, "spectrogram": _spectrogram,
    "detection": _detection, "patches": _patches,
}

ENCODERS = ("text", "encoder")
DECODERS = ("text", "decoder")
ENC_DEC = ("text", "encoder-decoder")
MOE = ("text", "decoder", "moe")

ARCHS: tuple[Arch, ...] = (
    # encoders
    Arch("roberta", "RobertaConfig", "RobertaModel", dict(TEXT, pad_token_id=1), "text", ENCODERS, TEXT_DYNAMIC),
    Arch("xlm_roberta", "XLMRobertaConfig", "XLMRobertaModel", dict(TEXT, pad_token_id=1), "text", ENCODERS,
         TEXT_DYNAMIC),
    Arch("albert", "AlbertConfig", "AlbertModel", dict(TEXT, embedding_size=16), "text", ENCODERS, TEXT_DYNAMIC),
    Arch("electra", "ElectraConfig", "ElectraModel", dict(TEXT, embedding_size=16), "text", ENCODERS, TEXT_DYNAMIC),
    Arch("deberta_v2", "DebertaV2Config", "DebertaV2Model", dict(TEXT, relative_attention=True, position_buckets=8,
                                                                   pos_att_type=["p2c", "c2p"]),
         "text", ENCODERS, TEXT_DYNAMIC),
    Arch("mpnet", "MPNetConfig", "MPNetModel", TEXT, "text", ENCODERS, TEXT_DYNAMIC),
    # its example is left-padded: verify's size 1 once cut it to padding only (ONX008)
    Arch("ernie", "ErnieConfig", "ErnieModel", TEXT, "text", ENCODERS, TEXT_DYNAMIC),
    Arch("mobilebert", "MobileBertConfig", "MobileBertModel",
         dict(TEXT, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=2),
         "text", ENCODERS, TEXT_DYNAMIC),
    Arch("squeezebert", "SqueezeBertConfig", "SqueezeBertModel", dict(TEXT, embedding_size=HIDDEN), "text",
         ENCODERS, TEXT_DYNAMIC),
    # decoders (no cache)
    Arch("phi", "PhiConfig", "PhiForCausalLM", DECODER, "text", DECODERS, TEXT_DYNAMIC),
    Arch("phi3", "Phi3Config", "Phi3ForCausalLM", DECODER, "text", DECODERS, TEXT_DYNAMIC),
    Arch("gemma", "GemmaConfig", "GemmaForCausalLM", dict(DECODER, head_dim=8), "text", DECODERS, TEXT_DYNAMIC),
    Arch("gemma2", "Gemma2Config", "Gemma2ForCausalLM", dict(DECODER, head_dim=8, sliding_window=4), "text",
         DECODERS, TEXT_DYNAMIC),
    Arch("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(DECODER, head_dim=8), "text", DECODERS, TEXT_DYNAMIC),
    Arch("opt", "OPTConfig", "OPTForCausalLM", dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                                    num_attention_heads=HEADS, ffn_dim=FFN, word_embed_proj_dim=HIDDEN,
                                                    max_position_embeddings=POSITIONS, use_cache=False,
                                                    pad_token_id=1),
         "text", DECODERS, TEXT_DYNAMIC),
    Arch("gpt_neox", "GPTNeoXConfig", "GPTNeoXForCausalLM", dict(DECODER, rotary_pct=0.5), "text", DECODERS,
         TEXT_DYNAMIC),
    Arch("falcon", "FalconConfig", "FalconForCausalLM", dict(vocab_size=VOCAB, hidden_size=HIDDEN,
                                                             num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                                             use_cache=False, pad_token_id=0),
         "text", DECODERS, TEXT_DYNAMIC),
    Arch("bloom", "BloomConfig", "BloomForCausalLM", dict(vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS,
                                                          n_head=HEADS, use_cache=False, pad_token_id=0),
         "text", DECODERS, TEXT_DYNAMIC),
    Arch("gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM",
         dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS, use_cache=False),
         "text", DECODERS, TEXT_DYNAMIC),
    Arch("gptj", "GPTJConfig", "GPTJForCausalLM", dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                                                       n_positions=POSITIONS, rotary_dim=4, use_cache=False),
         "text", DECODERS, TEXT_DYNAMIC),
    Arch("stablelm", "StableLmConfig", "StableLmForCausalLM", DECODER, "text", DECODERS, TEXT_DYNAMIC),
    Arch("starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", DECODER, "text", DECODERS, TEXT_DYNAMIC),
    Arch("olmo", "OlmoConfig", "OlmoForCausalLM", DECODER, "text", DECODERS, TEXT_DYNAMIC),
    # mixture of experts
    Arch("mixtral", "MixtralConfig", "MixtralForCausalLM", dict(DECODER, num_local_experts=4, num_experts_per_tok=2),
         "text", MOE, TEXT_DYNAMIC),
    # NOTE: transformers' default experts run `transformers::grouped_mm_fallback` (a custom op) after an
    # `aten.histc` token count (both translated in exporter/ops/moe.py): Mixtral keeps that default; the
    # other two use `batched_mm` (every expert on every token, masked), which transformers' own exporters
    # choose for runtimes without grouped GEMMs.
    Arch("qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
         dict(DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
              shared_expert_intermediate_size=32, experts_implementation="batched_mm"), "text", MOE, TEXT_DYNAMIC),
    Arch("olmoe", "OlmoeConfig", "OlmoeForCausalLM",
         dict(DECODER, num_experts=4, num_experts_per_tok=2, experts_implementation="batched_mm"), "text", MOE,
         TEXT_DYNAMIC),
    # encoder-decoders
    Arch("marian", "MarianConfig", "MarianMTModel", dict(SEQ2SEQ, decoder_vocab_size=VOCAB), "seq2seq", ENC_DEC,
         SEQ2SEQ_DYNAMIC),
    Arch("mbart", "MBartConfig", "MBartModel", SEQ2SEQ, "seq2seq", ENC_DEC, SEQ2SEQ_DYNAMIC),
    Arch("pegasus", "PegasusConfig", "PegasusModel", SEQ2SEQ, "seq2seq", ENC_DEC, SEQ2SEQ_DYNAMIC),
    Arch("m2m_100", "M2M100Config", "M2M100Model", SEQ2SEQ, "seq2seq", ENC_DEC, SEQ2SEQ_DYNAMIC),
    # vision
    Arch("deit", "DeiTConfig", "DeiTModel", VIT, "pixels", ("vision", "attention"), IMAGE_DYNAMIC),
    Arch("beit", "BeitConfig", "BeitModel", dict(VIT, use_relative_position_bias=True), "pixels",
         ("vision", "attention"), IMAGE_DYNAMIC),
    Arch("dinov2", "Dinov2Config", "Dinov2Model", VIT, "pixels", ("vision", "attention"), DENSE_DYNAMIC),
    Arch("levit", "LevitConfig", "LevitModel", dict(image_size=32, hidden_sizes=[16, 32, 48], num_attention_heads=[1, 2, 3],
                                                    depths=[1, 1, 1], key_dim=[8, 8, 8], patch_size=16,
                                                    initializer_range=0.2),
         "pixels", ("vision", "attention"), IMAGE_DYNAMIC),
    Arch("poolformer", "PoolFormerConfig", "PoolFormerModel", dict(hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], initializer_range=0.1),
         "pixels", ("vision", "cnn"), DENSE_DYNAMIC),
    Arch("efficientnet", "EfficientNetConfig", "EfficientNetModel",
         dict(image_size=32, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320,
              initializer_range=0.6), "pixels",
         ("vision", "cnn"), IMAGE_DYNAMIC),
    Arch("mobilevit", "MobileViTConfig", "MobileViTModel",
         dict(image_size=32, hidden_sizes=[16, 16, 16], neck_hidden_sizes=[8, 8, 16, 16, 16, 32, 64],
              num_attention_heads=2, initializer_range=0.3), "pixels", ("vision", "hybrid"), IMAGE_DYNAMIC),
    # the encoder's padding mask read by the decoder's cross-attention from 5 object queries
    Arch("conditional_detr", "ConditionalDetrConfig", "ConditionalDetrForObjectDetection",
         dict(use_timm_backbone=False, use_pretrained_backbone=False, d_model=HIDDEN, encoder_layers=1,
              decoder_layers=1, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
              decoder_ffn_dim=FFN, num_queries=5, num_labels=3,
              backbone_config=dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16, 16, 32],
                                   depths=[1, 1, 1, 1], out_features=["stage4"])),
         "detection", ("vision", "detection"), IMAGE_DYNAMIC),
    # NaFlex patches; torch._check_tensor_all on the grid (aten._is_all_true)
    Arch("siglip2", "Siglip2Config", "Siglip2Model",
         dict(text_config=TEXT, vision_config=dict(VIT, num_patches=16)), "patches", ("vision", "text", "attention"),
         {"input_ids": TOKENS, "pixel_values": BATCH, "pixel_attention_mask": BATCH, "spatial_shapes": BATCH}),
    # audio
    Arch("wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", AUDIO, "audio", ("audio", "encoder"), AUDIO_DYNAMIC),
    Arch("hubert", "HubertConfig", "HubertModel", AUDIO, "audio", ("audio", "encoder"), AUDIO_DYNAMIC),
    Arch("wavlm", "WavLMConfig", "WavLMModel", dict(AUDIO, num_buckets=16, max_bucket_distance=64), "audio",
         ("audio", "encoder"), AUDIO_DYNAMIC),
    Arch("audio_spectrogram_transformer", "ASTConfig", "ASTModel",
         dict(VIT, patch_size=8, frequency_stride=8, time_stride=8, max_length=32, num_mel_bins=16), "spectrogram",
         ("audio", "attention"), {"input_values": BATCH}),
)


def build(arch: Arch) -> tuple:
    """(model in eval mode, (), example inputs as keywords)."""
    import transformers

    config = getattr(transformers, arch.config)(**arch.sizes)
    model = getattr(transformers, arch.model)(config).eval()
    return model, (), INPUTS[arch.inputs]()


def dynamic_cache_decode(config_name: str, model_name: str) -> tuple:
    """A decode step that takes the KV cache as transformers' DynamicCache: one new token, 6 past positions."""
    import transformers
    from transformers import DynamicCache

    from onnxsight.zoo.suites.transformers import cache_argument

    config = getattr(transformers, config_name)(**dict(DECODER, use_cache=True))
    model = getattr(transformers, model_name)(config).eval()
    batch, past, head_dim = 2, 6, HIDDEN // HEADS
    cache = DynamicCache([(torch.randn(batch, config.num_key_value_heads, past, head_dim),
                           torch.randn(batch, config.num_key_value_heads, past, head_dim)) for _ in range(LAYERS)])
    return model, (), {"input_ids": torch.randint(3, VOCAB, (batch, 1)),
                       "attention_mask": torch.ones(batch, past + 1, dtype=torch.long), cache_argument(model): cache}


# Models that stay in the suite with a known failure (README.md: Zoo results), name -> why.
KNOWN_FAILURES: dict[str, str] = {
    "hf_dinov2": "CAP005: modeling_dinov2.py's position-embedding shortcut (`num_patches == num_positions and "
                 "height == width`, guard (height//8)*(width//8) == 16) fixes height and width to the trained 32; "
                 "torch.onnx exports it static and fails at 33x33",
}

CACHE_DECODERS: tuple[tuple[str, str, str], ...] = (
    ("llama_dynamic_cache", "LlamaConfig", "LlamaForCausalLM"),
    ("qwen2_dynamic_cache", "Qwen2Config", "Qwen2ForCausalLM"),
    ("mistral_dynamic_cache", "MistralConfig", "MistralForCausalLM"),
)
