"""The generation suite: generative models verified as a loop of steps over their KV cache.

Each model is built from a small local config with random weights (two layers, hidden size 32, never
downloaded) with its prompt: a batch of two, the first row left-padded as a tokenizer pads a batch for
``generate()`` (an encoder-decoder's encoder prompt padded on the right, as its tokenizer does). The zoo
exports its step programs and verifies 16 steps of greedy decoding in ONNX Runtime against PyTorch
(``ModelSpec.generation_steps``); the dashboard shows the steps agreed per model.
"""

from __future__ import annotations

from typing import Any

import torch

from onnxsight.zoo._spec import ModelSpec, import_or_unavailable

STEPS = 16
VOCAB, HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 128, 32, 2, 4, 64, 64
DECODER = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               intermediate_size=FFN, max_position_embeddings=POSITIONS, pad_token_id=0)
SEQ2SEQ = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
               encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
               max_position_embeddings=POSITIONS, pad_token_id=1, decoder_start_token_id=2)


def prompt(left_padded: bool = True, batch: int = 2, length: int = 6) -> dict[str, torch.Tensor]:
    """Token ids and mask of a batch whose first row is two tokens shorter, padded left (decoders) or right."""
    ids = torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(batch, length, dtype=torch.long)
    pad = slice(0, 2) if left_padded else slice(length - 2, length)
    mask[0, pad] = 0
    ids[0, pad] = 1
    return {"input_ids": ids, "attention_mask": mask}


def _build(config: str, model: str, **sizes: Any) -> Any:
    import transformers

    torch.manual_seed(0)
    return getattr(transformers, model)(getattr(transformers, config)(**sizes)).eval()


def llama() -> tuple:
    return _build("LlamaConfig", "LlamaForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def llama_mha() -> tuple:
    return _build("LlamaConfig", "LlamaForCausalLM", **DECODER, num_key_value_heads=HEADS), prompt()


def qwen2() -> tuple:
    return _build("Qwen2Config", "Qwen2ForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def gpt2() -> tuple:
    sizes = dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS,
                 bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return _build("GPT2Config", "GPT2LMHeadModel", **sizes), prompt()


def mistral() -> tuple:
    """A sliding window of 4 positions, shorter than the prompt and the loop: the mask slides, the cache grows."""
    return _build("MistralConfig", "MistralForCausalLM", **DECODER, num_key_value_heads=2, sliding_window=4), prompt()


def gemma2() -> tuple:
    """Sliding and full layers alternating, attention and final logits soft-capped."""
    return (_build("Gemma2Config", "Gemma2ForCausalLM", **DECODER, num_key_value_heads=2, head_dim=8,
                   sliding_window=4), prompt())


def phi3() -> tuple:
    return _build("Phi3Config", "Phi3ForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def opt() -> tuple:
    sizes = dict(vocab_size=VOCAB, hidden_size=HIDDEN, word_embed_proj_dim=HIDDEN, num_hidden_layers=LAYERS,
                 num_attention_heads=HEADS, ffn_dim=FFN, max_position_embeddings=POSITIONS, pad_token_id=1)
    return _build("OPTConfig", "OPTForCausalLM", **sizes), prompt()


def gpt_neox() -> tuple:
    return _build("GPTNeoXConfig", "GPTNeoXForCausalLM", **DECODER), prompt()


def falcon() -> tuple:
    """ALiBi (no position embedding: the bias grows with the attended positions), multi-query attention."""
    sizes = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                 alibi=True, multi_query=True, new_decoder_architecture=False, pad_token_id=0)
    return _build("FalconConfig", "FalconForCausalLM", **sizes), prompt()


def bloom() -> tuple:
    sizes = dict(vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS, pad_token_id=0)
    return _build("BloomConfig", "BloomForCausalLM", **sizes), prompt()


def qwen3() -> tuple:
    """Grouped-query attention with a norm on each head's queries and keys."""
    return _build("Qwen3Config", "Qwen3ForCausalLM", **DECODER, num_key_value_heads=2, head_dim=8), prompt()


def phi() -> tuple:
    """A partial rotary (half of each head's dims), parallel attention and MLP."""
    return _build("PhiConfig", "PhiForCausalLM", **DECODER, partial_rotary_factor=0.5), prompt()


def gptj() -> tuple:
    """An interleaved rotary on the first 4 dims of each head."""
    sizes = dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, rotary_dim=4, n_positions=POSITIONS,
                 pad_token_id=0)
    return _build("GPTJConfig", "GPTJForCausalLM", **sizes), prompt()


def codegen() -> tuple:
    sizes = dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, rotary_dim=4, n_positions=POSITIONS,
                 n_ctx=POSITIONS, pad_token_id=0)
    return _build("CodeGenConfig", "CodeGenForCausalLM", **sizes), prompt()


