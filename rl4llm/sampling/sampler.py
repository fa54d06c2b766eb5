"""Autoregressive sampler: jitted prefill into a static KV cache, then a `lax.while_loop` decode.

Log-prob convention (the learner recomputes exactly this):
    logprobs[n, t] = log_softmax(logits_t / tau)[token_t],  tau = temperature if temperature > 0 else 1
    (with HAPO's adaptive temperature, `temperature_tau` > 0: tau = Rollout.temperatures[n, t], the token's own),
computed in float32 on the UNFILTERED distribution (top-k / top-p / min-p only restrict which token is
drawn, they do not change the reported log-prob), and 0 where completion_mask is 0.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from rl4llm.models import (
    KVCache,
    ModelConfig,
    Params,
    fork_rows,
    forward,
    init_cache,
    positions_from_mask,
    unembed,
)


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
    """How to sample. Frozen (hashable): a static argument of the jitted `generate`.

    Attributes:
      max_new_tokens: T, completion length budget (static shape of the outputs).
      temperature: logits are divided by it; 0.0 = greedy (argmax).
      top_k: keep the k most likely tokens; 0 = off.
      top_p: nucleus, keep the smallest prefix of tokens (by probability) whose mass reaches top_p;
        1.0 = off. Applied after top-k, to the renormalised top-k distribution.
      min_p: keep token v iff p(v) >= min_p * max_u p(u), p the temperature-scaled distribution left by
        top-k / top-p (`filter_min_p`); 0.0 = off.
      temperature_tau: HAPO's adaptive temperature (`entropy_temperature`): each token is drawn at
        temperature * (1 + tau * ĥ), ĥ in [-1, 1] its logits' entropy score; 0.0 = off (needs `entropy_stats`).
      stop_token_ids: a sequence finishes when it emits one of these (included in its completion);
        empty = always generate T tokens.
      pad_id: token written after a sequence finished.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    temperature_tau: float = 0.0
    stop_token_ids: tuple[int, ...] = ()
    pad_id: int = 0

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig.max_new_tokens must be >= 1, got {self.max_new_tokens}.")
        if self.temperature < 0:
            raise ValueError(f"SamplingConfig.temperature must be >= 0 (0 = greedy), got {self.temperature}.")
        if self.top_k < 0:
            raise ValueError(f"SamplingConfig.top_k must be >= 0 (0 = off), got {self.top_k}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1] (1 = off), got {self.top_p}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"SamplingConfig.min_p must be in [0, 1] (0 = off), got {self.min_p}.")
        if not 0.0 <= self.temperature_tau < 1.0:
            raise ValueError(f"SamplingConfig.temperature_tau must be in [0, 1) (0 = off), got {self.temperature_tau}.")
        if self.temperature_tau > 0 and self.temperature == 0:
            raise ValueError("SamplingConfig.temperature_tau > 0 adapts a sampling temperature; greedy has none.")
        if not isinstance(self.stop_token_ids, tuple):
            raise ValueError("SamplingConfig.stop_token_ids must be a tuple of ints (hashable), "
                             f"got {type(self.stop_token_ids).__name__}.")


class Rollout(flax.struct.PyTreeNode):
    """Prompts and sampled completions.

    prompt_tokens:     [N, P] int32, left-padded with pad_id.
    prompt_mask:       [N, P] bool.
    completion_tokens: [N, T] int32, pad_id after the stop token.
    completion_mask:   [N, T] bool, 1 on every generated token up to AND including the stop token.
    logprobs:          [N, T] float32, sampler log-probs (module docstring convention), 0 where mask is 0.
    lengths:           [N] int32, completion_mask.sum(-1).
    finished:          [N] bool, True if a stop token was emitted ("stop"), False if cut at T ("length").
    num_decode_steps:  [] int32, incremental decode forward passes run (<= T - 1; fewer if all stopped).
    temperatures:      [N, T] float32, each token's own temperature (HAPO adaptive temperature, temperature_tau
                       > 0; 0 where mask is 0), or None: every token drawn at SamplingConfig.temperature.
    """

    prompt_tokens: jax.Array
    prompt_mask: jax.Array
    completion_tokens: jax.Array
    completion_mask: jax.Array
    logprobs: jax.Array
    lengths: jax.Array
    finished: jax.Array
    num_decode_steps: jax.Array
    temperatures: jax.Array | None = None


def bucket_length(n: int, multiple: int) -> int:
    """n rounded up to a multiple of `multiple` (so a run compiles only a handful of prompt shapes)."""
    if multiple < 1:
        raise ValueError(f"bucket_length: multiple must be >= 1, got {multiple}.")
    return math.ceil(n / multiple) * multiple


def pad_prompts(prompts: list[list[int]], pad_id: int, bucket_multiple: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Left-pads token lists to P = bucket_length(longest, bucket_multiple).

    Returns tokens [N, P] int32 and mask [N, P] bool (True on real tokens), as host numpy arrays.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("pad_prompts: need at least one prompt and every prompt needs >= 1 token.")
    width = bucket_length(max(len(p) for p in prompts), bucket_multiple)
    tokens = np.full((len(prompts), width), pad_id, np.int32)
    mask = np.zeros((len(prompts), width), bool)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt):] = prompt
        mask[row, width - len(prompt):] = True
    return tokens, mask


