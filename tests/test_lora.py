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
