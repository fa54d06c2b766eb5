"""Partition specs from logical axis names (the decoder's params: `decoder.init_param_shardings`).

A rule maps a logical axis name (`vocab`, `embed`, `mlp`, `heads`, `kv_heads`, `head_dim`) to a mesh axis
name (or None: replicated). A rule whose mesh axis is absent from the mesh, has size 1, does not divide the
dimension, or is already used by an earlier dimension of the same param is dropped for that param, so
one rule table fits every model and mesh (e.g. 2 kv heads on a tensor axis of 4 stay replicated).
"""

from __future__ import annotations

import math
from typing import Mapping

import jax
from jax.sharding import Mesh, PartitionSpec


# FSDP over the model width, tensor parallelism over heads / MLP / vocabulary (Megatron layout); the rows of
# batches and activations over the data-parallel axes.
DEFAULT_RULES: Mapping[str, str | tuple[str, ...] | None] = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "mlp": "tensor",
    "heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
}


def partition_spec(
    axes: tuple[str | None, ...],
    shape: tuple[int, ...],
    mesh: Mesh,
    rules: Mapping[str, str | tuple[str, ...] | None],
) -> PartitionSpec:
    """PartitionSpec of one array with logical `axes` and `shape` (see the module docstring).

    A rule may name several mesh axes (MaxText style, e.g. "batch" -> ("data", "fsdp")): the dimension is
    split over their product. Mesh axes that are absent, of size 1 or already used are dropped, then
    trailing ones until the product divides the dimension.
    """
    used, spec = set(), []
    for name, size in zip(axes, shape):
        rule = rules.get(name) if name is not None else None
        mesh_axes = [a for a in ((rule,) if isinstance(rule, str) else rule or ())
                     if a in mesh.shape and mesh.shape[a] > 1 and a not in used]
        while mesh_axes and size % math.prod(mesh.shape[a] for a in mesh_axes):
            mesh_axes.pop()
        used.update(mesh_axes)
        spec.append(None if not mesh_axes else mesh_axes[0] if len(mesh_axes) == 1 else tuple(mesh_axes))
    return PartitionSpec(*spec)


def constrain_rows(x: jax.Array) -> jax.Array:
    """`x` [B, ...] with its rows split over the `batch` rule's axes of the mesh in context (`jax.set_mesh`), the
    other axes replicated, so activations stay batch-sharded and FSDP gathers weights instead (without it the
    compiler may split the residual stream's width like the weights' and reshuffle it around every layer).
    Unchanged outside a mesh context."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    spec = partition_spec(("batch",) + (None,) * (x.ndim - 1), x.shape, mesh, DEFAULT_RULES)
    return jax.lax.with_sharding_constraint(x, spec)
