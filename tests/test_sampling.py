"""Tests for rl4llm.sampling: greedy vs hand loop, determinism, stop tokens, top-k/top-p/min-p, log-prob
agreement with a full forward pass (the learner's recomputation), no recompilation, early exit."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rl4llm import config as config_lib
from rl4llm.models import (
    ModelConfig,
    apply,
    fork_rows,
    forward,
    init_cache,
    init_params,
    positions_from_mask,
    unembed,
)
from rl4llm.sampling import (
    SamplingConfig,
    bucket_length,
    categorical_by_blocks,
    entropy_temperature,
    filter_min_p,
    filter_top_k,
    filter_top_p,
    generate,
    pad_prompts,
    sample_tokens,
)

CFG = ModelConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                  intermediate_size=64, qk_norm=True)
PROMPTS = [[5, 9, 2], [11, 3, 7, 8, 20, 1], [4], [30, 31, 32, 33]]
T = 8
# Each distinct SamplingConfig compiles `generate` once; the tests share these.
STOP = tuple(range(0, CFG.vocab_size, 4))  # ~1/4 of the vocabulary
STOPPING = dict(temperature=0.8, top_k=20, top_p=0.95, stop_token_ids=STOP, pad_id=49)
TOP_K_1 = dict(temperature=0.6, top_k=1)
TINY_TOP_P = dict(temperature=1.3, top_p=1e-6)
MIN_P_ONE = dict(temperature=1.1, min_p=1.0)
ALL_FILTERS = dict(temperature=0.9, top_k=30, top_p=0.9, min_p=0.1)


@functools.cache
def params():
    """Perturbed init (every leaf, biases too) so next-token distributions are far from uniform."""
    flat, unravel = ravel_pytree(init_params(CFG, jax.random.key(0)))
    return unravel(flat + 0.5 * jax.random.normal(jax.random.key(1), flat.shape))


@functools.cache
def prompts():
    return pad_prompts(PROMPTS, pad_id=0, bucket_multiple=4)  # P = 8


def run(key: int = 0, **sampling):
    tokens, mask = prompts()
    return generate(CFG, params(), tokens, mask, jax.random.key(key),
                    SamplingConfig(**{"max_new_tokens": T, **sampling}))


@functools.partial(jax.jit, static_argnums=0)
def full_logits(cfg, params, tokens, mask):
    """The learner's view: one full forward pass over [B, L], positions from the mask."""
    return apply(cfg, params, tokens, positions_from_mask(mask), mask)[0]


def completion_logits(rollout):
    """Full-forward logits predicting each completion token: [N, T, V]."""
    tokens = jnp.concatenate([rollout.prompt_tokens, rollout.completion_tokens], axis=1)
    mask = jnp.concatenate([rollout.prompt_mask, rollout.completion_mask], axis=1)
    p = rollout.prompt_tokens.shape[1]
    return full_logits(CFG, params(), tokens, mask)[:, p - 1:-1]


def greedy_by_hand(prompt: list[int], steps: int) -> list[int]:
    """No cache, no left padding: re-run the full forward on the growing sequence, take the argmax.

    The sequence sits at the start of a fixed-width buffer (right padding, masked) so this compiles once.
    """
    width = max(map(len, PROMPTS)) + T
    seq = list(prompt)
    for _ in range(steps):
        tokens = jnp.asarray([seq + [0] * (width - len(seq))], jnp.int32)
        mask = jnp.arange(width)[None] < len(seq)
        logits = full_logits(CFG, params(), tokens, mask)
        seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
    return seq[len(prompt):]


def test_greedy_matches_hand_rolled_loop_of_full_forwards():
    rollout = run(temperature=0.0)
    for row, prompt in enumerate(PROMPTS):
        assert rollout.completion_tokens[row].tolist() == greedy_by_hand(prompt, T)
    assert np.all(rollout.completion_mask) and not np.any(rollout.finished)
    np.testing.assert_array_equal(rollout.lengths, T)
    assert int(rollout.num_decode_steps) == T - 1


