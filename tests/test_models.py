"""Tests for rl4llm.models: KV cache vs full forward, causality, padding, RoPE, param counts, axes,
query-chunked attention and per-block rematerialisation."""
import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from rl4llm.models import (
    PRESETS,
    ModelConfig,
    apply,
    completion_hidden,
    get_config,
    init_cache,
    init_params,
    param_logical_axes,
    positions_from_mask,
)
from rl4llm.models.decoder import apply_rope, attention_mask_for, dot_product_attention, rope_cos_sin
from rl4llm.models import flops

LOGICAL_NAMES = {"vocab", "embed", "mlp", "heads", "kv_heads", "head_dim"}


def tiny_cfg(**overrides) -> ModelConfig:
    """Vocab 50, width 32, 2 layers, 4 query heads sharing 2 kv heads (GQA)."""
    base = dict(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8,
                intermediate_size=64)
    return ModelConfig(**{**base, **overrides})


@functools.partial(jax.jit, static_argnums=0)
def random_params(cfg: ModelConfig, seed: int = 0):
    """Init params, then perturb EVERY leaf (biases, norm scales too) so no path is trivially zero/one
    and logits are far from uniform (HF's std 0.02 would make most comparisons vacuous)."""
    flat, unravel = ravel_pytree(init_params(cfg, jax.random.key(seed)))
    return unravel(flat + 0.3 * jax.random.normal(jax.random.key(seed + 1), flat.shape))


@functools.partial(jax.jit, static_argnums=0)
def full_logits(cfg, params, tokens, mask):
    """One full (no cache) forward pass with positions from the mask. [B, L] -> [B, L, V]."""
    logits, cache = apply(cfg, params, tokens, positions_from_mask(mask), mask)
    assert cache is None
    return logits


@pytest.mark.parametrize("overrides", [
    dict(),
    dict(qkv_bias=False, qk_norm=True),
    dict(qk_norm=True, tie_embeddings=False),
    dict(num_kv_heads=1),
    dict(attention_query_chunk=2),  # the 4-token prefill runs in 2 query chunks, the full pass in 5
])
def test_kv_cache_decoding_matches_full_forward(overrides):
    cfg = tiny_cfg(**overrides)
    params = random_params(cfg)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, (2, 9)).astype(np.int32)
    mask = np.ones((2, 9), bool)
    mask[1, :3] = False  # row 1 is left-padded
    positions = np.asarray(positions_from_mask(jnp.asarray(mask)))
    expected = full_logits(cfg, params, tokens, mask)  # [2, 9, V]

    step = jax.jit(functools.partial(apply, cfg))
    prefill = 4
    logits, cache = step(params, tokens[:, :prefill], positions[:, :prefill], mask[:, :prefill],
                         cache=init_cache(cfg, 2, 12), cache_index=jnp.int32(0))
    chunks = [logits]
    for i in range(prefill, 9):
        logits, cache = step(params, tokens[:, i:i + 1], positions[:, i:i + 1], mask[:, i:i + 1],
                             cache=cache, cache_index=jnp.int32(i))
        chunks.append(logits)
    got = jnp.concatenate(chunks, axis=1)

    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[mask], expected[mask], atol=1e-5, rtol=0)
    assert float(jnp.std(expected[mask])) > 0.1  # logits are informative, the comparison is not vacuous
    np.testing.assert_array_equal(cache.key_mask[:, :9], mask)
    assert not np.any(cache.key_mask[:, 9:])
    # One [B, Hkv, S, D] array per layer (the layout the attention dots read); slots 9.. never written.
    assert [k.shape for k in cache.k] == [(2, cfg.num_kv_heads, 12, cfg.head_dim)] * cfg.num_layers
    assert not np.any(np.stack(cache.k)[:, :, :, 9:]) and not np.any(np.stack(cache.v)[:, :, :, 9:])


def test_causal_masking():
    cfg = tiny_cfg()
    params = random_params(cfg)
    tokens = np.arange(1, 9, dtype=np.int32)[None]  # [1, 8]
    changed = tokens.copy()
    changed[0, 5] = 40
    mask = np.ones_like(tokens, bool)
    a, b = full_logits(cfg, params, tokens, mask), full_logits(cfg, params, changed, mask)
    np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6, rtol=0)
    assert np.all(np.abs(a[:, 5:] - b[:, 5:]).max(-1) > 1e-3)


