"""Per-token log-probabilities and entropies of completions, computed in chunks.

For a sequence `tokens = [prompt (left-padded to P) | completion (T tokens)]`, the completion token
at position P+t is predicted by the hidden state at position P+t-1. We run the decoder once
(`models.forward`, hidden states after the final norm), then project to the vocabulary chunk by
chunk over the completion length under `jax.checkpoint`, so neither the forward nor the backward
pass ever holds the full [N, T, V] float32 logits: at most [N, chunk, V] at a time.

Conventions (shared with the sampler, `rl4llm.sampling`): logits are divided by the rollout
temperature τ before the log-softmax (τ = 1 for greedy sampling), in float32; entropy is
H = logsumexp(z) − Σ_v softmax(z)_v z_v of the same temperature-scaled distribution
(verl `entropy_from_logits`, with verl's `logits.div_(temperature)`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from rl4llm import models


def _chunk_logprobs_entropy(model_cfg, params, hidden, targets, inv_temperature):
    """hidden [N, C, H], targets [N, C] -> (logp [N, C], entropy [N, C]) for one chunk."""
    logits = models.unembed(model_cfg, params, hidden).astype(jnp.float32) * inv_temperature  # [N, C, V]
    log_z = jax.nn.logsumexp(logits, axis=-1)  # [N, C]
    target_logits = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    probs = jax.nn.softmax(logits, axis=-1)
    entropy = log_z - jnp.sum(probs * logits, axis=-1)
    return target_logits - log_z, entropy


def completion_logprobs(
    model_cfg, params, tokens, attention_mask, completion_len: int, *, temperature: float = 1.0, chunk_size: int = 128
):
    """Log-probs and entropies of the last `completion_len` tokens of each sequence.

    Args:
        model_cfg: static `ModelConfig`.
        params: decoder params.
        tokens: [N, P+T] int32, prompt left-padded, completion right-padded.
        attention_mask: [N, P+T] 0/1; positions follow the mask (left padding does not shift RoPE).
        completion_len: T (static).
        temperature: rollout temperature τ (>0); logits are divided by it.
        chunk_size: completion positions projected to the vocabulary at once.

    Returns:
        (logp [N, T], entropy [N, T]) float32; values at masked positions are finite but meaningless.
    """
    n, length = tokens.shape
    prompt_len = length - completion_len
    positions = models.positions_from_mask(attention_mask)
    hidden, _ = models.forward(model_cfg, params, tokens, positions, attention_mask)
    hidden = hidden[:, prompt_len - 1 : length - 1]  # [N, T, H]: state that predicts each completion token
    targets = tokens[:, prompt_len:]  # [N, T]

    chunk = min(chunk_size, completion_len)
    num_chunks = -(-completion_len // chunk)
    pad = num_chunks * chunk - completion_len
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    hidden_chunks = hidden.reshape(n, num_chunks, chunk, -1).swapaxes(0, 1)  # [K, N, C, H]
    target_chunks = targets.reshape(n, num_chunks, chunk).swapaxes(0, 1)  # [K, N, C]

    one_chunk = jax.checkpoint(functools.partial(_chunk_logprobs_entropy, model_cfg))
    logp, entropy = jax.lax.map(
        lambda xs: one_chunk(params, xs[0], xs[1], 1.0 / temperature), (hidden_chunks, target_chunks)
    )
    unchunk = lambda x: x.swapaxes(0, 1).reshape(n, num_chunks * chunk)[:, :completion_len]
    return unchunk(logp), unchunk(entropy)
