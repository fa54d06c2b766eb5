"""Logical-axis rules (MaxText style): params, optimizer state, batches and activations -> mesh axes.

Every param carries logical axis names (`models.param_logical_axes`: `vocab`, `embed`, `mlp`, `heads`,
`kv_heads`, `head_dim`); batches and activations lead with `batch`. A rule table maps each logical name to
mesh axes (`models.sharding.partition_spec` drops the ones that do not fit a given array):

  batch    -> (data, fsdp)   the rows of every batch and activation
  embed    -> fsdp           FSDP / ZeRO-3: each device holds 1/fsdp of every weight's width
                             ((fsdp, data) with `shard_params_over_data`: 1/(fsdp*data) of it)
  vocab, heads, kv_heads, mlp -> tensor    tensor parallelism (Megatron layout)
  head_dim -> replicated

(`RULES` is `models.sharding.DEFAULT_RULES`, the table the HF import places tensors with.) The params live in dicts keyed by layer index (no stacked `layers` axis is stored), so no rule is needed
for it. Optimizer state, reference params, the critic's trunk and head and the PRM's params are sharded
like the params they mirror: a state leaf whose key path ENDS with a param's key path (e.g.
`opt_state[1][0].mu["layers"][0]["attn"]["q_proj"]["kernel"]`) gets that param's logical axes; every other
leaf (step counters, PRNG keys, adaptive coefficients) is replicated.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from rl4llm.models import ModelConfig, param_logical_axes
from rl4llm.models import sharding as sharding_lib
from rl4llm.models import value_head

Rules = Mapping[str, "str | tuple[str, ...] | None"]

BATCH_AXIS = "batch"
RULES: Rules = sharding_lib.DEFAULT_RULES


def logical_axis_rules(shard_params_over_data: bool = False) -> dict:
    """`RULES`, with the params' width split over (fsdp, data) when `shard_params_over_data` (ZeRO-3 over every
    data-parallel device instead of the fsdp axis alone)."""
    rules = dict(RULES)
    if shard_params_over_data:
        rules["embed"] = ("fsdp", "data")
    return rules


def _key_name(key) -> Any:
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return getattr(key, attr)
    raise TypeError(f"unknown pytree key {key!r}")


def _path(path) -> tuple:
    return tuple(_key_name(k) for k in path)


def logical_axes_by_path(model_cfg: ModelConfig) -> dict[tuple, tuple]:
    """{param key path: logical axes} of the decoder's params and of a value head (`("head", "kernel")`)."""
    is_axes = lambda x: isinstance(x, tuple)  # noqa: E731
    trees = (param_logical_axes(model_cfg), {"head": value_head.head_logical_axes()})
    return {_path(p): axes for tree in trees for p, axes in jax.tree_util.tree_flatten_with_path(tree, is_axes)[0]}


def _leaf_spec(path: tuple, shape: tuple, mesh: Mesh, axes_by_path: dict, rules: Rules) -> PartitionSpec:
    """The spec of the longest param path that ends `path` and has `shape`'s rank; replicated if none."""
    for start in range(len(path)):
        axes = axes_by_path.get(path[start:])
        if axes is not None and len(axes) == len(shape):
            return sharding_lib.partition_spec(axes, shape, mesh, rules)
    return PartitionSpec()


def tree_shardings(mesh: Mesh, tree: Any, model_cfg: ModelConfig, rules: Rules = RULES) -> Any:
    """NamedSharding of every array leaf of `tree` (params, a TrainState, its optimizer state, ...; concrete or
    abstract leaves), same tree structure, from the logical axes of the params each leaf mirrors."""
    axes_by_path = logical_axes_by_path(model_cfg)
    return jax.tree_util.tree_map_with_path(
        lambda p, x: NamedSharding(mesh, _leaf_spec(_path(p), np.shape(x), mesh, axes_by_path, rules)), tree
    )


def param_shardings(mesh: Mesh, params: Any, model_cfg: ModelConfig, rules: Rules = RULES) -> Any:
    """NamedSharding of every param (the tree of `params`, e.g. with LoRA adapters)."""
    return tree_shardings(mesh, params, model_cfg, rules)


def batch_sharding(mesh: Mesh, rules: Rules = RULES) -> NamedSharding:
    """Rows (leading axis) over the batch rule's mesh axes, every other axis replicated; for any rank >= 1."""
    axes = sharding_lib.partition_spec((BATCH_AXIS,), (mesh.size,), mesh, rules)[0]
    return NamedSharding(mesh, PartitionSpec(axes))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def place(tree: Any, shardings: Any) -> Any:
    """`tree` laid out with `shardings` (one sharding, or a tree of them).

    Host (numpy) leaves, and process-local arrays going onto a mesh that spans several processes, become global
    arrays through `jax.make_array_from_callback`: each process builds only its own devices' shards from its
    copy, so every process must hold the same values (the data of a step is a pure function of the step).
    Other device arrays are resharded with `jax.device_put` (every process calls it).
    """
    if isinstance(shardings, jax.sharding.Sharding):
        shardings = jax.tree.map(lambda _: shardings, tree)

    def put(x, sharding):
        if isinstance(x, jax.Array) and x.is_fully_addressable == sharding.is_fully_addressable:
            return jax.device_put(x, sharding)
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):  # typed PRNG key
            return jax.random.wrap_key_data(put(jax.random.key_data(x), sharding), impl=jax.random.key_impl(x))
        x = np.asarray(x)  # a host value, or a process-local array going onto a multi-process mesh
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, tree, shardings)


def shard_state(mesh: Mesh, state: Any, model_cfg: ModelConfig, rules: Rules = RULES) -> Any:
    """`state` (params, optimizer state, ...) placed with `tree_shardings`."""
    return place(state, tree_shardings(mesh, state, model_cfg, rules))


def constrain_batch(tree: Any, sharding: NamedSharding | None) -> Any:
    """Inside jit: every leaf's rows constrained to `sharding` (`batch_sharding`); unchanged when None."""
    if sharding is None:
        return tree
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)