def test_same_key_same_tokens_different_key_different():
    a, b, c = run(key=3), run(key=3), run(key=4)
    np.testing.assert_array_equal(a.completion_tokens, b.completion_tokens)
    np.testing.assert_array_equal(a.logprobs, b.logprobs)
    assert np.any(a.completion_tokens != c.completion_tokens)


@pytest.mark.parametrize("sampling", [dict(temperature=1.0), dict(temperature=0.0), STOPPING, TOP_K_1,
                                      TINY_TOP_P, ALL_FILTERS])
def test_sampler_logprobs_match_full_forward(sampling):
    """Sampler/learner agreement: logprobs == log_softmax(full_forward_logits / tau)[token]."""
    rollout = run(key=7, **sampling)
    tau = sampling["temperature"] or 1.0
    logp = jax.nn.log_softmax(completion_logits(rollout) / tau, axis=-1)
    expected = jnp.take_along_axis(logp, rollout.completion_tokens[..., None], axis=-1)[..., 0]
    expected = jnp.where(rollout.completion_mask, expected, 0.0)
    np.testing.assert_allclose(rollout.logprobs, expected, atol=1e-5, rtol=0)
    assert float(jnp.abs(rollout.logprobs).max()) > 0.1  # not vacuous


def test_stop_tokens_end_sequences_and_mask_includes_them():
    r = run(key=1, **STOPPING)
    tokens, mask = np.asarray(r.completion_tokens), np.asarray(r.completion_mask)
    assert r.finished.any()
    for row in range(len(PROMPTS)):
        is_stop = np.isin(tokens[row], STOP)
        if r.finished[row]:
            first = int(np.argmax(is_stop))
            assert mask[row].tolist() == [True] * (first + 1) + [False] * (T - first - 1)
            assert np.all(tokens[row, first + 1:] == 49) and np.all(r.logprobs[row, first + 1:] == 0)
        else:
            assert mask[row].all() and not is_stop.any()
        assert int(r.lengths[row]) == mask[row].sum()
    # The loop runs until everyone finished: one decode step per token after the first.
    expected_steps = int(r.lengths.max()) - 1 if r.finished.all() else T - 1
    assert int(r.num_decode_steps) == expected_steps


def test_decode_loop_stops_early_when_everyone_finished():
    r = run(temperature=1.0, stop_token_ids=tuple(range(CFG.vocab_size)))
    assert int(r.num_decode_steps) == 0
    assert r.finished.all() and (r.lengths == 1).all()
    assert not r.completion_mask[:, 1:].any()


def test_top_k_one_tiny_top_p_and_min_p_one_equal_greedy():
    greedy = run(temperature=0.0)
    top_k = run(key=5, **TOP_K_1)
    top_p = run(key=6, **TINY_TOP_P)
    min_p = run(key=7, **MIN_P_ONE)
    np.testing.assert_array_equal(top_k.completion_tokens, greedy.completion_tokens)
    np.testing.assert_array_equal(top_p.completion_tokens, greedy.completion_tokens)
    np.testing.assert_array_equal(min_p.completion_tokens, greedy.completion_tokens)
    # The reported log-prob uses the temperature and ignores the filter.
    assert np.all(top_k.logprobs < 0) and np.any(np.abs(top_k.logprobs - greedy.logprobs) > 1e-3)


def test_more_left_padding_does_not_change_greedy_generation():
    tokens, mask = pad_prompts(PROMPTS, pad_id=0, bucket_multiple=13)  # P = 13 instead of 8
    wide = generate(CFG, params(), tokens, mask, jax.random.key(0),
                    SamplingConfig(max_new_tokens=T, temperature=0.0))
    np.testing.assert_array_equal(wide.completion_tokens, run(temperature=0.0).completion_tokens)


