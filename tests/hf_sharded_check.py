"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=8 with a HF model directory as argv[1]
(see test_hf_checkpoint.py): imports it onto a (fsdp=2, tensor=4) mesh and compares with the unsharded
import (values, placements, logits). Prints OK; exits non-zero on mismatch."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, PartitionSpec as P

from rl4llm import models
from rl4llm.models import hf_checkpoint

model_dir = sys.argv[1]
# Auto axes: the decoder leaves the layout of activations to the compiler.
mesh = jax.make_mesh((2, 4), ("fsdp", "tensor"), axis_types=(AxisType.Auto, AxisType.Auto))
cfg, params = hf_checkpoint.load_hf_checkpoint(model_dir)
cfg_sharded, sharded = hf_checkpoint.load_hf_checkpoint(model_dir, mesh=mesh)
assert cfg_sharded == cfg
jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, sharded)
layer = sharded["layers"][0]
expected = {
    "embed [vocab 96, embed 32]": (sharded["embed"], P("tensor", "fsdp")),
    "q_proj [embed, heads 4, head_dim]": (layer["attn"]["q_proj"]["kernel"], P("fsdp", "tensor", None)),
    "k_proj [embed, kv_heads 2, head_dim]: 2 kv heads do not split 4 ways": (
        layer["attn"]["k_proj"]["kernel"], P("fsdp", None, None)),
    "down_proj [mlp 64, embed]": (layer["mlp"]["down_proj"]["kernel"], P("tensor", "fsdp")),
}
for what, (array, spec) in expected.items():
    assert array.sharding.spec == spec and array.sharding.mesh == mesh, (what, array.sharding)
    assert len(array.addressable_shards) == 8, what
tokens = jnp.asarray(np.random.default_rng(0).integers(0, cfg.vocab_size, (2, 10)), jnp.int32)
mask = jnp.ones_like(tokens)
apply = jax.jit(models.apply, static_argnums=0)
ref, _ = apply(cfg, params, tokens, models.positions_from_mask(mask), mask)
out, _ = apply(cfg, sharded, tokens, models.positions_from_mask(mask), mask)
np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5, rtol=0)
print("OK")