def filter_top_k(logits: jax.Array, k: int) -> jax.Array:
    """Logits below the k-th largest set to -inf (ties with the k-th are kept). [N, V] -> [N, V]."""
    kth = jax.lax.top_k(logits, k)[0][:, -1:]  # [N, 1]
    return jnp.where(logits < kth, -jnp.inf, logits)


def filter_top_p(logits: jax.Array, p: float) -> jax.Array:
    """Nucleus filter: keep the most likely tokens while the mass BEFORE them is < p (>= 1 kept).

    logits: [N, V] (may hold -inf). Returns [N, V] with dropped tokens at -inf.
    """
    sorted_logits = jnp.sort(logits, axis=-1)[:, ::-1]  # [N, V] descending
    probs = jax.nn.softmax(sorted_logits, axis=-1)
    mass_before = jnp.cumsum(probs, axis=-1) - probs
    keep = mass_before < p
    threshold = jnp.min(jnp.where(keep, sorted_logits, jnp.inf), axis=-1, keepdims=True)  # [N, 1]
    return jnp.where(logits < threshold, -jnp.inf, logits)


def filter_min_p(logits: jax.Array, min_p: float) -> jax.Array:
    """Min-p filter (Nguyen et al. 2024, "Turning Up the Heat: Min-p Sampling for Creative and Coherent LLM
    Outputs"): keep v iff p(v) >= min_p * max_u p(u), p = softmax(logits); the others go to -inf.

    logits: [N, V] (may hold -inf). Returns [N, V]. As HF transformers' `MinPLogitsWarper` (probabilities, strict
    `<` removes). Its min_tokens_to_keep=1 needs no code here: with min_p <= 1 the most likely token always
    passes. min_p = 0 keeps every entry (the logits come back unchanged).
    """
    probs = jax.nn.softmax(logits, axis=-1)  # [N, V]
    threshold = min_p * jnp.max(probs, axis=-1, keepdims=True)  # [N, 1]
    return jnp.where(probs < threshold, -jnp.inf, logits)


def entropy_temperature(logits: jax.Array, temperature: float, entropy_stats: jax.Array, tau: float) -> jax.Array:
    """HAPO adaptive sampling temperature (Liu et al. 2025, "From Uniform to Heterogeneous: Tailoring Policy
    Optimization to Every Token's Nature"; starriver030515/HAPO `vllm/v1/sample/sampler.py`,
    `compute_entropy_based_temperature`), per row of next-token logits [N, V]:

        H = entropy(softmax(logits)) (before the temperature),  e = log(max(H, 1e-6)),
        h = (e - median) / (std + 1e-6),  ĥ = clip(h * scale_pos if h > 0 else h * scale_neg, -1, 1),
        T = temperature * (1 + ĥ * tau)

    entropy_stats = (median, std, scale_pos, scale_neg) [4] of the previous step's log-entropies
    (`rl.entropy.normalized_entropy_stats`: its centre, the official code's "median", is the pivot quantile; the run
    keeps them in `train.companions.adaptive_temperature`). Returns T [N] float32, in temperature * [1 - tau,
    1 + tau]: high-entropy positions are sampled hotter, confident ones cooler.
    """
    logits = logits.astype(jnp.float32)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)  # [N]
    median, std, scale_pos, scale_neg = entropy_stats[0], entropy_stats[1], entropy_stats[2], entropy_stats[3]
    h = (jnp.log(jnp.maximum(entropy, 1e-6)) - median) / (std + 1e-6)
    h_hat = jnp.clip(jnp.where(h > 0, h * scale_pos, h * scale_neg), -1.0, 1.0)
    return temperature * (1.0 + h_hat * tau)