def test_left_and_right_padding_invariance():
    cfg = tiny_cfg(qk_norm=True)
    params = random_params(cfg)
    prompt = np.array([[7, 3, 12, 9, 30]], np.int32)
    plain = full_logits(cfg, params, prompt, np.ones_like(prompt, bool))[0]  # [5, V]

    left = np.concatenate([np.zeros((1, 3), np.int32), prompt], axis=1)
    left_mask = np.arange(8)[None] >= 3
    left_logits = full_logits(cfg, params, left, left_mask)
    assert np.all(np.isfinite(left_logits))  # fully masked pad rows stay finite
    np.testing.assert_allclose(left_logits[0, 3:], plain, atol=1e-5, rtol=0)

    right = np.concatenate([prompt, np.zeros((1, 3), np.int32)], axis=1)
    right_logits = full_logits(cfg, params, right, np.arange(8)[None] < 5)
    np.testing.assert_allclose(right_logits[0, :5], plain, atol=1e-5, rtol=0)

    # Sensitivity: attending to the pad tokens changes the logits.
    unmasked = full_logits(cfg, params, left, np.ones_like(left_mask))
    assert np.abs(unmasked[0, 3:] - plain).max() > 1e-3


def test_fully_masked_row_is_finite():
    cfg = tiny_cfg()
    logits, _ = apply(cfg, random_params(cfg), jnp.ones((2, 4), jnp.int32), jnp.zeros((2, 4), jnp.int32),
                      jnp.zeros((2, 4), bool))
    assert np.all(np.isfinite(logits))


def test_positions_from_mask():
    mask = jnp.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    np.testing.assert_array_equal(positions_from_mask(mask), [[0, 0, 0, 1, 2], [0, 1, 2, 3, 3]])


