"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=8 (see test_rl_sharding.py).

Computes kernels with inputs sharded over a `data` mesh axis of 8 devices and compares with the same
computation on one device: GRPO + PPO loss/gradient (Auto and Explicit axis types), and the kernels that
need a whole axis at once (group ranks, sorts, scans, the token-selecting losses clip_cov / kl_cov / lp_reg /
hapo / steer, token-level group statistics, vocabulary-chunked log-probs; Explicit axes). Exits non-zero
on mismatch.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from rl4llm.rl import advantages, entropy, losses

N, T, G, H, V = 32, 12, 8, 8, 16


def ppo_step(logp, old_logp, scores, group_ids, mask, *, agg_mode):
    adv = advantages.grpo(scores, group_ids, num_groups=G)

    def loss_fn(lp):
        return losses.ppo_clip(lp, old_logp, adv, mask, agg_mode=agg_mode)

    (loss, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(logp)
    return adv, loss, metrics, grad


def whole_axis_kernels(logp, old_logp, scores, group_ids, mask, values, hidden, targets, unembed):
    adv = advantages.canon(scores, group_ids, values[:, 0], num_groups=G)
    gae_adv, returns = advantages.gae(values, values * 0.5, mask, gamma=0.9, lam=0.95)
    hapo_adv = advantages.hapo(scores, group_ids, jnp.sum(mask, -1), num_groups=G)
    bnpo_adv = advantages.bnpo(scores, group_ids, num_groups=G, reward_components=jnp.stack([scores, values[:, 1] > 0], -1))
    ent = jnp.abs(values) + 0.1

    def loss_fn(lp, hid):
        key = jax.random.PRNGKey(0)
        clip_cov = losses.clip_cov(lp, old_logp, adv, mask, key, clip_cov_ratio=0.1, clip_cov_lb=-1e9)[0]
        kl_cov = losses.kl_cov(lp, old_logp, adv, mask, kl_cov_ratio=0.1)[0]
        lp_reg = losses.lp_reg(lp, old_logp, adv, mask, old_logp + 0.5, rho_neg=0.2)[0]
        hapo = losses.hapo(lp, old_logp, adv, mask, ent)[0]
        steer = losses.steer(lp, old_logp, adv, mask, ent)[0]
        chunk_logp, chunk_ent = entropy.chunked_logprobs_and_entropy(hid, targets, unembed, chunk_size=5,
                                                                     vocab_chunk_size=6)
        return (clip_cov + kl_cov + lp_reg + hapo + steer + jnp.sum(chunk_logp * mask)
                + jnp.sum(chunk_ent * mask))

    loss, grads = jax.value_and_grad(loss_fn, argnums=(0, 1))(logp, hidden)
    return adv, gae_adv, returns, hapo_adv, bnpo_adv, loss, grads


def compare(fn, inputs, mesh):
    ref = fn(*jax.device_put(inputs, jax.devices()[0]))
    sharded = tuple(jax.device_put(x, NamedSharding(mesh, P("data", *[None] * (x.ndim - 1)))) for x in inputs)
    out = fn(*sharded)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)


def main():
    assert jax.device_count() == 8, jax.devices()
    k = jax.random.split(jax.random.PRNGKey(0), 9)
    old = -jax.random.uniform(k[0], (N, T), minval=0.1, maxval=3.0)
    logp = old + 0.3 * jax.random.normal(k[1], (N, T))
    scores = jax.random.bernoulli(k[2], 0.5, (N,)).astype(jnp.float32)
    group_ids = jax.random.permutation(k[3], jnp.arange(N) % G)  # non-contiguous groups
    mask = (jax.random.uniform(k[4], (N, T)) < 0.7).astype(jnp.float32)
    values = jax.random.normal(k[5], (N, T))
    hidden = jax.random.normal(k[6], (N, T, H))
    targets = jax.random.randint(k[7], (N, T), 0, V)
    unembed = jax.random.normal(k[8], (H, V))
    base = (logp, old, scores, group_ids, mask)

    for axis_type, agg_mode in ((AxisType.Auto, "seq-mean-token-mean"), (AxisType.Explicit, "token-mean")):
        mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
        compare(jax.jit(functools.partial(ppo_step, agg_mode=agg_mode)), base, mesh)
    # Explicit axes are the strict case for whole-axis kernels (under Auto, XLA gathers by itself).
    # The unembedding matrix is a replicated constant (its leading axis is not a batch axis).
    fn = jax.jit(lambda *xs: whole_axis_kernels(*xs, unembed))
    compare(fn, base + (values, hidden, targets), jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,)))
    print("OK")


if __name__ == "__main__":
    main()
