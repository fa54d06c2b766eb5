"""LoRA adapters: zero-B identity, adapters-off reference, merge/export, training only the adapters."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl4llm import models
from rl4llm.models import hf_checkpoint, lora
from rl4llm.train import learner as learner_lib

TARGETS = ("q_proj", "v_proj", "o_proj", "down_proj")
BASE_CFG = models.get_config("nano", vocab_size=48, qkv_bias=True)
CFG = dataclasses.replace(BASE_CFG, lora_rank=4, lora_alpha=8.0, lora_targets=TARGETS)
TOKENS = jnp.asarray(np.random.default_rng(0).integers(0, 48, (2, 10)), jnp.int32)
MASK = jnp.ones_like(TOKENS)


def _logits(cfg, params):
    logits, _ = jax.jit(models.apply, static_argnums=0)(cfg, params, TOKENS, models.positions_from_mask(MASK), MASK)
    return np.asarray(logits)


@pytest.fixture(scope="module")
def base():
    return models.init_params(BASE_CFG, jax.random.key(0))


@pytest.fixture(scope="module")
def trained_like(base):
    """Base + adapters whose B is random too (as after training)."""
    params = lora.add_adapters(CFG, base, jax.random.key(1))
    _, adapters = lora.split(params)
    keys = iter(jax.random.split(jax.random.key(2), 64))
    adapters = jax.tree.map(lambda x: 0.3 * jax.random.normal(next(keys), x.shape, x.dtype), adapters)
    return lora.combine(base, adapters)


def test_adapter_shapes_follow_the_kernels(base):
    adapters = lora.init_adapters(CFG, jax.random.key(1))
    layer = adapters["layers"][0]
    e, h, hkv, d, i, r = 32, 2, 1, 16, 64, 4
    assert layer["attn"]["q_proj"]["lora_a"].shape == (e, r) and layer["attn"]["q_proj"]["lora_b"].shape == (r, h, d)
    assert layer["attn"]["v_proj"]["lora_b"].shape == (r, hkv, d)
    assert layer["attn"]["o_proj"]["lora_a"].shape == (h, d, r) and layer["attn"]["o_proj"]["lora_b"].shape == (r, e)
    assert layer["mlp"]["down_proj"]["lora_a"].shape == (i, r)
    assert set(layer["attn"]) == {"q_proj", "v_proj", "o_proj"} and set(layer["mlp"]) == {"down_proj"}
    # PEFT init: A uniform within ±1/sqrt(fan_in) (not all zero), B exactly zero.
    a = np.asarray(layer["attn"]["o_proj"]["lora_a"])
    assert 0 < np.abs(a).max() <= 1 / np.sqrt(h * d) and np.all(np.asarray(layer["attn"]["o_proj"]["lora_b"]) == 0)
    # The logical axes of the adapters come from their kernels (rank axis unsharded).
    axes = models.param_logical_axes(CFG)["layers"][0]["attn"]["q_proj"]
    assert axes["lora_a"] == ("embed", None) and axes["lora_b"] == (None, "heads", "head_dim")
    # split / combine are inverses, and the base part is exactly the base model's tree.
    params = lora.add_adapters(CFG, base, jax.random.key(1))
    split_base, split_adapters = lora.split(params)
    assert jax.tree.structure(split_base) == jax.tree.structure(base)
    assert jax.tree.structure(lora.combine(split_base, split_adapters)) == jax.tree.structure(params)


def test_zero_b_equals_base_and_adapters_off_is_the_base(base, trained_like):
    fresh = lora.add_adapters(CFG, base, jax.random.key(1))
    np.testing.assert_array_equal(_logits(CFG, fresh), _logits(BASE_CFG, base))
    adapted = _logits(CFG, trained_like)
    assert np.abs(adapted - _logits(BASE_CFG, base)).max() > 1e-2  # the adapters do change the model
    np.testing.assert_array_equal(_logits(CFG, lora.adapters_off(trained_like)), _logits(BASE_CFG, base))


def test_merged_export_equals_the_adapted_model(trained_like, tmp_path):
    merged_cfg, merged = lora.merge(CFG, trained_like)
    assert merged_cfg == BASE_CFG and not lora.has_adapters(merged)
    # Hand check of one kernel: W + (alpha / r) A B.
    q = trained_like["layers"][1]["attn"]["q_proj"]
    expected = q["kernel"] + 2.0 * jnp.einsum("er,rhd->ehd", q["lora_a"], q["lora_b"])
    np.testing.assert_allclose(merged["layers"][1]["attn"]["q_proj"]["kernel"], expected, atol=1e-6)
    hf_checkpoint.save_hf_checkpoint(merged_cfg, merged, str(tmp_path))
    cfg2, reimported = hf_checkpoint.load_hf_checkpoint(str(tmp_path))
    np.testing.assert_allclose(_logits(cfg2, reimported), _logits(CFG, trained_like), atol=1e-5, rtol=0)


def test_bad_lora_config_is_rejected():
    with pytest.raises(ValueError, match="lora_targets"):
        dataclasses.replace(BASE_CFG, lora_rank=4, lora_targets=("qkv",))
    with pytest.raises(ValueError, match="needs lora_targets"):
        dataclasses.replace(BASE_CFG, lora_rank=4)


def test_learner_trains_only_the_adapters_with_the_base_as_kl_reference(base):
    """Three GRPO-style learner updates with KL to the base: the base stays bitwise, every adapter moves, the
    optimizer holds state for the adapters only, and the KL (0 while B = 0) grows once the adapters moved."""
    params = jax.tree.map(jnp.copy, lora.add_adapters(CFG, base, jax.random.key(1)))  # the step donates its state
    old_adapters = jax.device_get(lora.split(params)[1])
    optimizer = optax.adam(1e-2)
    state = learner_lib.TrainState(
        params=params, opt_state=optimizer.init(lora.trainable(params)), ref_params=None,
        key=jax.random.key_data(jax.random.key(0)))
    n_adapter = sum(x.size for x in jax.tree.leaves(old_adapters))
    assert sum(x.size for x in jax.tree.leaves(state.opt_state)) == 2 * n_adapter + 1  # Adam mu, nu, count
    lcfg = learner_lib.LearnerConfig(
        loss="ppo_clip", loss_kwargs=(), agg_mode="token-mean", kl_coef=0.1, kl_kind="k3", entropy_coef=0.0,
        temperature=1.0, micro_batch_size=0, logprob_chunk_size=4, use_old_logp=False)
    completion = jnp.ones((2, 4), jnp.float32)
    batch = learner_lib.LearnerBatch(
        tokens=TOKENS, attention_mask=MASK, completion_mask=completion,
        advantages=jnp.asarray([[1.0] * 4, [-1.0] * 4]), old_logp=jnp.zeros((2, 4)), sampler_logp=jnp.zeros((2, 4)))
    step = learner_lib.make_learner_step(CFG, lcfg, optimizer)
    kls = []
    for i in range(3):
        state, metrics = step(state, batch, jax.random.key(i))
        kls.append(float(metrics["kl"]))
    new_base, new_adapters = lora.split(state.params)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), base, new_base)
    changed = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))), old_adapters, new_adapters)
    assert all(jax.tree.leaves(changed)), changed
    assert kls[0] == 0.0 and kls[2] > 0.0


def test_bf16_compute_keeps_float32_master_weights_and_log_probs(base):
    """dtype=bfloat16, param_dtype=float32: matmuls in bf16, params (the optimizer's master copy), logits,
    log-probs and the update in float32; log-probs stay close to the float32 model's."""
    from rl4llm.train import logprobs as logprobs_lib

    bf16 = dataclasses.replace(CFG, dtype="bfloat16")
    params = lora.add_adapters(CFG, base, jax.random.key(1))
    logp32, _ = logprobs_lib.completion_logprobs(CFG, params, TOKENS, MASK, 4)
    logp16, _ = logprobs_lib.completion_logprobs(bf16, params, TOKENS, MASK, 4)
    assert logp16.dtype == jnp.float32 and _logits(bf16, params).dtype == np.float32
    assert 0 < np.abs(np.asarray(logp16 - logp32)).max() < 0.05  # bf16 rounding, not a different model
    grads = jax.grad(lambda t: jnp.sum(logprobs_lib.completion_logprobs(
        bf16, lora.with_trainable(params, t), TOKENS, MASK, 4)[0]))(lora.trainable(params))
    assert {x.dtype for x in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}


def test_sft_step_trains_only_the_adapters(base):
    from rl4llm.train import sft as sft_lib

    params = jax.tree.map(jnp.copy, lora.add_adapters(CFG, base, jax.random.key(1)))  # the step donates its state
    old_adapters = jax.device_get(lora.split(params)[1])
    optimizer = optax.adam(1e-2)
    state = sft_lib.SFTState(params=params, opt_state=optimizer.init(lora.trainable(params)))
    step = sft_lib.make_sft_step(CFG, optimizer, chunk_size=4)
    for _ in range(2):
        state, metrics = step(state, TOKENS, MASK, jnp.ones((2, 4), jnp.float32))
    new_base, new_adapters = lora.split(state.params)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), base, new_base)
    changed = jax.tree.map(lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))), old_adapters, new_adapters)
    assert all(jax.tree.leaves(changed)) and np.isfinite(float(metrics["loss"]))