def test_rope_matches_hf_rotate_half():
    """Reference: transformers' Qwen2RotaryEmbedding + apply_rotary_pos_emb, written in numpy."""
    head_dim, theta = 8, 10000.0
    x = np.random.default_rng(0).normal(size=(1, 3, 2, head_dim)).astype(np.float32)  # [B, L, H, D]
    positions = np.array([[0, 5, 11]])
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    freqs = positions[..., None] * inv_freq
    emb = np.concatenate([freqs, freqs], -1)[:, :, None]  # [B, L, 1, D]
    rotate_half = np.concatenate([-x[..., head_dim // 2:], x[..., :head_dim // 2]], -1)
    expected = x * np.cos(emb) + rotate_half * np.sin(emb)
    cos, sin = rope_cos_sin(jnp.asarray(positions), head_dim, theta)
    np.testing.assert_allclose(apply_rope(jnp.asarray(x), cos, sin), expected, atol=1e-5)


def expected_param_count(cfg: ModelConfig) -> int:
    """Hand formula: embedding + L * (attention + 2 norms + SwiGLU) + final norm (+ untied head)."""
    e, h, kv, d, i = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
    attention = e * h * d + 2 * e * kv * d + h * d * e + cfg.qkv_bias * (h * d + 2 * kv * d)
    attention += cfg.qk_norm * 2 * d
    per_layer = attention + 2 * e + 3 * e * i
    head = 0 if cfg.tie_embeddings else e * cfg.vocab_size
    return cfg.vocab_size * e + cfg.num_layers * per_layer + e + head


def abstract_params(cfg):
    return jax.eval_shape(functools.partial(init_params, cfg), jax.random.key(0))


@pytest.mark.parametrize("name,count", [("tiny", 4_198_656), ("small", 35_668_480)])
def test_preset_param_counts(name, count):
    cfg = get_config(name)
    shapes = abstract_params(cfg)
    total = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    assert total == expected_param_count(cfg) == count


@pytest.mark.parametrize("cfg", [tiny_cfg(), tiny_cfg(qk_norm=True, tie_embeddings=False, qkv_bias=False)])
def test_param_count_and_logical_axes(cfg):
    shapes = abstract_params(cfg)
    assert sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)) == expected_param_count(cfg)
    axes = param_logical_axes(cfg)
    is_axes = lambda x: isinstance(x, tuple)  # noqa: E731
    assert jax.tree.structure(axes, is_leaf=is_axes) == jax.tree.structure(shapes)
    pairs = jax.tree.leaves(jax.tree.map(lambda a, s: (a, s.shape), axes, shapes, is_leaf=is_axes),
                            is_leaf=is_axes)
    for names, shape in pairs:
        assert len(names) == len(shape) and set(names) <= LOGICAL_NAMES, (names, shape)
    assert axes["embed"] == ("vocab", "embed")
    assert axes["layers"][0]["attn"]["k_proj"]["kernel"] == ("embed", "kv_heads", "head_dim")


def test_hf_initialisation():
    params = init_params(get_config("tiny"), jax.random.key(0))
    assert abs(float(jnp.std(params["embed"])) - 0.02) < 1e-3
    layer = params["layers"][0]
    assert abs(float(jnp.std(layer["mlp"]["up_proj"]["kernel"])) - 0.02) < 1e-3
    assert float(jnp.abs(layer["attn"]["q_proj"]["bias"]).max()) == 0.0
    assert float(jnp.abs(layer["input_norm"]["scale"] - 1).max()) == 0.0
    assert "lm_head" not in params  # tied


def test_presets_and_get_config():
    assert {"nano", "tiny", "small", "arith", "qwen2.5-0.5b", "llama3.2-1b"} <= set(PRESETS)
    assert get_config("arith", vocab_size=77).vocab_size == 77
    q = get_config("qwen2.5-0.5b")
    assert (q.vocab_size, q.num_layers, q.num_heads, q.num_kv_heads, q.rope_theta) == (151936, 24, 14, 2, 1e6)
    assert not get_config("llama3.2-1b").qkv_bias
    with pytest.raises(ValueError, match="tiny"):
        get_config("nope")
    with pytest.raises(ValueError, match="num_kv_heads"):
        tiny_cfg(num_kv_heads=3)


def test_bfloat16_compute_is_finite_and_close():
    cfg = tiny_cfg()
    params = random_params(cfg)
    tokens = np.arange(1, 7, dtype=np.int32)[None]
    mask = np.ones_like(tokens, bool)
    lo = full_logits(tiny_cfg(dtype="bfloat16"), params, tokens, mask)
    hi = full_logits(cfg, params, tokens, mask)
    assert lo.dtype == jnp.float32 and np.all(np.isfinite(lo))
    assert np.abs(lo - hi).max() < 0.1 * np.abs(hi).max()


def test_query_chunked_attention_equals_unchunked():
    """Chunks of 1, 3 and 10 queries (3 and 10 do not divide L=11, so the last chunk is padded) give the
    unchunked outputs and gradients: 4 query heads on 2 kv heads, 13 key slots of which the first 2 hold
    earlier tokens, causal mask, row 1 left-padded over 4 slots (its first queries see no key at all)."""
    rng = np.random.default_rng(0)
    b, l, s, h, hkv, d = 2, 11, 13, 4, 2, 8
    q = jnp.asarray(rng.normal(size=(b, l, h, d)), jnp.float32)
    k, v = (jnp.asarray(rng.normal(size=(b, hkv, s, d)), jnp.float32) for _ in range(2))
    key_mask = np.ones((b, s), bool)
    key_mask[1, :4] = False
    mask = attention_mask_for(jnp.arange(2, 2 + l), jnp.asarray(key_mask))  # [B, L, S]
    weights = jnp.asarray(rng.normal(size=(b, l, h, d)), jnp.float32)

    @functools.partial(jax.jit, static_argnums=0)
    def value_and_grads(chunk):
        loss = lambda q, k, v: jnp.sum(dot_product_attention(q, k, v, mask, chunk) * weights)  # noqa: E731
        return dot_product_attention(q, k, v, mask, chunk), jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    expected_out, expected_grads = value_and_grads(0)
    assert float(jnp.std(expected_out)) > 0.1 and float(jnp.abs(expected_grads[1]).max()) > 0.1
    for chunk in (1, 3, 10):
        out, grads = value_and_grads(chunk)
        np.testing.assert_allclose(out, expected_out, atol=1e-6, rtol=1e-6)
        for got, want in zip(grads, expected_grads):
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-6)