def test_sample_tokens_follows_the_distribution():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    n = 20000
    keys = jax.random.split(jax.random.key(0), n)
    draw = jax.vmap(lambda k: sample_tokens(logits, k, SamplingConfig(max_new_tokens=1))[0][0])
    freq = np.bincount(np.asarray(draw(keys)), minlength=4) / n
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.015)


def _draw_frequencies(logits, n, seed=0):
    keys = jax.random.split(jax.random.key(seed), n)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: categorical_by_blocks(k, logits)[0]))(keys))
    return np.bincount(draws, minlength=logits.shape[1]) / n, draws


def test_categorical_by_blocks_follows_softmax_across_blocks_and_masks():
    # V = 70: blocks of 16 (the last one 6 real entries + 10 padding); block 2 (entries 32-47) masked whole, single
    # -inf entries elsewhere, and one dominant entry, so the block CDF and the in-block draws both matter.
    logits = np.asarray(jax.random.normal(jax.random.key(1), (70,))) * 1.5
    logits[32:48] = -np.inf
    logits[[3, 50, 69]] = -np.inf
    logits[20] = 4.0
    logits = jnp.asarray(logits)[None]
    n = 200_000
    freq, draws = _draw_frequencies(logits, n)
    p = np.asarray(jax.nn.softmax(logits[0]))
    assert draws.min() >= 0 and draws.max() < 70  # never the padding
    assert freq[~np.isfinite(np.asarray(logits[0]))].sum() == 0.0  # never a masked entry, nor the masked block
    # each frequency within 5 binomial standard deviations of softmax
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-12)


def test_categorical_by_blocks_single_block_and_ties():
    # V <= 64 is one block (plain Gumbel-max); equal logits are drawn equally often.
    freq, _ = _draw_frequencies(jnp.zeros((1, 5)), 50_000, seed=2)
    np.testing.assert_allclose(freq, 0.2, atol=0.01)
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    assert categorical_by_blocks(jax.random.key(3), logits) == jax.jit(categorical_by_blocks)(
        jax.random.key(3), logits)


def test_filters():
    logits = jnp.log(jnp.array([[0.05, 0.5, 0.15, 0.3]]))
    kept = lambda x: np.isfinite(np.asarray(x[0])).tolist()  # noqa: E731
    assert kept(filter_top_k(logits, 2)) == [False, True, False, True]
    assert kept(filter_top_p(logits, 0.4)) == [False, True, False, False]
    assert kept(filter_top_p(logits, 0.6)) == [False, True, False, True]
    assert kept(filter_top_p(logits, 0.9)) == [False, True, True, True]
    assert kept(filter_top_p(filter_top_k(logits, 1), 0.9)) == [False, True, False, False]


def hf_min_p_warper(scores: np.ndarray, min_p: float, min_tokens_to_keep: int = 1) -> np.ndarray:
    """numpy transcription of HF transformers' `MinPLogitsWarper.__call__` (generation/logits_process.py)."""
    shifted = np.exp(scores - scores.max(-1, keepdims=True))
    probs = shifted / shifted.sum(-1, keepdims=True)
    top_probs = probs.max(-1, keepdims=True)
    tokens_to_remove = probs < min_p * top_probs
    sorted_indices = np.argsort(-scores, axis=-1, kind="stable")
    sorted_to_remove = np.take_along_axis(tokens_to_remove, sorted_indices, axis=-1)
    sorted_to_remove[..., :min_tokens_to_keep] = False
    to_remove = np.zeros_like(tokens_to_remove)
    np.put_along_axis(to_remove, sorted_indices, sorted_to_remove, axis=-1)
    return np.where(to_remove, -np.inf, scores)


