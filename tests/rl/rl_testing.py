"""Test helper: call kernels as one compiled program each instead of op by op.

On CPU, running a kernel eagerly compiles every primitive for every new shape, which costs seconds per
test; one `jax.jit` of the whole kernel costs a fraction of that. `compiled(module).fn(...)` behaves like
`module.fn(...)`, with every non-array argument (modes, hyper-parameters) treated as static.
"""

import functools

import jax
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