def test_query_chunked_model_matches_unchunked_with_padding():
    cfg = tiny_cfg(qk_norm=True)
    params = random_params(cfg)
    tokens = np.random.default_rng(1).integers(1, cfg.vocab_size, (2, 10)).astype(np.int32)
    mask = np.ones_like(tokens, bool)
    mask[0, :3] = False  # left padding
    mask[1, 8:] = False  # right padding
    expected = full_logits(cfg, params, tokens, mask)
    got = full_logits(dataclasses.replace(cfg, attention_query_chunk=4), params, tokens, mask)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def _logits_loss(cfg, tokens, mask):
    """params -> sum(logits * fixed random weights), a scalar that depends on every logit."""
    weights = jnp.asarray(np.random.default_rng(2).normal(size=(*tokens.shape, cfg.vocab_size)), jnp.float32)
    return lambda p: jnp.sum(apply(cfg, p, tokens, positions_from_mask(mask), mask)[0] * weights)


def _kept_for_backward(cfg, params, tokens, mask) -> list[tuple[int, ...]]:
    """Shapes of what the backward pass of `_logits_loss` keeps: the leaves of its VJP closure (every saved
    residual, the params included). Only traced, never run."""
    loss = _logits_loss(cfg, tokens, mask)
    return [r.shape for r in jax.eval_shape(lambda p: jax.tree.leaves(jax.vjp(loss, p)[1]), params)]


def test_remat_is_exact_and_keeps_less_for_the_backward_pass():
    """Every remat mode gives the same loss and gradient; what the backward pass keeps shrinks from "none"
    to "dots" (matmul outputs) to "full" (block inputs); query chunking drops the [B, H, L, L] attention
    probabilities (2 * 4 * 40 * 40 = 12800 floats per layer) that the unchunked pass keeps."""
    cfg = tiny_cfg()
    params = random_params(cfg)
    tokens = jnp.asarray(np.random.default_rng(3).integers(1, cfg.vocab_size, (2, 40)), jnp.int32)
    mask = jnp.ones((2, 40), bool).at[1, :5].set(False)
    configs = {(remat, chunk): dataclasses.replace(cfg, remat=remat, attention_query_chunk=chunk)
               for remat, chunk in (("none", 0), ("none", 16), ("dots", 16), ("full", 16))}
    loss, grads = jax.jit(jax.value_and_grad(_logits_loss(configs[("none", 0)], tokens, mask)))(params)
    for mode in (("dots", 16), ("full", 16)):  # float32 noise of a changed summation order
        other_loss, other_grads = jax.jit(jax.value_and_grad(_logits_loss(configs[mode], tokens, mask)))(params)
        np.testing.assert_allclose(other_loss, loss, rtol=1e-6)
        for got, want in zip(jax.tree.leaves(other_grads), jax.tree.leaves(grads)):
            np.testing.assert_allclose(got, want, atol=1e-5 * float(jnp.abs(want).max()), rtol=0)

    kept = {mode: _kept_for_backward(c, params, tokens, mask) for mode, c in configs.items()}
    kept_floats = {mode: sum(math.prod(s) for s in shapes) for mode, shapes in kept.items()}
    assert kept_floats[("full", 16)] < kept_floats[("dots", 16)] < kept_floats[("none", 16)] < kept_floats[("none", 0)]
    probs_shape = (2, 2, 2, 40, 40)  # [B, Hkv, G, L, S]
    assert probs_shape in kept[("none", 0)]
    assert all(math.prod(s) < math.prod(probs_shape) for s in kept[("none", 16)])


def test_model_config_rejects_bad_remat_and_chunk():
    with pytest.raises(ValueError, match="remat"):
        tiny_cfg(remat="some")
    with pytest.raises(ValueError, match="attention_query_chunk"):
        tiny_cfg(attention_query_chunk=-1)


def _grouped_rows(cfg: ModelConfig, groups: int, group: int, prompt_len: int, completion_len: int):
    """[prompt (left-padded, shared by each group's rows) | completion (right-padded per row)] tokens and mask."""
    rng = np.random.default_rng(0)
    prompt_mask = np.ones((groups, prompt_len), np.int32)
    prompt_mask[0, :2] = 0  # group 0's prompt is left-padded by 2
    prompts = np.where(prompt_mask, rng.integers(1, cfg.vocab_size, (groups, prompt_len)), 0)
    completion_mask = np.ones((groups * group, completion_len), np.int32)
    completion_mask[1, 3:] = 0  # one row ends early
    completions = np.where(completion_mask, rng.integers(1, cfg.vocab_size, completion_mask.shape), 0)
    tokens = np.concatenate([np.repeat(prompts, group, 0), completions], 1)
    mask = np.concatenate([np.repeat(prompt_mask, group, 0), completion_mask], 1)
    return jnp.asarray(tokens, jnp.int32), jnp.asarray(mask), completion_mask.astype(bool)