def test_min_p_hand_cases():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    kept = lambda x: np.isfinite(np.asarray(x[0])).tolist()  # noqa: E731
    assert kept(filter_min_p(logits, 0.4)) == [True, True, False, False]  # threshold 0.2
    assert kept(filter_min_p(logits, 0.2)) == [True, True, True, False]  # threshold 0.1
    assert kept(filter_min_p(logits, 1.0)) == [True, False, False, False]
    ties = jnp.log(jnp.array([[0.4, 0.4, 0.2]]))
    assert kept(filter_min_p(ties, 1.0)) == [True, True, False]  # tied maxima all pass
    # Kept logits are unchanged (not renormalised): the categorical draw renormalises.
    np.testing.assert_array_equal(filter_min_p(logits, 0.4)[0, :2], logits[0, :2])


def test_min_p_zero_is_the_identity_bit_for_bit():
    logits = 3.0 * jax.random.normal(jax.random.key(2), (6, CFG.vocab_size))
    logits = logits.at[:, :5].set(-jnp.inf)  # entries an earlier filter removed
    np.testing.assert_array_equal(filter_min_p(logits, 0.0), logits)
    key = jax.random.key(3)
    default = sample_tokens(logits, key, SamplingConfig(max_new_tokens=1, top_k=20))
    zero = sample_tokens(logits, key, SamplingConfig(max_new_tokens=1, top_k=20, min_p=0.0))
    np.testing.assert_array_equal(default[0], zero[0])
    np.testing.assert_array_equal(default[1], zero[1])


@pytest.mark.parametrize("min_p", [0.0, 0.01, 0.05, 0.3, 0.9, 1.0])
def test_min_p_matches_numpy_transcription_of_hf_warper_jit_and_eager(min_p):
    logits = 2.5 * jax.random.normal(jax.random.key(4), (16, CFG.vocab_size))
    logits = filter_top_k(logits, 40)  # some -inf inputs, as after top-k
    expected = hf_min_p_warper(np.asarray(logits, np.float64), min_p)
    eager = np.asarray(filter_min_p(logits, min_p))
    jitted = np.asarray(jax.jit(filter_min_p, static_argnums=1)(logits, min_p))
    np.testing.assert_array_equal(eager, jitted)
    np.testing.assert_array_equal(np.isfinite(eager), np.isfinite(expected))
    np.testing.assert_array_equal(eager[np.isfinite(eager)], np.asarray(logits)[np.isfinite(eager)])
    if 0.05 <= min_p <= 0.9:
        assert 0 < np.isfinite(eager).sum() < np.isfinite(np.asarray(logits)).sum()  # not vacuous


def draw_frequencies(logits: jax.Array, cfg: SamplingConfig, n: int = 20000) -> np.ndarray:
    keys = jax.random.split(jax.random.key(0), n)
    draws = jax.vmap(lambda k: sample_tokens(logits, k, cfg)[0][0])(keys)
    return np.bincount(np.asarray(draws), minlength=logits.shape[-1]) / n


def test_min_p_runs_after_temperature_top_k_and_top_p_as_in_hf():
    logits = jnp.log(jnp.array([[0.05, 0.5, 0.15, 0.3]]))
    # Temperature first: at tau = 0.5, p ∝ p0^2, ratios to the max [.01, 1, .09, .36]; min_p 0.2 keeps {1, 3}
    # (on the untempered distribution it would keep 2 as well: ratio 0.3).
    freq = draw_frequencies(logits, SamplingConfig(max_new_tokens=1, temperature=0.5, min_p=0.2))
    np.testing.assert_allclose(freq, [0, 0.25 / 0.34, 0, 0.09 / 0.34], atol=0.015)
    # top-p 0.6 keeps {1, 3} (mass before 3 is 0.5), then min-p 0.5 keeps both (0.3 / 0.5 = 0.6). vLLM v1's order
    # (min-p, then top-p over the renormalised {0.625, 0.375}) would keep token 1 alone.
    freq = draw_frequencies(logits, SamplingConfig(max_new_tokens=1, top_p=0.6, min_p=0.5))
    np.testing.assert_allclose(freq, [0, 0.625, 0, 0.375], atol=0.015)
    # top-k 3 keeps {1, 3, 2}; min-p 0.4 drops 2 (0.15 / 0.5 = 0.3).
    freq = draw_frequencies(logits, SamplingConfig(max_new_tokens=1, top_k=3, min_p=0.4))
    np.testing.assert_allclose(freq, [0, 0.625, 0, 0.375], atol=0.015)