def categorical_by_blocks(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One index per row drawn from softmax(logits) [N, V] (entries may be -inf), as `jax.random.categorical`
    draws it, with B + 1 random numbers per row instead of V.

    The vocabulary is cut into K = ceil(V / B) blocks of B = sqrt(V) rounded up to a multiple of 8 (padding is -inf).
    A block is drawn by inverse CDF from the block masses m_k = sum_{v in k} exp(logit_v - max): block k for the
    uniform u in (0, 1) with cdf_{k-1} < u * cdf_K <= cdf_k; then a token of that block by Gumbel-max over its B
    logits. P(v) = m_k / sum m * exp(logit_v - max) / m_k = softmax(logits)_v: the same distribution, not the same
    draws for a key. The block CDF is float32, so a block whose mass is below the rounding of the running sum
    (about 6e-8 of the total) is never drawn; within a block the draw is exact. A block with zero mass is never
    drawn (u > 0 and the comparison is strict on the left).

    On the CPU, Gumbel-max's V threefry hashes and logarithms per row were the sampler's largest cost after the
    matmuls: 0.9 ms of a decode step for 64 rows x 1024 tokens, 5.6 ms for 64 x 8192; by blocks 0.14 and 0.45 ms.
    """
    rows, vocab = logits.shape
    block = 8 * math.ceil(math.sqrt(vocab) / 8)
    blocks = -(-vocab // block)
    padded = jnp.pad(logits, ((0, 0), (0, blocks * block - vocab)), constant_values=-jnp.inf)
    padded = padded.reshape(rows, blocks, block)
    mass = jnp.sum(jnp.exp(padded - jnp.max(padded, axis=(1, 2), keepdims=True)), axis=-1)  # [N, K]
    cdf = jnp.cumsum(mass, axis=-1)
    block_key, token_key = jax.random.split(key)
    u = jax.random.uniform(block_key, (rows, 1), minval=jnp.finfo(jnp.float32).tiny)
    chosen = jnp.sum(cdf < u * cdf[:, -1:], axis=-1)  # [N]
    within = jnp.take_along_axis(padded, chosen[:, None, None], axis=1)[:, 0]  # [N, B]
    return chosen * block + jax.random.categorical(token_key, within, axis=-1)


def sample_tokens(logits: jax.Array, key: jax.Array, cfg: SamplingConfig, temperature: jax.Array | None = None
                  ) -> tuple[jax.Array, jax.Array]:
    """Draws one token per row and its sampler log-prob.

    The filters run in HF transformers' order (`GenerationMixin._get_logits_processor`): temperature, top-k,
    top-p, min-p; each on what the previous left. (vLLM v1 applies min-p before top-k/top-p; the kept sets differ
    only when top-p is on, as min-p's ratio test does not depend on renormalisation.)
    logits: [N, V] float32; temperature: None (cfg.temperature for every row) or [N] float32 > 0, each row's own
    (ignored when greedy, cfg.temperature == 0). Returns tokens [N] int32 and logprobs [N] float32, where
    logprob = log_softmax(logits / tau)[token], tau = the row's temperature or 1 when greedy (unfiltered).
    """
    tau = cfg.temperature if cfg.temperature > 0 else 1.0
    if temperature is not None and cfg.temperature > 0:
        tau = temperature.astype(jnp.float32)[:, None]  # [N, 1]
    scaled = logits.astype(jnp.float32) / tau
    log_probs = jax.nn.log_softmax(scaled, axis=-1)  # [N, V]
    if cfg.temperature == 0:
        tokens = jnp.argmax(scaled, axis=-1)
    else:
        filtered = scaled
        if cfg.top_k > 0:
            filtered = filter_top_k(filtered, min(cfg.top_k, logits.shape[-1]))
        if cfg.top_p < 1.0:
            filtered = filter_top_p(filtered, cfg.top_p)
        if cfg.min_p > 0.0:
            filtered = filter_min_p(filtered, cfg.min_p)
        tokens = categorical_by_blocks(key, filtered)
    tokens = tokens.astype(jnp.int32)
    return tokens, jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]


def row_keys(key: jax.Array, row_offset: jax.Array | int, num_rows: int) -> jax.Array:
    """Each row's own PRNG key [N]: fold_in(key, row_offset + n). A row's draws depend on its index in the whole
    batch only, never on how many rows share its call (`sample_rows`)."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, row_offset + jnp.arange(num_rows, dtype=jnp.int32))


def sample_rows(logits: jax.Array, keys: jax.Array, step: jax.Array | int, cfg: SamplingConfig,
                temperature: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """`sample_tokens` row by row, row n drawing with key fold_in(keys[n], step): logits [N, V], keys [N] (`row_keys`),
    temperature None or [N]. Rows [a, b) of a batch give what the same rows give in any other batch, so a
    rollout generated in chunks of rows (each with its `row_offset`) equals the one-call rollout."""
    def one(row_key, row_logits, row_temperature):
        return sample_tokens(row_logits[None], jax.random.fold_in(row_key, step), cfg,
                             None if row_temperature is None else row_temperature[None])

    tokens, logprobs = jax.vmap(one)(keys, logits, temperature)
    return tokens[:, 0], logprobs[:, 0]


class _DecodeState(flax.struct.PyTreeNode):
    step: jax.Array        # [] int32, index of the token to sample next
    cache: KVCache
    logits: jax.Array      # [N, V] logits for token `step`
    tokens: jax.Array      # [N, T] int32
    logprobs: jax.Array    # [N, T] float32
    emitted: jax.Array     # [N, T] bool
    done: jax.Array        # [N] bool
    temperatures: jax.Array | None = None  # [N, T] float32 with temperature_tau > 0, else None


@functools.partial(jax.jit, static_argnames=("model_cfg", "sampling_cfg"))
def generate(model_cfg: ModelConfig, params: Params, prompt_tokens: jax.Array,
             prompt_mask: jax.Array, key: jax.Array, sampling_cfg: SamplingConfig,
             prompt_index: jax.Array | None = None, entropy_stats: jax.Array | None = None,
             row_offset: jax.Array | int = 0) -> Rollout:
    """Samples T = sampling_cfg.max_new_tokens tokens after each (left-padded) prompt.

    prompt_tokens: [B, P] int32; prompt_mask: [B, P] bool/0-1. Prefill writes the prompts to a KV cache
    of P + T slots; RoPE positions come from the mask, so padding does not shift them. prompt_index: None (the
    N = B rows are the prompts), or [N] int32 in [0, B): row n continues prompt prompt_index[n], whose prefill
    (cache row and next-token logits) is computed once and forked to its rows (`fork_rows`), so a group of G
    completions of one prompt pays for one prefill instead of G. Token t of row n is drawn with key
    fold_in(fold_in(key, row_offset + n), t) (`row_keys`, `sample_rows`): row_offset (traced: no recompile) is the
    index of this call's first row in the whole rollout, so generating a batch in chunks of rows, each with its
    offset, gives the rows of one call (`train.completions.sample_completions`). The decode loop stops once every row
    has emitted a stop token or T tokens exist. entropy_stats: HAPO's
    (median, std, scale_pos, scale_neg) [4] (`rl.entropy.normalized_entropy_stats`), required with sampling_cfg.temperature_tau > 0 (`entropy_temperature`
    sets each token's temperature; Rollout.temperatures records them). Jitted with both configs static: the same
    shapes and configs never recompile. Log-probs follow the module docstring convention.
    """
    cfg = sampling_cfg
    if (cfg.temperature_tau > 0) != (entropy_stats is not None):
        raise ValueError("generate: pass entropy_stats exactly when sampling_cfg.temperature_tau > 0 "
                         f"(temperature_tau={cfg.temperature_tau}).")
    p = prompt_tokens.shape[1]
    t_max = cfg.max_new_tokens
    prompt_mask = prompt_mask.astype(bool)
    stop_ids = jnp.asarray(cfg.stop_token_ids, jnp.int32)

    hidden, cache = forward(model_cfg, params, prompt_tokens, positions_from_mask(prompt_mask),
                            prompt_mask, cache=init_cache(model_cfg, prompt_tokens.shape[0], p + t_max),
                            cache_index=0)
    last_real = p - 1 - jnp.argmax(prompt_mask[:, ::-1], axis=-1)  # [B]
    last_hidden = jnp.take_along_axis(hidden, last_real[:, None, None], axis=1)[:, 0]  # [B, E]
    logits = unembed(model_cfg, params, last_hidden)  # [B, V]
    if prompt_index is not None:
        prompt_tokens, prompt_mask, cache, logits = fork_rows((prompt_tokens, prompt_mask, cache, logits),
                                                              prompt_index)
    n = prompt_tokens.shape[0]
    prompt_len = prompt_mask.sum(-1).astype(jnp.int32)  # [N]
    keys = row_keys(key, row_offset, n)

    def sample(state: _DecodeState) -> _DecodeState:
        """Draws token `step` from `state.logits` and records it."""
        temperature, temperatures = None, None
        if entropy_stats is not None:
            temperature = entropy_temperature(state.logits, cfg.temperature, entropy_stats, cfg.temperature_tau)
        token, logprob = sample_rows(state.logits, keys, state.step, cfg, temperature)
        live = ~state.done
        token = jnp.where(live, token, cfg.pad_id)
        done = state.done | (live & jnp.isin(token, stop_ids))
        if temperature is not None:
            temperatures = state.temperatures.at[:, state.step].set(jnp.where(live, temperature, 0.0))
        return state.replace(
            temperatures=temperatures,
            tokens=state.tokens.at[:, state.step].set(token),
            logprobs=state.logprobs.at[:, state.step].set(jnp.where(live, logprob, 0.0)),
            emitted=state.emitted.at[:, state.step].set(live),
            done=done,
            step=state.step + 1)

    def decode(state: _DecodeState) -> _DecodeState:
        """Feeds token step-1 through the cache, then samples token `step`."""
        prev = state.tokens[:, state.step - 1][:, None]  # [N, 1]
        hidden, cache = forward(model_cfg, params, prev, (prompt_len + state.step - 1)[:, None],
                                jnp.ones((n, 1), bool), cache=state.cache,
                                cache_index=p + state.step - 1)
        return sample(state.replace(cache=cache, logits=unembed(model_cfg, params, hidden[:, 0])))

    def keep_going(state: _DecodeState) -> jax.Array:
        return (state.step < t_max) & ~jnp.all(state.done)

    state = sample(_DecodeState(
        step=jnp.int32(0), cache=cache, logits=logits,
        tokens=jnp.full((n, t_max), cfg.pad_id, jnp.int32),
        logprobs=jnp.zeros((n, t_max), jnp.float32),
        emitted=jnp.zeros((n, t_max), bool), done=jnp.zeros((n,), bool),
        temperatures=None if entropy_stats is None else jnp.zeros((n, t_max), jnp.float32)))
    state = jax.lax.while_loop(keep_going, decode, state)
    return Rollout(
        prompt_tokens=prompt_tokens.astype(jnp.int32), prompt_mask=prompt_mask,
        completion_tokens=state.tokens, completion_mask=state.emitted, logprobs=state.logprobs,
        lengths=state.emitted.sum(-1).astype(jnp.int32), finished=state.done,
        num_decode_steps=state.step - 1, temperatures=state.temperatures)
