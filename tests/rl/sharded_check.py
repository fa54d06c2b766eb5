"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=8 (see test_sharding.py).

Compares GRPO advantages and the PPO loss, metrics and gradient computed with inputs sharded over a
`data` mesh axis of 8 devices (Auto and Explicit axis types) against the same computation on one
device. Exits non-zero on mismatch.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from rl4llm.rl import advantages, losses

N, T, G = 32, 12, 8


def step(logp, old_logp, scores, group_ids, mask, *, agg_mode):
    adv = advantages.grpo(scores, group_ids, num_groups=G)

    def loss_fn(lp):
        return losses.ppo_clip(lp, old_logp, adv, mask, agg_mode=agg_mode)

    (loss, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(logp)
    return adv, loss, metrics, grad


def main():
    assert jax.device_count() == 8, jax.devices()
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    old = -jax.random.uniform(k[0], (N, T), minval=0.1, maxval=3.0)
    logp = old + 0.3 * jax.random.normal(k[1], (N, T))
    scores = jax.random.bernoulli(k[2], 0.5, (N,)).astype(jnp.float32)
    group_ids = jax.random.permutation(k[3], jnp.arange(N) % G)  # non-contiguous groups
    mask = (jax.random.uniform(k[4], (N, T)) < 0.7).astype(jnp.float32)
    inputs = (logp, old, scores, group_ids, mask)
    on_one_device = jax.device_put(inputs, jax.devices()[0])

    for agg_mode in ("token-mean", "seq-mean-token-mean"):
        fn = jax.jit(functools.partial(step, agg_mode=agg_mode))
        ref = fn(*on_one_device)
        for axis_type in (AxisType.Auto, AxisType.Explicit):
            mesh = jax.make_mesh((8,), ("data",), axis_types=(axis_type,))
            sharded = tuple(jax.device_put(x, NamedSharding(mesh, P("data", *[None] * (x.ndim - 1)))) for x in inputs)
            out = fn(*sharded)
            assert len(out[3].sharding.device_set) == 8, out[3].sharding
            for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(ref)):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
    print("OK")


if __name__ == "__main__":
    main()