def test_min_p_log_prob_is_of_the_unfiltered_tempered_distribution():
    logits = jnp.log(jnp.array([[0.05, 0.5, 0.15, 0.3]]))
    cfg = SamplingConfig(max_new_tokens=1, temperature=0.7, min_p=0.5)
    tokens, logprobs = sample_tokens(logits, jax.random.key(1), cfg)
    expected = jax.nn.log_softmax(logits / 0.7, axis=-1)[0, tokens[0]]
    np.testing.assert_allclose(logprobs[0], expected, rtol=1e-6)


def test_no_recompilation_for_same_shapes():
    run(key=0)
    size = generate._cache_size()
    flat, unravel = ravel_pytree(params())
    tokens, mask = prompts()
    generate(CFG, unravel(flat * 1.01), tokens, mask, jax.random.key(9), SamplingConfig(max_new_tokens=T))
    assert generate._cache_size() == size
    generate(CFG, params(), tokens[:, 4:], mask[:, 4:], jax.random.key(9), SamplingConfig(max_new_tokens=T))
    assert generate._cache_size() == size + 1  # the counter does see a new shape


def test_bucket_length_and_pad_prompts():
    assert [bucket_length(n, 8) for n in (1, 8, 9, 16)] == [8, 8, 16, 16]
    tokens, mask = pad_prompts([[1, 2], [3, 4, 5]], pad_id=9, bucket_multiple=4)
    np.testing.assert_array_equal(tokens, [[9, 9, 1, 2], [9, 3, 4, 5]])
    np.testing.assert_array_equal(mask, [[0, 0, 1, 1], [0, 1, 1, 1]])
    assert tokens.dtype == np.int32 and mask.dtype == bool
    with pytest.raises(ValueError):
        pad_prompts([[1], []], pad_id=0, bucket_multiple=4)


def test_sampling_config_validation():
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(max_new_tokens=4, top_p=0.0)
    with pytest.raises(ValueError, match="min_p"):
        SamplingConfig(max_new_tokens=4, min_p=1.5)
    with pytest.raises(ValueError, match="min_p"):
        SamplingConfig(max_new_tokens=4, min_p=-0.1)
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(max_new_tokens=4, temperature=-1.0)
    with pytest.raises(ValueError, match="stop_token_ids"):
        dataclasses.replace(SamplingConfig(max_new_tokens=4), stop_token_ids=[1])


def test_min_p_config_field_is_bounded_and_named():
    config = config_lib.defaults()
    config.sampling.min_p = 1.5
    with pytest.raises(config_lib.ConfigError, match=r"config.sampling.min_p=1.5: must lie in \[0.0, 1.0\]"):
        config_lib.parse(config)
    config.sampling.min_p = 0.05
    assert config_lib.parse(config).sampling.min_p == 0.05


@functools.partial(jax.jit, static_argnums=5)
def greedy_decode(params, cache, logits, positions, cursor, steps: int):
    """`steps` greedy tokens through the cache from next-token logits [N, V] at RoPE positions [N], slot cursor.
    Returns tokens [N, steps], the logits that chose them [N, steps, V], and the cache, logits, positions after."""
    tokens = [jnp.zeros((logits.shape[0], 0), jnp.int32)]
    chosen_from = [jnp.zeros((logits.shape[0], 0, logits.shape[1]))]
    for t in range(steps):
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        tokens.append(token[:, None])
        chosen_from.append(logits[:, None])
        hidden, cache = forward(CFG, params, token[:, None], positions[:, None], jnp.ones((len(token), 1), bool),
                                cache=cache, cache_index=cursor + t)
        logits, positions = unembed(CFG, params, hidden[:, 0]), positions + 1
    return jnp.concatenate(tokens, 1), jnp.concatenate(chosen_from, 1), cache, logits, positions


