"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=4 (see test_reward_model.py): the RM's scores with its
params sharded by the logical-axis rules and the rows over the batch axes, on several meshes, equal the one-device
scores. Exits non-zero on mismatch."""

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import models
from rl4llm import reward_model as rm
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.parallel import rules

CFG = models.get_config("nano", vocab_size=24, num_heads=4, num_kv_heads=2)


def main():
    params = rm.init_params(CFG, jax.random.key(0))
    params["head"]["kernel"] = jax.random.normal(jax.random.key(1), (CFG.hidden_size,))
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, CFG.vocab_size, size=(8, 14)).astype(np.int32)
    lengths, starts = rng.integers(2, 9, size=8), rng.integers(0, 5, size=8)  # pads on both sides
    mask = ((np.arange(14) >= starts[:, None]) & (np.arange(14) < (starts + lengths)[:, None])).astype(np.int32)
    expected = np.asarray(rm.score(CFG, params, jnp.asarray(tokens), jnp.asarray(mask)))
    for shape in [(4, 1, 1), (1, 4, 1), (1, 1, 2), (2, 1, 2), (1, 2, 2)]:
        devices = jax.devices()[: int(np.prod(shape))]
        mesh = mesh_lib.make_mesh(shape, devices)
        sharded = rules.place(params, rules.param_shardings(mesh, params, CFG))
        rows = rules.batch_sharding(mesh)
        got = np.asarray(rm.make_score_fn(CFG)(sharded, *rules.place((tokens, mask), (rows, rows))))
        if not np.allclose(got, expected, rtol=1e-5, atol=1e-5):
            raise SystemExit(f"mesh {shape}: {got} != {expected}")
    print("OK")


if __name__ == "__main__":
    main()