@pytest.mark.parametrize("overrides", [dict(), dict(qk_norm=True, num_kv_heads=1), dict(remat="none"),
                                       dict(remat="dots")])
def test_shared_prompt_forward_equals_per_row_forward(overrides):
    """prompt_group = g: each group's prompt forwarded once into a forked KV cache gives the per-row hidden states
    and (through the forked cache) the same gradient, on real positions (masked ones are unspecified)."""
    cfg = tiny_cfg(**overrides)
    params = random_params(cfg)
    tokens, mask, real = _grouped_rows(cfg, groups=3, group=4, prompt_len=5, completion_len=6)
    hidden = lambda p, g: completion_hidden(cfg, p, tokens, mask, 6, g)  # noqa: E731
    per_row, shared = jax.jit(hidden, static_argnums=1)(params, 1), jax.jit(hidden, static_argnums=1)(params, 4)
    np.testing.assert_allclose(np.asarray(shared)[real], np.asarray(per_row)[real], atol=2e-5, rtol=2e-5)
    loss = lambda p, g: jnp.sum(jnp.where(real[..., None], jnp.tanh(hidden(p, g)), 0.0))  # noqa: E731
    grads = [ravel_pytree(jax.jit(jax.grad(loss), static_argnums=1)(params, g))[0] for g in (1, 4)]
    np.testing.assert_allclose(grads[1], grads[0], atol=2e-4, rtol=1e-3)
    with pytest.raises(ValueError, match="prompt_group=5"):
        hidden(params, 5)


def test_shared_prompt_backward_keeps_what_remat_says():
    """The shared-prompt path's cached blocks honour `cfg.remat` in the backward pass: the compiled gradient's
    temporary buffers shrink from none (every activation kept) to dots to full (block inputs only)."""
    temp = {}
    for remat in ("none", "dots", "full"):
        cfg = tiny_cfg(remat=remat, num_layers=4, hidden_size=64, intermediate_size=256)
        params = random_params(cfg)
        tokens, mask, real = _grouped_rows(cfg, groups=2, group=8, prompt_len=8, completion_len=48)
        loss = lambda p: jnp.sum(jnp.where(real[..., None], completion_hidden(cfg, p, tokens, mask, 48, 8), 0.0))  # noqa: E731,B023
        temp[remat] = jax.jit(jax.grad(loss)).lower(params).compile().memory_analysis().temp_size_in_bytes
    assert temp["full"] < temp["dots"] < temp["none"], temp


def test_recomputed_flops_with_a_shared_prompt():
    """What remat recomputes in the learner (`train.aot_costs`): with each group's prompt forwarded once, the blocks'
    forward is 2·N_trunk per forwarded token (rows/g prompts of P, rows completions of T) plus the attention dots;
    with g = 1 both are the cache-free forward's."""
    cfg, rows, prompt_len, new, g = tiny_cfg(), 8, 5, 7, 4
    trunk = flops.trunk_forward_flops(cfg, rows, prompt_len + new, new, g)
    attention = flops.learner_attention_flops(cfg, rows, prompt_len + new, new, g)
    forwarded = rows // g * prompt_len + rows * new
    assert trunk == pytest.approx(2 * flops.trunk_matmul_params(cfg) * forwarded + attention)
    assert trunk < flops.trunk_forward_flops(cfg, rows, prompt_len + new, new)
    assert flops.trunk_forward_flops(cfg, rows, prompt_len + new, new) == pytest.approx(
        flops.sequence_forward_flops(cfg, rows, prompt_len + new, 0))
    assert flops.learner_attention_flops(cfg, rows, prompt_len + new, new) == pytest.approx(
        flops.attention_flops(cfg, rows * (prompt_len + new), (prompt_len + new + 1) / 2))
