"""Analytic FLOPs of the decoder's passes, for rooflines and MFU (`rl4llm.parallel.tpu`).

XLA's `cost_analysis()` counts the body of a `lax.scan` / `while_loop` once (the decoder's blocks are a scan, the
micro-batches a scan, decoding a while loop), so it undercounts a step by about the loops' trip counts; these
closed forms are the numbers to use, `cost_analysis()` only a cross-check.

Conventions (PaLM, Chowdhery et al. 2022, appendix B; MaxText's `calculate_tflops_training_per_device`): a
multiply-add is 2 FLOPs; a forward pass over a token costs 2 x (weights it multiplies) plus causal attention,
2 x 2 x H x D x (keys it sees) per layer (q.k and p.v); a backward pass costs twice the forward. "Model" FLOPs
count each pass once (what MFU divides by); rematerialisation adds hardware FLOPs only.
"""

from __future__ import annotations

from rl4llm.models.config import ModelConfig


def block_matmul_params(cfg: ModelConfig) -> int:
    """Weights one decoder block multiplies per token: q, k, v, o projections and the SwiGLU MLP,
    E·H·D + 2·E·Hkv·D + H·D·E + 3·E·I (biases and norms are not matmuls)."""
    e, h, hkv, d, i = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    return 2 * e * h * d + 2 * e * hkv * d + 3 * e * i


def trunk_matmul_params(cfg: ModelConfig) -> int:
    """Weights of the decoder blocks that a token's forward pass multiplies (the embedding lookup is no matmul)."""
    return cfg.num_layers * block_matmul_params(cfg)


def unembed_params(cfg: ModelConfig) -> int:
    """Weights of the logits projection E·V (the tied embedding or the lm head)."""
    return cfg.hidden_size * cfg.vocab_size


def attention_flops(cfg: ModelConfig, queries: int, keys_seen: float) -> float:
    """q.k and p.v of `queries` query tokens that each see `keys_seen` keys on average:
    4·L·H·D·queries·keys_seen."""
    return 4.0 * cfg.num_layers * cfg.num_heads * cfg.head_dim * queries * keys_seen


def sequence_forward_flops(cfg: ModelConfig, rows: int, length: int, logit_tokens: int) -> float:
    """One cache-free forward pass over `rows` sequences of `length` tokens, logits for `logit_tokens` of each:
    2·N_trunk·rows·length + causal attention (each query sees (length+1)/2 keys on average)
    + 2·E·V·rows·logit_tokens."""
    tokens = rows * length
    return (2.0 * trunk_matmul_params(cfg) * tokens + attention_flops(cfg, tokens, (length + 1) / 2)
            + 2.0 * unembed_params(cfg) * rows * logit_tokens)


def learner_forward_flops(cfg: ModelConfig, rows: int, length: int, logit_tokens: int, prompt_group: int = 1
                          ) -> float:
    """`sequence_forward_flops`, or with prompt_group = g > 1 (`models.completion_hidden`): the P = length − T
    prompt tokens forwarded for rows/g rows only, the T = `logit_tokens` completion tokens for every row, each
    completion query seeing the P prompt keys and (T+1)/2 completion keys on average."""
    if prompt_group == 1:
        return sequence_forward_flops(cfg, rows, length, logit_tokens)
    prompt_len, completion_tokens = length - logit_tokens, rows * logit_tokens
    return (sequence_forward_flops(cfg, rows // prompt_group, prompt_len, 0)
            + 2.0 * trunk_matmul_params(cfg) * completion_tokens
            + attention_flops(cfg, completion_tokens, prompt_len + (logit_tokens + 1) / 2)
            + 2.0 * unembed_params(cfg) * completion_tokens)


def trunk_forward_flops(cfg: ModelConfig, rows: int, length: int, logit_tokens: int = 0, prompt_group: int = 1
                        ) -> float:
    """The blocks' share of `learner_forward_flops` (what full rematerialisation recomputes): no logits."""
    return (learner_forward_flops(cfg, rows, length, logit_tokens, prompt_group)
            - 2.0 * unembed_params(cfg) * rows * logit_tokens)


def learner_attention_flops(cfg: ModelConfig, rows: int, length: int, logit_tokens: int, prompt_group: int = 1
                            ) -> float:
    """The attention dots' share of `learner_forward_flops` (what "dots" rematerialisation recomputes)."""
    if prompt_group == 1:
        return attention_flops(cfg, rows * length, (length + 1) / 2)
    prompt_len = length - logit_tokens
    return (attention_flops(cfg, rows // prompt_group * prompt_len, (prompt_len + 1) / 2)
            + attention_flops(cfg, rows * logit_tokens, prompt_len + (logit_tokens + 1) / 2))


def decode_flops(cfg: ModelConfig, rows: int, prompt_len: int, new_tokens: int) -> float:
    """`new_tokens - 1` incremental decode steps of `rows` sequences after a `prompt_len` prefill (the first new
    token comes from the prefill's logits): per step and row 2·N_trunk + 2·E·V, and attention to the keys
    written so far (prompt_len + t at step t, on average prompt_len + new_tokens/2)."""
    steps = max(new_tokens - 1, 0)
    per_token = 2.0 * (trunk_matmul_params(cfg) + unembed_params(cfg))
    return rows * steps * per_token + attention_flops(cfg, rows * steps, prompt_len + new_tokens / 2)
