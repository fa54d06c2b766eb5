"""Host-side batch assembly: text -> padded token arrays with static, bucketed shapes.

A sequence is `[prompt | completion]`: the prompt is `tokenizer.encode_prompt(text)` (`[bos] + tokens` for
the task tokenizers, the chat template's user turn for a HF tokenizer that has one), left-padded to a multiple
of the prompt bucket; the completion is right-padded to `max_new_tokens`. Shapes depend only on
the bucket, so a run compiles a handful of programs, not one per step.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from rl4llm import sampling


def encode_prompts(tokenizer, prompts: Sequence[str], bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded prompt tokens [N, P] and mask [N, P] (P = bucketed longest prompt)."""
    ids = [tokenizer.encode_prompt(p) for p in prompts]
    return sampling.pad_prompts(ids, tokenizer.pad_id, bucket)


def encode_completions(tokenizer, completions: Sequence[str], length: int, *,
                       truncate: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded `tokens + [eos]` [N, length] and mask [N, length]; one that does not fit raises, or with
    `truncate` keeps its first `length` tokens (the eos is cut off with the rest: OpenRLHF's head truncation)."""
    tokens = np.full((len(completions), length), tokenizer.pad_id, np.int32)
    mask = np.zeros((len(completions), length), np.float32)
    for i, text in enumerate(completions):
        ids = tokenizer.encode(text) + [tokenizer.eos_id]
        if truncate:
            ids = ids[:length]
        elif len(ids) > length:
            raise ValueError(
                f"completion {text!r} has {len(ids)} tokens (with eos) > max_new_tokens={length}; "
                "raise config.sampling.max_new_tokens"
            )
        tokens[i, : len(ids)] = ids
        mask[i, : len(ids)] = 1.0
    return tokens, mask


def decode_completions(tokenizer, tokens: np.ndarray, mask: np.ndarray) -> list[str]:
    """Text of each completion's policy tokens (the stop token decodes to nothing)."""
    return [tokenizer.decode(row[m > 0].tolist()) for row, m in zip(tokens, mask)]


def pad_training_sequences(rows: Sequence[tuple[Sequence[int], Sequence[float]]], pad_id: int, bucket: int):
    """Whole sequences for a teacher-forced loss (SFT): `rows` of (token ids, per-token loss weight), right-padded
    to L = the longest rounded up to a multiple of `bucket`. Returns tokens [N, L] int32, attention mask [N, L]
    int32 and the loss weights of the tokens after the first [N, L-1] float32: the positions that
    `logprobs.completion_logprobs(..., completion_len=L - 1)` scores."""
    width = sampling.bucket_length(max(len(ids) for ids, _ in rows), bucket)
    tokens = np.full((len(rows), width), pad_id, np.int32)
    attention = np.zeros((len(rows), width), np.int32)
    loss = np.zeros((len(rows), width), np.float32)
    for i, (ids, weights) in enumerate(rows):
        tokens[i, :len(ids)], attention[i, :len(ids)], loss[i, :len(ids)] = ids, 1, weights
    return jnp.asarray(tokens), jnp.asarray(attention), jnp.asarray(loss[:, 1:])


def join_sequences(prompt_tokens, prompt_mask, completion_tokens, completion_mask):
    """[prompt | completion] tokens [N, P+T] int32 and attention mask [N, P+T] int32."""
    tokens = jnp.concatenate([prompt_tokens, completion_tokens], axis=1).astype(jnp.int32)
    attention = jnp.concatenate([prompt_mask, completion_mask], axis=1).astype(jnp.int32)
    return tokens, attention