@functools.partial(jax.jit, static_argnums=3)
def prefill(params, tokens, mask, slots: int):
    """Left-padded prefill into a fresh cache of `slots` slots: (cache, next-token logits [N, V], positions [N])."""
    hidden, cache = forward(CFG, params, tokens, positions_from_mask(mask), mask,
                            cache=init_cache(CFG, tokens.shape[0], slots), cache_index=0)
    return cache, unembed(CFG, params, hidden[:, -1]), mask.sum(-1).astype(jnp.int32)


@pytest.mark.parametrize("decoded_before_fork", [0, 3])
def test_forked_cache_decodes_as_a_fresh_prefill_of_each_rows_prefix(decoded_before_fork):
    """Prefill B prompts, decode k tokens, fork to N rows (repeats, reordering, rows dropped), decode n more
    greedily == prefill each forked row's prefix (its prompt and k tokens) from scratch and decode n."""
    k, n = decoded_before_fork, 5
    tokens, mask = prompts()  # [4, 8], left-padded
    p = tokens.shape[1]
    slots = p + k + n
    source = jnp.asarray([2, 0, 0, 3, 2, 2, 0], jnp.int32)  # row 1 dropped, others repeated
    cache, logits, positions = prefill(params(), jnp.asarray(tokens), jnp.asarray(mask), slots)
    decoded, _, cache, logits, positions = greedy_decode(params(), cache, logits, positions, p, k)
    forked = fork_rows((cache, logits, positions), source)
    got_tokens, got_logits, *_ = greedy_decode(params(), *forked, p + k, n)

    prefix = np.concatenate([np.asarray(tokens), np.asarray(decoded)], 1)[np.asarray(source)]  # [N, P + k]
    prefix_mask = np.concatenate([np.asarray(mask), np.ones((len(tokens), k), bool)], 1)[np.asarray(source)]
    ref_cache, ref_logits, ref_positions = prefill(params(), jnp.asarray(prefix), jnp.asarray(prefix_mask), slots)
    want_tokens, want_logits, *_ = greedy_decode(params(), ref_cache, ref_logits, ref_positions, p + k, n)
    np.testing.assert_array_equal(got_tokens, want_tokens)
    np.testing.assert_allclose(got_logits, want_logits, atol=1e-4, rtol=1e-5)
    assert len(set(map(tuple, np.asarray(got_tokens).tolist()))) == 3  # the three prompts continue differently


def test_shared_prefix_prefill_generates_as_the_repeated_prompts():
    """generate(B distinct prompts, prompt_index [N]) == generate(prompts repeated to N rows): the same tokens and
    log-probs within float rounding (the [B, P] and [N, P] prefills round differently on XLA:CPU; not bit-equal)."""
    tokens, mask = prompts()
    index = np.repeat(np.arange(len(PROMPTS)), 3).astype(np.int32)  # G = 3
    cfg = SamplingConfig(max_new_tokens=T, **STOPPING)
    repeated = generate(CFG, params(), tokens[index], mask[index], jax.random.key(11), cfg)
    shared = generate(CFG, params(), tokens, mask, jax.random.key(11), cfg, jnp.asarray(index))
    np.testing.assert_array_equal(shared.prompt_tokens, tokens[index])
    np.testing.assert_array_equal(shared.prompt_mask, mask[index])
    np.testing.assert_array_equal(shared.completion_tokens, repeated.completion_tokens)
    np.testing.assert_array_equal(shared.completion_mask, repeated.completion_mask)
    np.testing.assert_allclose(shared.logprobs, repeated.logprobs, atol=1e-5, rtol=0)
    assert len(set(map(tuple, np.asarray(shared.completion_tokens).tolist()))) > len(PROMPTS)  # rows differ


