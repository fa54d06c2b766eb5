"""Test helper: call kernels as one compiled program each instead of op by op.

On CPU, running a kernel eagerly compiles every primitive for every new shape, which costs seconds per
test; one `jax.jit` of the whole kernel costs a fraction of that. `compiled(module).fn(...)` behaves like
`module.fn(...)`, with every non-array argument (modes, hyper-parameters) treated as static.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


@functools.lru_cache(maxsize=None)
def _jitted(fn, static_argnums: tuple, static_argnames: tuple):
    return jax.jit(fn, static_argnums=static_argnums, static_argnames=static_argnames)


class compiled:  # noqa: N801 (used like a module)
    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        fn = getattr(self._module, name)
        if not callable(fn):
            return fn

        def call(*args, **kwargs):
            argnums = tuple(i for i, a in enumerate(args) if not _is_array(a))
            argnames = tuple(sorted(k for k, v in kwargs.items() if not _is_array(v)))
            return _jitted(fn, argnums, argnames)(*args, **kwargs)

        return call


def distinct_names(table: dict) -> list:
    """Registered names, one per function (aliases such as "vanilla" for "ppo_clip" are skipped)."""
    seen, names = set(), []
    for name in sorted(table):
        if table[name] not in seen:
            seen.add(table[name])
            names.append(name)
    return names


def random_loss_batch(seed: int, n: int = 6, t: int = 5):
    """(logp, old_logp, advantages [N], mask, extras) of a random batch; extras holds every extra standard
    loss input (key, entropy, proxy_logp, target_advantages, off_policy_mask: the last row and one token of the
    first are off-policy). Every row has at least one valid token."""
    k = jax.random.split(jax.random.PRNGKey(seed), 5)
    old = -jax.random.uniform(k[0], (n, t), minval=0.1, maxval=3.0)
    logp = old + 0.3 * jax.random.normal(k[1], (n, t))
    a = jax.random.normal(k[2], (n,))
    mask = (jax.random.uniform(k[3], (n, t)) < 0.7).astype(jnp.float32).at[:, 0].set(1.0)
    extras = dict(target_advantages=jax.random.normal(k[4], (n,)), key=jax.random.PRNGKey(0),
                  entropy=jax.random.uniform(k[4], (n, t)), proxy_logp=old + 0.5,
                  off_policy_mask=jnp.zeros((n, t)).at[-1].set(1.0).at[0, 0].set(1.0))
    return logp, old, a, mask, extras


# Hyper-parameters under which the token-selecting losses select several of a small batch's tokens
# (their defaults select one).
SELECTIVE_KWARGS = {
    "clip_cov": dict(clip_cov_ratio=0.2, clip_cov_lb=-1e9, clip_cov_ub=1e9),
    "kl_cov": dict(kl_cov_ratio=0.2, ppo_kl_coef=1.0),
    "lp_reg": dict(rho_neg=0.3),
}
