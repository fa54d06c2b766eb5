"""Per-token log-probabilities and entropies of completions, computed in chunks.

For a sequence `tokens = [prompt (left-padded to P) | completion (T tokens)]`, the completion token
at position P+t is predicted by the hidden state at position P+t-1. We run the decoder once
(`models.forward`, hidden states after the final norm), then project to the vocabulary chunk by
chunk over the completion length and, optionally, over the vocabulary under `jax.checkpoint`
(`rl.entropy.chunked_logprobs_and_entropy`), so neither the forward nor the backward pass ever holds
the full [N, T, V] float32 logits (with vocabulary chunks, not even [N, chunk, V]).

Conventions (shared with the sampler, `rl4llm.sampling`): logits are divided by the rollout
temperature τ before the log-softmax (τ = 1 for greedy sampling), in float32; entropy is
H = logsumexp(z) − Σ_v softmax(z)_v z_v of the same temperature-scaled distribution
(verl `entropy_from_logits`, with verl's `logits.div_(temperature)`).
"""

from __future__ import annotations

from rl4llm import models
from rl4llm.rl import entropy as entropy_lib


def completion_logprobs(
    model_cfg,
    params,
    tokens,
    attention_mask,
    completion_len: int,
    *,
    temperature: float = 1.0,
    chunk_size: int = 128,
    vocab_chunk_size: int | None = None,
    min_p: float | None = None,
    prompt_group: int = 1,
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
        vocab_chunk_size: vocabulary entries projected at once (online logsumexp); None: all of them.
        min_p: if set, also the Lp-Reg min-p proxy log-probs (`rl.entropy.minp_proxy_logprobs`), no gradient.
        prompt_group: g > 1: rows in consecutive groups of g share their prompt, forwarded once
            (`models.completion_hidden`).

    Returns:
        (logp [N, T], entropy [N, T]) float32, plus proxy_logp [N, T] with `min_p`; values at masked
        positions are finite but meaningless.
    """
    hidden = models.completion_hidden(model_cfg, params, tokens, attention_mask, completion_len, prompt_group)
    return logprobs_from_hidden(
        model_cfg, params, hidden, tokens[:, tokens.shape[1] - completion_len :], temperature=temperature,
        chunk_size=chunk_size, vocab_chunk_size=vocab_chunk_size, min_p=min_p,
    )


def logprobs_from_hidden(
    model_cfg,
    params,
    hidden,  # [N, T, H] the states that predict the completion tokens (`models.completion_hidden`)
    targets,  # [N, T] int32 completion tokens
    *,
    temperature: float = 1.0,
    chunk_size: int = 128,
    vocab_chunk_size: int | None = None,
    min_p: float | None = None,
):
    """`completion_logprobs` from the completion hidden states (the same arguments and returns), for a caller that
    reads something else from the same forward pass (a shared-trunk value head,
    `train.companions.critic.shared_trunk_step`)."""
    return entropy_lib.chunked_logprobs_and_entropy(
        hidden,
        targets,
        unembedding(model_cfg, params),
        chunk_size=min(chunk_size, targets.shape[1]),
        vocab_chunk_size=vocab_chunk_size,
        temperature=temperature,
        min_p=min_p,
    )


def unembedding(model_cfg, params):  # [E, V]
    """The output projection W of `models.unembed` (logits = hidden @ W): the transposed input embedding
    when tied, else the lm head."""
    return params["embed"].T if model_cfg.tie_embeddings else params["lm_head"]
