"""Unit tests of the learner / loop hooks that make the rl/ kernels usable from the config.

Hand-computed where possible: forking-token mask, truncated IS weights, adaptive KL and entropy
coefficients, ProRL reference reset, whole-batch token statistics, Lp-Reg proxy in the chunked pass.
"""


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import default
from rl4llm import models
from rl4llm.rl import entropy as entropy_lib
from rl4llm import config as config_lib
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import token_weights
from rl4llm.train.companions import controllers

MODEL_CFG = models.get_config("nano", vocab_size=16)


def _learner_cfg(**overrides):
    fields = dict(
        loss="ppo_clip",
        loss_kwargs=(),
        agg_mode="token-mean",
        kl_coef=0.0,
        kl_kind="k3",
        entropy_coef=0.0,
        temperature=1.0,
        micro_batch_size=0,
        logprob_chunk_size=4,
        use_old_logp=False,
    )
    return learner_lib.LearnerConfig(**{**fields, **overrides})


def _batch(**fields):
    n, p, t = 4, 3, 5
    k1, k2 = jax.random.split(jax.random.key(1))
    tokens = jax.random.randint(k1, (n, p + t), 4, 16)
    lengths = jnp.array([5, 2, 4, 3])
    mask = (jnp.arange(t)[None] < lengths[:, None]).astype(jnp.float32)
    attention = jnp.concatenate([jnp.ones((n, p), jnp.int32), mask.astype(jnp.int32)], 1)
    advantages = jax.random.normal(k2, (n, 1)) * mask
    base = dict(
        tokens=tokens,
        attention_mask=attention,
        completion_mask=mask,
        advantages=advantages,
        old_logp=jnp.zeros((n, t)),
        sampler_logp=jnp.zeros((n, t)),
    )
    return learner_lib.LearnerBatch(**{**base, **fields})


def _state(params, optimizer, **fields):
    return learner_lib.TrainState(
        params=jax.tree.map(jnp.copy, params),
        opt_state=optimizer.init(params),
        ref_params=jax.tree.map(lambda x: x * 0.9, params),
        key=jax.random.key_data(jax.random.key(0)),
    ).with_extras(**fields)


def _step(cfg, state, batch, optimizer):
    return learner_lib.make_learner_step(MODEL_CFG, cfg, optimizer)(state, batch, jax.random.key(3))


def _assert_trees_close(a, b, **tol):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, **tol), a, b)


@pytest.fixture(scope="module")
def params():
    return models.init_params(MODEL_CFG, jax.random.key(0))


# ------------------------------------------------------------------------------- forking tokens


def test_forking_mask_selects_exactly_the_top_rho_tokens():
    entropy = jnp.array([[0.1, 0.9, 0.5], [0.3, 0.7, 5.0]])
    mask = jnp.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the 5.0 is padding: never selected
    # 5 valid tokens, ρ = 0.4: the 0.6-quantile of [.1 .3 .5 .7 .9] is at position 0.6·4 = 2.4 -> 0.58,
    # so exactly the two highest-entropy valid tokens (0.9 and 0.7) are kept.
    got = entropy_lib.forking_token_mask(entropy, mask, rho=0.4)
    np.testing.assert_array_equal(got, [[0, 1, 0], [0, 1, 0]])


