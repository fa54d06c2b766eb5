"""PPO critic: value head, critic step (separate and shared trunk), warm-up, explained variance, checkpoints."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl4llm import models
from rl4llm.models import value_head
from rl4llm.rl import aggregation, losses
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train import learner as learner_lib

MODEL_CFG = models.get_config("nano", vocab_size=16)
N, P, T = 4, 3, 5


@pytest.fixture(scope="module")
def params():
    return models.init_params(MODEL_CFG, jax.random.key(0))


def _batches():
    k1, k2, k3 = jax.random.split(jax.random.key(1), 3)
    tokens = jax.random.randint(k1, (N, P + T), 4, 16)
    lengths = jnp.array([5, 2, 4, 3])
    mask = (jnp.arange(T)[None] < lengths[:, None]).astype(jnp.float32)
    attention = jnp.concatenate([jnp.ones((N, P), jnp.int32), mask.astype(jnp.int32)], 1)
    returns = jax.random.normal(k2, (N, T))
    critic_batch = critic_lib.CriticBatch(tokens=tokens, attention_mask=attention, completion_mask=mask,
                                          old_values=jnp.zeros((N, T)), returns=returns)
    actor_batch = learner_lib.LearnerBatch(
        tokens=tokens, attention_mask=attention, completion_mask=mask,
        advantages=jax.random.normal(k3, (N, T)) * mask, old_logp=jnp.zeros((N, T)), sampler_logp=jnp.zeros((N, T)),
    )
    return actor_batch, critic_batch


def _state(params, *, shared_trunk, critic_optimizer, optimizer=None):
    critic_params = value_head.init_critic(MODEL_CFG, params, shared_trunk=shared_trunk)
    optimizer = optimizer or optax.sgd(0.0)
    return learner_lib.TrainState(
        params=jax.tree.map(jnp.copy, params), opt_state=optimizer.init(params), ref_params=None,
        key=jax.random.key_data(jax.random.key(0)),
    ).with_extras(critic=critic_lib.CriticState(params=critic_params, opt_state=critic_optimizer.init(critic_params)))


def _ccfg(micro=0, clip=100.0):
    return critic_lib.CriticConfig(cliprange_value=clip, agg_mode="token-mean", micro_batch_size=micro)


def test_values_read_the_state_that_predicts_each_completion_token(params):
    _, cb = _batches()
    head = {"kernel": jnp.arange(MODEL_CFG.hidden_size, dtype=jnp.float32) / 10, "bias": jnp.asarray(0.3)}
    values = value_head.completion_values(MODEL_CFG, {"trunk": params, "head": head}, None, cb.tokens,
                                          cb.attention_mask, T)
    hidden, _ = models.forward(MODEL_CFG, params, cb.tokens, models.positions_from_mask(cb.attention_mask),
                               cb.attention_mask)
    expected = np.asarray(hidden)[:, P - 1 : P + T - 1] @ np.asarray(head["kernel"]) + 0.3  # V_t = h_{P+t-1}·w + b
    np.testing.assert_allclose(values, expected, rtol=1e-5, atol=1e-5)
    # Shared trunk: the head alone reads the policy's trunk; a zero head gives V = 0.
    shared = value_head.completion_values(MODEL_CFG, {"head": head}, params, cb.tokens, cb.attention_mask, T)
    np.testing.assert_allclose(shared, values, rtol=1e-6)
    zero = value_head.init_critic(MODEL_CFG, params, shared_trunk=True)
    assert not np.any(value_head.completion_values(MODEL_CFG, zero, params, cb.tokens, cb.attention_mask, T))


def test_explained_variance_hand_case():
    # R = [1, 2, 3] (var 1), V = [1, 2, 2]: R − V = [0, 0, 1], unbiased var 1/3 -> 1 − (1/3)/(1 + 1e-5)
    r, v, m = jnp.array([[1.0, 2.0, 3.0, 9.0]]), jnp.array([[1.0, 2.0, 2.0, 0.0]]), jnp.array([[1.0, 1.0, 1.0, 0.0]])
    np.testing.assert_allclose(losses.explained_variance(v, r, m), 1 - (1 / 3) / (1 + 1e-5), rtol=1e-6)
    np.testing.assert_allclose(losses.explained_variance(r, r, m), 1.0)


def test_separate_critic_learns_a_fixed_batch_and_never_touches_the_actor(params):
    _, cb = _batches()
    opt = optax.adam(1e-2)
    state = _state(params, shared_trunk=False, critic_optimizer=opt)
    step = critic_lib.make_critic_step(MODEL_CFG, _ccfg(), opt)
    first = None
    for _ in range(8):
        state, metrics = step(state, cb)
        first = first if first is not None else float(metrics["critic/vf_loss"])
    assert float(metrics["critic/vf_loss"]) < 0.7 * first
    jax.tree.map(np.testing.assert_array_equal, state.params, params)  # the actor is bitwise unchanged


def test_critic_step_is_invariant_to_micro_batching(params):
    _, cb = _batches()
    cb = cb.replace(old_values=cb.returns * 0.5)  # clipping active on some tokens
    opt = optax.sgd(0.1)
    outs = []
    for micro in (0, 2):
        state = _state(params, shared_trunk=False, critic_optimizer=opt)
        # a non-zero head, so the trunk gets gradient too
        state = state.with_extras(critic=state.extra("critic").replace(params={**state.extra("critic").params, "head": {
            "kernel": jnp.full((MODEL_CFG.hidden_size,), 0.1), "bias": jnp.asarray(0.0)}}))
        outs.append(critic_lib.make_critic_step(MODEL_CFG, _ccfg(micro, clip=0.2), opt)(state, cb))
    np.testing.assert_allclose(outs[0][1]["critic/vf_loss"], outs[1][1]["critic/vf_loss"], rtol=1e-5)
    np.testing.assert_allclose(outs[0][1]["critic/vf_clip_frac"], outs[1][1]["critic/vf_clip_frac"], rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 outs[0][0].extra("critic").params, outs[1][0].extra("critic").params)


LCFG = learner_lib.LearnerConfig(loss="ppo_clip", loss_kwargs=(), agg_mode="token-mean", kl_coef=0.0, kl_kind="k3",
                                 entropy_coef=0.0, temperature=1.0, micro_batch_size=0, logprob_chunk_size=4,
                                 use_old_logp=False)
HEAD = {"kernel": jnp.full((MODEL_CFG.hidden_size,), 0.1), "bias": jnp.asarray(0.0)}  # non-zero: the trunk gets ∇V


def _shared_state(params, opt, copt):
    s = _state(params, shared_trunk=True, critic_optimizer=copt, optimizer=opt)
    return s.with_extras(critic=s.extra("critic").replace(params={"head": jax.tree.map(jnp.copy, HEAD)}))


def _two_pass_shared_trunk_step(lcfg, ccfg, opt, copt, state, ab, cb, key):
    """Reference of the joint step with TWO decoder passes: the value loss's gradients w.r.t. the head and the
    policy params from a forward of its own (`value_head.completion_values`), then the learner's policy gradients
    plus value_loss_coef x the value gradient on the policy params."""
    weights = aggregation.aggregation_weights(cb.completion_mask, ccfg.agg_mode)

    def value_loss(critic_params, policy_params, mb, w):
        values = value_head.completion_values(MODEL_CFG, critic_params, policy_params, mb.tokens, mb.attention_mask, T)
        loss, m = losses.value_loss(values, mb.old_values, mb.returns, mb.completion_mask, clip=ccfg.cliprange_value,
                                    agg_mode=ccfg.agg_mode, agg_weights=w)
        return loss, m["vf_clip_frac"] * jnp.sum(mb.completion_mask)

    m = ccfg.micro_batch_size or N
    head_grads = trunk_grads = None
    vf_loss = clipped = 0.0
    for i in range(N // m):
        rows = slice(i * m, (i + 1) * m)
        (loss, clip), (gh, gt) = jax.value_and_grad(value_loss, argnums=(0, 1), has_aux=True)(
            state.extra("critic").params, state.params, jax.tree.map(lambda x: x[rows], cb), weights[rows])
        head_grads = gh if head_grads is None else jax.tree.map(jnp.add, head_grads, gh)
        trunk_grads = gt if trunk_grads is None else jax.tree.map(jnp.add, trunk_grads, gt)
        vf_loss, clipped = vf_loss + loss, clipped + clip
    pg = learner_lib.policy_gradients(MODEL_CFG, lcfg, state, ab, key)
    pg = pg._replace(grads=jax.tree.map(lambda a, b: a + ccfg.value_loss_coef * b, pg.grads, trunk_grads))
    new_state, metrics = learner_lib.apply_policy_gradients(opt, state, ab, pg)
    updates, opt_state = copt.update(head_grads, state.extra("critic").opt_state, state.extra("critic").params)
    critic = state.extra("critic").replace(params=optax.apply_updates(state.extra("critic").params, updates), opt_state=opt_state)
    metrics.update({"critic/vf_loss": vf_loss, "critic/vf_clip_frac": clipped / jnp.sum(cb.completion_mask),
                    "critic/grad_norm": optax.tree.norm(head_grads)})
    return new_state.with_extras(critic=critic), metrics


def test_one_pass_shared_trunk_step_equals_the_two_pass_reference(params):
    """One decoder forward per micro-batch gives the same updated params, critic params and metrics as a separate
    value-loss pass added to the learner's gradients (sgd: the updates are the gradients, scaled), and the same
    with 2 micro-batches as with one."""
    micro = 2
    ab, cb = _batches()
    cb = cb.replace(old_values=cb.returns * -0.5)  # V ≈ 0 clipped towards −R/2 on the tokens with |R| > 0.4
    opt, copt = optax.sgd(1.0), optax.sgd(1.0)
    lcfg = dataclasses.replace(LCFG, micro_batch_size=micro)
    ccfg = critic_lib.CriticConfig(0.2, "token-mean", micro, value_loss_coef=0.3)
    key = jax.random.key(3)
    one, metrics = critic_lib.make_shared_trunk_step(MODEL_CFG, lcfg, ccfg, opt, copt)(
        _shared_state(params, opt, copt), ab, cb, key)
    two_pass = jax.jit(functools.partial(_two_pass_shared_trunk_step, lcfg, ccfg, opt, copt))
    ref, ref_metrics = two_pass(_shared_state(params, opt, copt), ab, cb, key)
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # noqa: E731
    jax.tree.map(close, (one.params, one.extra("critic").params), (ref.params, ref.extra("critic").params))
    assert metrics.keys() == ref_metrics.keys() and "critic/vf_clip_frac" in metrics
    for k in metrics:
        close(metrics[k], ref_metrics[k])
    assert 0 < float(metrics["critic/vf_clip_frac"]) < 1
    # micro-batch invariance: the same update as one whole-batch micro-batch
    whole, whole_metrics = critic_lib.make_shared_trunk_step(
        MODEL_CFG, LCFG, dataclasses.replace(ccfg, micro_batch_size=0), opt, copt)(
        _shared_state(params, opt, copt), ab, cb, key)
    jax.tree.map(close, (one.params, one.extra("critic").params), (whole.params, whole.extra("critic").params))
    for k in ("loss/pg", "critic/vf_loss", "critic/vf_clip_frac", "critic/grad_norm", "grad_norm"):
        close(metrics[k], whole_metrics[k])


def test_shared_trunk_step_updates_both_and_warm_up_updates_only_the_head(params):
    ab, cb = _batches()
    opt, copt = optax.sgd(0.1), optax.sgd(0.1)

    # Warm-up (critic only): the head moves, the actor (trunk included) is bitwise unchanged.
    warm, _ = critic_lib.make_critic_step(MODEL_CFG, _ccfg(), copt)(_shared_state(params, opt, copt), cb)
    jax.tree.map(np.testing.assert_array_equal, warm.params, params)
    assert not np.allclose(warm.extra("critic").params["head"]["kernel"], HEAD["kernel"])

    # Joint step: the trunk's update is the policy gradient plus value_loss_coef x the value gradient.
    step = lambda coef: critic_lib.make_shared_trunk_step(  # noqa: E731
        MODEL_CFG, LCFG, critic_lib.CriticConfig(100.0, "token-mean", 0, coef), opt, copt)(
        _shared_state(params, opt, copt), ab, cb, jax.random.key(3))
    (with_v, metrics), (without_v, _) = step(1.0), step(0.0)
    assert np.isfinite(metrics["critic/vf_loss"]) and np.isfinite(metrics["loss/pg"])
    actor_only = learner_lib.make_learner_step(MODEL_CFG, LCFG, opt)(_shared_state(params, opt, copt), ab,
                                                                     jax.random.key(3))[0]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), without_v.params,
                 actor_only.params)
    # ∇ of the value loss w.r.t. the policy params (token-mean): its own forward pass
    value_grads = jax.grad(lambda p: losses.value_loss(
        value_head.completion_values(MODEL_CFG, {"head": HEAD}, p, cb.tokens, cb.attention_mask, T),
        cb.old_values, cb.returns, cb.completion_mask, clip=100.0, agg_mode="token-mean")[0])(params)
    # sgd(0.1): Δθ(with) − Δθ(without) = −0.1·∇V-loss
    jax.tree.map(lambda a, b, g: np.testing.assert_allclose(a - b, -0.1 * g, atol=1e-6),
                 with_v.params, without_v.params, value_grads)
    np.testing.assert_allclose(with_v.extra("critic").params["head"]["kernel"], warm.extra("critic").params["head"]["kernel"],
                               rtol=1e-6)


def test_critic_checkpoint_round_trip(params, tmp_path):
    critic = value_head.init_critic(MODEL_CFG, params, shared_trunk=False)
    critic["head"]["bias"] = jnp.asarray(1.5)
    value_head.save_critic(str(tmp_path / "critic"), critic)
    abstract = jax.eval_shape(lambda: critic)
    restored = value_head.load_critic(str(tmp_path / "critic"), abstract)
    jax.tree.map(np.testing.assert_array_equal, restored, critic)
    with pytest.raises(ValueError, match="does not match this critic"):
        value_head.load_critic(str(tmp_path / "critic"), {"head": abstract["head"]})


def test_prm_step_fits_outcome_labels_and_leaves_the_policy_alone(params):
    from rl4llm.rl import prime as prime_rewards
    from rl4llm.train.companions import prime as prime_lib

    _, cb = _batches()
    opt = optax.adam(1e-2)
    state = _state(params, shared_trunk=True, critic_optimizer=optax.sgd(0.0)).with_extras(
        critic=None, prm=prime_lib.init_prm_state(params, opt))
    pcfg = prime_lib.PRMConfig(beta=0.05, micro_batch_size=2, logprob_chunk_size=4)
    prm_logp, ref_logp = prime_lib.make_logprobs_fn(MODEL_CFG, pcfg, T)(state.extra("prm"), cb.tokens, cb.attention_mask)
    np.testing.assert_array_equal(prm_logp, ref_logp)  # π_φ starts as π_ref
    labels = jnp.array([1.0, 0.0, 1.0, 0.0])
    batch = prime_lib.PRMBatch(tokens=cb.tokens, attention_mask=cb.attention_mask, completion_mask=cb.completion_mask,
                               ref_logp=ref_logp, labels=labels)
    step = prime_lib.make_prm_step(MODEL_CFG, pcfg, opt)
    losses_seen = []
    for _ in range(6):
        state, metrics = step(state, batch)
        losses_seen.append(float(metrics["prm/loss"]))
    np.testing.assert_allclose(losses_seen[0], np.log(2), rtol=1e-6)
    assert losses_seen[-1] < losses_seen[0] - 0.05
    assert float(metrics["prm/accuracy"]) == 1.0  # every sequence reward now has its label's sign
    prm_logp = prime_lib.make_logprobs_fn(MODEL_CFG, pcfg, T)(state.extra("prm"), cb.tokens, cb.attention_mask)[0]
    z = jnp.sum(prime_rewards.implicit_process_rewards(prm_logp, ref_logp, cb.completion_mask), -1)
    assert np.all(np.sign(z) == np.asarray(2 * labels - 1))
    jax.tree.map(np.testing.assert_array_equal, state.params, params)