def hapo_official_temperature(logits: np.ndarray, temperature: float, stats, tau: float, eps: float = 1e-6):
    """numpy transcription of starriver030515/HAPO `compute_entropy_based_temperature` (vllm/v1/sample/sampler.py)."""
    median, std, scale_pos, scale_neg = stats
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    entropy = -(np.exp(log_probs) * log_probs).sum(-1)
    entropy = np.log(np.maximum(entropy, eps))
    h = (entropy - median) / (std + eps)
    h_hat = np.clip(np.where(h > 0, h * scale_pos, np.where(h <= 0, h * scale_neg, 0.0)), -1, 1)
    return temperature * (1.0 + h_hat * tau)


HAPO_STATS = (0.5, 0.3, 0.7, 0.4)  # median, std of the log-entropies, scale_pos, scale_neg


def test_entropy_temperature_matches_the_official_formula_jit_and_eager():
    logits = jax.random.normal(jax.random.key(5), (64, CFG.vocab_size)) * jnp.linspace(0.1, 8.0, 64)[:, None]
    stats = jnp.asarray(HAPO_STATS)
    eager = entropy_temperature(logits, 0.9, stats, 0.05)
    jitted = jax.jit(entropy_temperature, static_argnums=(1, 3))(logits, 0.9, stats, 0.05)
    np.testing.assert_allclose(eager, jitted, rtol=1e-6)  # XLA fuses the jitted one: an ulp apart
    expected = hapo_official_temperature(np.asarray(logits, np.float64), 0.9, HAPO_STATS, 0.05)
    np.testing.assert_allclose(eager, expected, rtol=1e-5)
    assert float(eager.min()) == pytest.approx(0.9 * 0.95) and float(eager.max()) == pytest.approx(0.9 * 1.05)
    assert len(np.unique(np.round(np.asarray(eager), 6))) > 10  # the unclipped middle is used too


def test_entropy_temperature_hand_cases():
    stats = jnp.asarray([0.0, 1.0, 1.0, 1.0])
    uniform = jnp.zeros((1, 4))  # H = log 4, e = log(log 4) = 0.3266 > 0: a bit hotter
    np.testing.assert_allclose(entropy_temperature(uniform, 1.0, stats, 0.1), [1.0 + 0.1 * np.log(np.log(4))],
                               rtol=1e-5)
    peaked = jnp.asarray([[30.0, 0.0, 0.0, 0.0]])  # H ~ 3e-12, e = log(1e-6): clipped to -1, cooler by tau
    np.testing.assert_allclose(entropy_temperature(peaked, 2.0, stats, 0.1), [2.0 * 0.9], rtol=1e-6)
    np.testing.assert_array_equal(entropy_temperature(uniform, 1.3, stats, 0.0), np.float32([1.3]))  # tau = 0: the base


def test_per_row_temperature_input():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]] * 2))
    cfg = SamplingConfig(max_new_tokens=1, temperature=0.7, top_k=3)
    key = jax.random.key(3)
    same = sample_tokens(logits, key, cfg, jnp.full((2,), 0.7))
    default_ = sample_tokens(logits, key, cfg)
    np.testing.assert_array_equal(same[0], default_[0])  # the base temperature per row is the scalar, bit for bit
    np.testing.assert_array_equal(same[1], default_[1])
    n = 20000
    keys = jax.random.split(jax.random.key(0), n)
    rows = jax.vmap(lambda k: sample_tokens(logits, k, SamplingConfig(max_new_tokens=1),
                                            jnp.asarray([0.5, 2.0]))[0])(keys)  # [n, 2]
    for row, t in enumerate((0.5, 2.0)):
        want = np.asarray(jax.nn.softmax(logits[row] / t))
        np.testing.assert_allclose(np.bincount(np.asarray(rows[:, row]), minlength=4) / n, want, atol=0.015)
    tokens, logprobs = sample_tokens(logits, key, cfg, jnp.asarray([0.5, 2.0]))
    for row, t in enumerate((0.5, 2.0)):
        assert float(logprobs[row]) == pytest.approx(float(jax.nn.log_softmax(logits[row] / t)[tokens[row]]), rel=1e-6)