def test_token_weights_cut_the_gradient_of_unselected_tokens(params):
    """is_weights = selection mask  ==  advantages zeroed outside the selection (same normaliser)."""
    optimizer = optax.sgd(0.1)
    batch = _batch()
    selected = jnp.zeros_like(batch.completion_mask).at[0, 1].set(1.0).at[2, 3].set(1.0)
    masked = _step(_learner_cfg(), _state(params, optimizer), batch.replace(token_weights=selected), optimizer)
    zeroed = _step(
        _learner_cfg(), _state(params, optimizer), batch.replace(advantages=batch.advantages * selected), optimizer
    )
    assert masked[1]["grad_norm"] > 0
    _assert_trees_close(masked[0].params, zeroed[0].params, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------- truncated IS


def test_tis_weights_are_capped_and_combined_with_token_weights():
    mask = jnp.array([[1.0, 1.0, 1.0, 0.0]])
    old_logp = jnp.log(jnp.array([[0.6, 0.1, 0.4, 0.9]]))
    sampler_logp = jnp.log(jnp.array([[0.2, 0.2, 0.4, 0.1]]))
    batch = learner_lib.LearnerBatch(
        tokens=None,
        attention_mask=None,
        completion_mask=mask,
        advantages=None,
        old_logp=None,
        sampler_logp=sampler_logp,
    )
    # token ratios 3, 0.5, 1 (padding 0); cap 2 -> 2, 0.5, 1
    token = token_weights.policy_is_weights(_learner_cfg(tis_cap=2.0), old_logp, batch)
    np.testing.assert_allclose(token, [[2.0, 0.5, 1.0, 0.0]], rtol=1e-6)
    # sequence ratio 3·0.5·1 = 1.5 < cap, on every valid token
    seq = token_weights.policy_is_weights(_learner_cfg(tis_cap=2.0, tis_level="sequence"), old_logp, batch)
    np.testing.assert_allclose(seq, [[1.5, 1.5, 1.5, 0.0]], rtol=1e-6)
    both = token_weights.policy_is_weights(
        _learner_cfg(tis_cap=2.0), old_logp, batch.replace(token_weights=jnp.array([[0.0, 1.0, 1.0, 1.0]]))
    )
    np.testing.assert_allclose(both, [[0.0, 0.5, 1.0, 0.0]], rtol=1e-6)
    assert token_weights.policy_is_weights(_learner_cfg(), old_logp, batch) is None  # off by default


# ------------------------------------------------------------------------- adaptive coefficients


def _rl_config(**rl):
    c = default.get_config()
    c.rl.update(rl)
    return c


def _coef_state(kl_coef=None, entropy_coef=None):
    return learner_lib.TrainState(
        params={}, opt_state=None, ref_params=None, key=None).with_extras(kl_coef=kl_coef, entropy_coef=entropy_coef)


def test_adaptive_kl_coefficient_update_golden():
    config = _rl_config(kl_coef=0.001, kl_target=0.1, kl_horizon=10000)
    state = _coef_state(kl_coef=jnp.float32(0.001))
    # KL 0.5 above target 0.1: error clip(5 − 1, ±0.2) = 0.2; β·(1 + 0.2·256/10000) = 0.00100512 (verl golden)
    up = controllers.update_controllers(config, state, current_kl=0.5, entropy=0.0, num_sequences=256)
    np.testing.assert_allclose(up.extra("kl_coef"), 0.00100512, rtol=1e-6)
    # KL 0.05 below target: error −0.5 clipped to −0.2 -> β·(1 − 0.2·256/10000)
    down = controllers.update_controllers(config, state, current_kl=0.05, entropy=0.0, num_sequences=256)
    np.testing.assert_allclose(down.extra("kl_coef"), 0.001 * (1 - 0.2 * 256 / 10000), rtol=1e-6)
    assert up.extra("entropy_coef") is None and down.extra("kl_coef").dtype == jnp.float32


def test_adaptive_entropy_coefficient_moves_toward_the_target():
    config = _rl_config(entropy_coef=0.01, entropy_target=0.5, entropy_coef_delta=0.005)
    state = _coef_state(entropy_coef=jnp.float32(0.01))
    low = controllers.update_controllers(config, state, current_kl=None, entropy=0.2, num_sequences=8)
    high = controllers.update_controllers(config, state, current_kl=None, entropy=0.9, num_sequences=8)
    np.testing.assert_allclose(low.extra("entropy_coef"), 0.015, rtol=1e-6)  # entropy below target: bonus grows
    np.testing.assert_allclose(high.extra("entropy_coef"), 0.005, rtol=1e-6)  # above target: bonus decays
    floor = controllers.update_controllers(config, high, current_kl=None, entropy=0.9, num_sequences=8)
    floor = controllers.update_controllers(config, floor, current_kl=None, entropy=0.9, num_sequences=8)
    assert float(floor.extra("entropy_coef")) == 0.0  # clipped at 0
    assert low.extra("kl_coef") is None


def test_fixed_coefficients_are_untouched():
    state = _coef_state()
    assert controllers.update_controllers(_rl_config(), state, current_kl=1.0, entropy=1.0, num_sequences=8) is state


def test_learner_uses_the_adaptive_coefficient_from_the_state(params):
    """An adaptive KL coefficient of 0 in the state gives exactly the no-KL update; a fixed one does not."""
    optimizer = optax.sgd(0.1)
    batch = _batch()
    no_kl, _ = _step(_learner_cfg(), _state(params, optimizer), batch, optimizer)
    adaptive_zero, m = _step(
        _learner_cfg(kl_coef=0.1), _state(params, optimizer, kl_coef=jnp.float32(0.0)), batch, optimizer
    )
    fixed, _ = _step(_learner_cfg(kl_coef=0.1), _state(params, optimizer), batch, optimizer)
    assert m["kl"] > 0  # the KL term is still measured
    _assert_trees_close(adaptive_zero.params, no_kl.params, rtol=1e-6, atol=1e-8)
    differs = jax.tree.map(lambda a, b: not np.allclose(a, b, rtol=1e-6, atol=1e-8), fixed.params, no_kl.params)
    assert any(jax.tree.leaves(differs))  # a fixed coefficient of 0.1 does change the update


def test_coefficients_on_off_fixed_adaptive():
    assert learner_lib.coefficients(_learner_cfg(), _coef_state()) == (None, None)
    assert learner_lib.coefficients(_learner_cfg(kl_coef=0.1, entropy_coef=-0.01), _coef_state()) == (0.1, -0.01)
    kl, ent = learner_lib.coefficients(_learner_cfg(kl_coef=0.1), _coef_state(jnp.float32(0.2), jnp.float32(0.0)))
    assert float(kl) == pytest.approx(0.2) and float(ent) == 0.0  # adaptive entropy is on even at 0


# ------------------------------------------------------------------------------ reference reset


def test_reference_reset_happens_every_n_steps_and_zeroes_the_kl(params):
    optimizer = optax.adam(1e-3)
    config = _rl_config(kl_coef=0.1, ref_reset_every=3)
    state = _state(params, optimizer)
    done = []
    for steps_done in range(1, 8):
        state, reset = controllers.maybe_reset_reference(config, state, optimizer, steps_done)
        if reset:
            done.append(steps_done)
    assert done == [3, 6]
    _assert_trees_close(state.ref_params, state.params, rtol=0, atol=0)
    # the reference is a copy (the learner donates the state) and the optimizer state is fresh
    assert all(a is not b for a, b in zip(jax.tree.leaves(state.ref_params), jax.tree.leaves(state.params)))
    _assert_trees_close(state.opt_state, optimizer.init(params), rtol=0, atol=0)
    _, metrics = _step(_learner_cfg(kl_coef=0.1), state, _batch(), optimizer)
    assert float(metrics["kl"]) == 0.0  # after a reset the KL term is exactly 0 at the next step
    never = controllers.maybe_reset_reference(_rl_config(kl_coef=0.1), state, optimizer, 3)
    assert never == (state, False)


# ------------------------------------------------------------------------------ logged statistics


def test_token_statistics_hand_computed():
    mask = jnp.array([[1.0, 1.0, 1.0, 1.0, 0.0]])
    adv = jnp.array([[1.0, -1.0, 1.0, -1.0, 7.0]])
    logp = jnp.array([[-1.0, -2.0, -1.0, -2.0, -9.0]])
    entropy = jnp.array([[0.0, 1.0, 2.0, 3.0, 9.0]])
    stats = metrics_lib.token_statistics(logp, entropy, adv, mask)
    # centred A = ±1, centred logp = ±0.5 in phase: cov = mean(0.5) = 0.5
    np.testing.assert_allclose(stats["cov_logp_adv"], 0.5, rtol=1e-6)
    # linear quantiles of [0, 1, 2, 3] at positions 0.3, 1.5, 2.7
    np.testing.assert_allclose(
        [stats["entropy_p10"], stats["entropy_p50"], stats["entropy_p90"]], [0.3, 1.5, 2.7], rtol=1e-6
    )


def test_learner_logs_entropy_percentiles_and_covariance(params):
    optimizer = optax.sgd(0.1)
    _, metrics = _step(_learner_cfg(micro_batch_size=2), _state(params, optimizer), _batch(), optimizer)
    for key in ("entropy", "entropy_p10", "entropy_p50", "entropy_p90", "cov_logp_adv"):
        assert np.isfinite(metrics[key]), key
    assert metrics["entropy_p10"] <= metrics["entropy_p50"] <= metrics["entropy_p90"]


# --------------------------------------------------------------------------------- Lp-Reg proxy


def test_proxy_logp_from_the_chunked_pass_equals_the_full_logits_kernel():
    k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
    hidden = jax.random.normal(k1, (2, 5, 4))
    unembed = jax.random.normal(k2, (4, 11)) * 3.0
    targets = jax.random.randint(k3, (2, 5), 0, 11)
    logp, ent, proxy = entropy_lib.chunked_logprobs_and_entropy(
        hidden, targets, unembed, chunk_size=2, temperature=0.7, min_p=0.1
    )
    logits = hidden @ unembed / 0.7
    np.testing.assert_allclose(proxy, entropy_lib.minp_proxy_logprobs(logits, targets, min_p=0.1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        logp, jax.nn.log_softmax(logits)[jnp.arange(2)[:, None], jnp.arange(5), targets], rtol=1e-5
    )
    assert np.all(proxy[proxy > -100] >= logp[proxy > -100] - 1e-5)  # survivors gain mass when renormalised


# ------------------------------------------------------------ whole-minibatch token statistics


@pytest.mark.parametrize(
    "loss,kwargs,vocab_chunk",
    [
        ("clip_cov", (("clip_cov_lb", -1e9), ("clip_cov_ratio", 0.25), ("clip_cov_ub", 1e9)), 0),
        ("steer", (), 5),  # V = 16 in chunks of 5 (the last one overlapping) on the micro-batched side
    ],
)
def test_token_selecting_losses_are_invariant_to_micro_batching(params, loss, kwargs, vocab_chunk):
    """The selection statistics come from the whole minibatch (`minibatch_token_stats`), not per micro-batch
    (clip_cov: random pick from the step key; steer: weights from max Ω over entropies and log-probs); the
    kernel tests cover each token-selecting loss with sliced whole-batch statistics. Vocabulary chunks
    leave the step unchanged too."""
    optimizer = optax.sgd(0.1)
    batch = _batch(old_logp=-jnp.abs(jax.random.normal(jax.random.key(5), (4, 5))) - 1.0)
    results = []
    for micro, vocab in ((0, 0), (2, vocab_chunk)):
        cfg = _learner_cfg(loss=loss, loss_kwargs=kwargs, micro_batch_size=micro, use_old_logp=True,
                           logprob_vocab_chunk_size=vocab)
        state, metrics = _step(cfg, _state(params, optimizer), batch, optimizer)
        results.append((state.params, metrics))
    (whole, m_whole), (split, m_split) = results
    assert m_whole["loss/pg"] != 0
    for key in ("loss/pg", "entropy", "clip_cov_frac" if loss == "clip_cov" else "token_weight_mean"):
        np.testing.assert_allclose(m_split[key], m_whole[key], rtol=1e-5, atol=1e-7)
    _assert_trees_close(split, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("tied", [True, False])
def test_completion_logprobs_use_the_models_output_projection(tied):
    """`logprobs.unembedding` is the matrix `models.unembed` multiplies by (tied embedding or lm head)."""
    cfg = models.get_config("nano", vocab_size=16, tie_embeddings=tied)
    params = models.init_params(cfg, jax.random.key(2))
    batch = _batch()
    logp, _ = jax.jit(
        lambda p: logprobs_lib.completion_logprobs(cfg, p, batch.tokens, batch.attention_mask, 5, chunk_size=2,
                                                   vocab_chunk_size=6)
    )(params)
    positions = models.positions_from_mask(batch.attention_mask)
    logits, _ = models.apply(cfg, params, batch.tokens, positions, batch.attention_mask)
    full = jax.nn.log_softmax(logits[:, 2:-1])
    expected = jnp.take_along_axis(full, batch.tokens[:, 3:, None], -1)[..., 0]
    np.testing.assert_allclose(logp, expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    "rl,message",
    [
        (dict(kl_target=0.1), "config.rl.kl_target=0.1: adapts the KL coefficient, but config.rl.kl_coef=0"),
        (dict(kl_in_reward=True), "config.rl.kl_in_reward=True: puts the KL penalty in the reward"),
        (dict(ref_reset_every=10), "config.rl.ref_reset_every=10: resets the KL reference policy"),
        (dict(token_selection="top"),
         "config.rl.token_selection='top': unknown; allowed: advantage_entropy, all, high_entropy"),
        (dict(token_selection_rho=0.0), "config.rl.token_selection_rho=0.0: must lie in (0.0, 1.0]"),
        (dict(tis_cap=-1.0), "config.rl.tis_cap=-1.0"),
        (dict(tis_level="seq"), "config.rl.tis_level='seq': unknown"),
        (dict(entropy_target=0.3, entropy_coef=2.0), "config.rl.entropy_coef=2.0: the adaptive entropy coefficient"),
        (dict(logprob_vocab_chunk_size=-1), "config.rl.logprob_vocab_chunk_size=-1: must be an integer >= 0"),
        (dict(loss="hapo", loss_kwargs=dict(beta=1.5)), "config.rl.loss_kwargs.beta=1.5: must lie in [0, 1]"),
        (dict(loss="steer", loss_kwargs=dict(mapping="cubic")), "config.rl.loss_kwargs.mapping='cubic': must be"),
        (dict(advantage="bnpo", advantage_kwargs=dict(r_min=1.0)), "config.rl.advantage_kwargs.r_max=1.0: must be >"),
    ],
)
def test_control_fields_are_validated_by_name(rl, message):
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.parse(_rl_config(**rl))
    assert message in str(info.value)


@pytest.mark.parametrize(
    "advantage,loss",
    [("remax", "ppo_clip"), ("gbpo", "gbpo"), ("grpo", "lp_reg"), ("rloo", "hapo"), ("hapo", "hapo"), ("bnpo", "steer"),
     ("canon", "ppo_clip")],
)
def test_methods_whose_inputs_the_loop_now_provides_are_accepted(advantage, loss):
    config_lib.parse(_rl_config(advantage=advantage, loss=loss))