def stablelm() -> tuple:
    return _build("StableLmConfig", "StableLmForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def olmo2() -> tuple:
    return _build("Olmo2Config", "Olmo2ForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def granite() -> tuple:
    """LLaMA's layout with scaled embeddings, residuals, attention and logits."""
    return _build("GraniteConfig", "GraniteForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def starcoder2() -> tuple:
    return _build("Starcoder2Config", "Starcoder2ForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def gpt_bigcode() -> tuple:
    """Multi-query attention, its keys and values in one cache tensor per layer."""
    sizes = dict(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS, pad_token_id=0)
    return _build("GPTBigCodeConfig", "GPTBigCodeForCausalLM", **sizes), prompt()


def mixtral() -> tuple:
    """A mixture of experts: 2 of 4 experts per token, chosen by the router."""
    return (_build("MixtralConfig", "MixtralForCausalLM", **DECODER, num_key_value_heads=2, num_local_experts=4,
                   num_experts_per_tok=2), prompt())


def qwen2_moe() -> tuple:
    """Routed experts and a gated shared expert."""
    return (_build("Qwen2MoeConfig", "Qwen2MoeForCausalLM", **DECODER, num_key_value_heads=2, num_experts=4,
                   num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32), prompt())


def cohere() -> tuple:
    return _build("CohereConfig", "CohereForCausalLM", **DECODER, num_key_value_heads=2), prompt()


def mpt() -> tuple:
    """ALiBi; its config does not return the cache (``use_cache=False``): the step asks for it."""
    sizes = dict(vocab_size=VOCAB, d_model=HIDDEN, n_layers=LAYERS, n_heads=HEADS, max_seq_len=POSITIONS,
                 pad_token_id=0)
    return _build("MptConfig", "MptForCausalLM", **sizes), prompt()


def gemma3() -> tuple:
    """Sliding and full layers with a rotary of their own each, norms on queries and keys."""
    return (_build("Gemma3TextConfig", "Gemma3ForCausalLM", **DECODER, num_key_value_heads=2, head_dim=8,
                   sliding_window=4), prompt())


def gpt_neo() -> tuple:
    """Global and local (windowed) attention layers alternating, learned positions."""
    sizes = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=HEADS,
                 attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=POSITIONS,
                 pad_token_id=0)
    return _build("GPTNeoConfig", "GPTNeoForCausalLM", **sizes), prompt()


def llama4() -> tuple:
    """A rotary of complex numbers, attention chunked to 4 positions on rotary layers, a routed expert."""
    return (_build("Llama4TextConfig", "Llama4ForCausalLM", **DECODER, num_key_value_heads=2, head_dim=8,
                   num_local_experts=2, intermediate_size_mlp=FFN, attention_chunk_size=4), prompt())


def deepseek_v3() -> tuple:
    """Multi-head latent attention (keys and values through a rank-16 projection), routed experts."""
    return (_build("DeepseekV3Config", "DeepseekV3ForCausalLM", **DECODER, num_key_value_heads=HEADS,
                   n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16,
                   q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8, first_k_dense_replace=1,
                   n_group=1, topk_group=1), prompt())


def bart() -> tuple:
    return _build("BartConfig", "BartForConditionalGeneration", **SEQ2SEQ), prompt(left_padded=False)


def marian() -> tuple:
    return (_build("MarianConfig", "MarianMTModel", **SEQ2SEQ, decoder_vocab_size=VOCAB),
            prompt(left_padded=False))


def mbart() -> tuple:
    return _build("MBartConfig", "MBartForConditionalGeneration", **SEQ2SEQ), prompt(left_padded=False)


def pegasus() -> tuple:
    return _build("PegasusConfig", "PegasusForConditionalGeneration", **SEQ2SEQ), prompt(left_padded=False)


def m2m100() -> tuple:
    return _build("M2M100Config", "M2M100ForConditionalGeneration", **SEQ2SEQ), prompt(left_padded=False)


def blenderbot_small() -> tuple:
    return (_build("BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration", **SEQ2SEQ),
            prompt(left_padded=False))


def mt5() -> tuple:
    sizes = dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS,
                 pad_token_id=0, decoder_start_token_id=0)
    return _build("MT5Config", "MT5ForConditionalGeneration", **sizes), prompt(left_padded=False)


def t5() -> tuple:
    sizes = dict(vocab_size=VOCAB, d_model=HIDDEN, d_kv=8, d_ff=FFN, num_layers=LAYERS, num_heads=HEADS,
                 pad_token_id=0, decoder_start_token_id=0)
    return _build("T5Config", "T5ForConditionalGeneration", **sizes), prompt(left_padded=False)


def whisper() -> tuple:
    sizes = dict(vocab_size=VOCAB, num_mel_bins=16, encoder_layers=LAYERS, decoder_layers=LAYERS,
                 encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, d_model=HIDDEN, encoder_ffn_dim=FFN,
                 decoder_ffn_dim=FFN, max_source_positions=16, max_target_positions=POSITIONS, pad_token_id=0,
                 bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    features = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(1))  # 2 * max_source_positions frames
    return _build("WhisperConfig", "WhisperForConditionalGeneration", **sizes), {"input_features": features}


# name -> (build, tags); the first two are the ones `make test` runs (tests/zoo/test_generation_suite.py). Falcon
# (falcon(), ALiBi rounded to bfloat16) is not here: ONNX Runtime's CPU provider has no bfloat16 Mul for it.
MODELS = {
    "llama": (llama, ("decoder", "grouped-query")),
    "gpt2": (gpt2, ("decoder",)),
    "llama_mha": (llama_mha, ("decoder",)),
    "qwen2": (qwen2, ("decoder", "grouped-query")),
    "mistral": (mistral, ("decoder", "grouped-query", "sliding-window")),
    "gemma2": (gemma2, ("decoder", "grouped-query", "sliding-window", "soft-capping")),
    "phi3": (phi3, ("decoder", "grouped-query")),
    "opt": (opt, ("decoder",)),
    "gpt_neox": (gpt_neox, ("decoder",)),
    "bloom": (bloom, ("decoder", "alibi")),
    "qwen3": (qwen3, ("decoder", "grouped-query")),
    "phi": (phi, ("decoder", "partial-rotary")),
    "gptj": (gptj, ("decoder", "partial-rotary")),
    "codegen": (codegen, ("decoder", "partial-rotary")),
    "stablelm": (stablelm, ("decoder", "grouped-query")),
    "olmo2": (olmo2, ("decoder", "grouped-query")),
    "granite": (granite, ("decoder", "grouped-query")),
    "starcoder2": (starcoder2, ("decoder", "grouped-query")),
    "gpt_bigcode": (gpt_bigcode, ("decoder", "multi-query")),
    "mixtral": (mixtral, ("decoder", "grouped-query", "mixture-of-experts")),
    "qwen2_moe": (qwen2_moe, ("decoder", "grouped-query", "mixture-of-experts")),
    "cohere": (cohere, ("decoder", "grouped-query")),
    "mpt": (mpt, ("decoder", "alibi")),
    "gemma3": (gemma3, ("decoder", "grouped-query", "sliding-window")),
    "gpt_neo": (gpt_neo, ("decoder", "sliding-window")),
    "llama4": (llama4, ("decoder", "grouped-query", "complex-rotary", "mixture-of-experts")),
    "deepseek_v3": (deepseek_v3, ("decoder", "latent-attention", "mixture-of-experts")),
    "bart": (bart, ("encoder-decoder",)),
    "marian": (marian, ("encoder-decoder",)),
    "mbart": (mbart, ("encoder-decoder",)),
    "pegasus": (pegasus, ("encoder-decoder",)),
    "m2m100": (m2m100, ("encoder-decoder",)),
    "blenderbot_small": (blenderbot_small, ("encoder-decoder",)),
    "t5": (t5, ("encoder-decoder",)),
    "mt5": (mt5, ("encoder-decoder",)),
    "whisper": (whisper, ("encoder-decoder", "audio")),
}


def suite() -> list[ModelSpec]:
    import_or_unavailable("transformers", "generation")
    return [ModelSpec(f"gen_{name}", build, tags=("generation", *tags), generation_steps=STEPS)
            for name, (build, tags) in MODELS.items()]