def test_generate_with_hapo_temperature_reports_each_tokens_temperature_and_log_prob():
    tokens, mask = prompts()
    cfg = SamplingConfig(max_new_tokens=T, temperature=1.0, temperature_tau=0.3, stop_token_ids=STOP, pad_id=49)
    rollout = generate(CFG, params(), tokens, mask, jax.random.key(8), cfg, entropy_stats=jnp.asarray(HAPO_STATS))
    temps = np.asarray(rollout.temperatures)
    on = np.asarray(rollout.completion_mask)
    assert np.all(temps[~on] == 0) and np.all((temps[on] >= 0.7 - 1e-6) & (temps[on] <= 1.3 + 1e-6))
    assert temps[on].std() > 0.01  # the temperature does vary token to token
    logp = jax.nn.log_softmax(completion_logits(rollout) / jnp.where(on, temps, 1.0)[..., None], axis=-1)
    expected = jnp.where(on, jnp.take_along_axis(logp, rollout.completion_tokens[..., None], axis=-1)[..., 0], 0.0)
    # float32 rounding of the two temperature divisions grows with |log-prob| (1e-5 at -4.8, measured)
    np.testing.assert_allclose(rollout.logprobs, expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="entropy_stats"):
        generate(CFG, params(), tokens, mask, jax.random.key(8), cfg)
    with pytest.raises(ValueError, match="temperature_tau"):
        SamplingConfig(max_new_tokens=4, temperature=0.0, temperature_tau=0.1)


def test_sampler_weights_in_the_compute_dtype_draw_the_same_tokens():
    """The copy a colocated / disaggregated sampler holds (`parallel.layout.sampler_weights`): every matrix (qkv
    biases of shape [heads, head_dim] too) in the bfloat16 compute dtype, norm scales as they are. The decoder casts
    each matrix where it reads it, so the sampler draws the same tokens with the same log-probs as from the float32
    params, from half their matrix bytes."""
    from rl4llm.parallel.layout import sampler_weights

    cfg = dataclasses.replace(CFG, dtype="bfloat16", qkv_bias=True, tie_embeddings=False)
    flat, unravel = ravel_pytree(init_params(cfg, jax.random.key(0)))
    weights = unravel(flat + 0.5 * jax.random.normal(jax.random.key(1), flat.shape))
    copy = sampler_weights(weights, cfg)
    leaves = jax.tree_util.tree_leaves_with_path(copy)
    assert {x.dtype for _, x in leaves if x.ndim >= 2} == {jnp.dtype(jnp.bfloat16)}
    scales = [x for p, x in leaves if x.ndim == 1]
    assert scales and all(x.dtype == jnp.float32 for x in scales)  # RMSNorm scales (read in float32) untouched
    assert any("bias" in jax.tree_util.keystr(p) and x.dtype == jnp.bfloat16 for p, x in leaves)
    matrices = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree) if x.ndim >= 2)  # noqa: E731
    assert 2 * matrices(copy) == matrices(weights)
    tokens, mask = prompts()
    sampling = SamplingConfig(max_new_tokens=T, temperature=1.0)
    a = generate(cfg, weights, tokens, mask, jax.random.key(3), sampling)
    b = generate(cfg, copy, tokens, mask, jax.random.key(3), sampling)
    np.testing.assert_array_equal(a.completion_tokens, b.completion_tokens)
    np.testing.assert_array_equal(a.logprobs, b.logprobs)
    assert len(np.unique(np.asarray(a.completion_tokens))) > 5  # a real draw, not one repeated token
