"""Device meshes of the learner and the sampler, from `config.mesh`.

Both meshes have the axes `data`, `fsdp`, `tensor` (`MESH_AXES`): `data` and `fsdp` split the batch,
`fsdp` also splits the params' width (ZeRO-3 / FSDP: each device holds 1/fsdp of every weight and the
compiler all-gathers a layer's weights when it needs them), `tensor` splits heads, MLP width and vocabulary
(Megatron-style tensor parallelism). Sizes come from `config.mesh.{data,fsdp,tensor}`; one of them may be
-1, "all the devices the others leave".

The sampler's mesh (`config.mesh.sampler`), following Tunix's per-role meshes:
  "shared":        the learner's mesh itself (default; the sampler reads the learner's arrays as they are);
  "colocated":     the same devices in another layout (`config.mesh.sampler_{data,fsdp,tensor}`, e.g. more data
                   parallelism and no fsdp for decoding); the weights are resharded to it after each update;
  "disaggregated": the last `config.mesh.sampler_devices` devices, laid out by `sampler_{data,fsdp,tensor}`; the
                   learner gets the others. Weights are copied across after each update.

The judge models' mesh (`config.mesh.judges`: the outcome RM, the learned PRM, the generative verifier, placed by
`parallel.judges`):
  "shared":        the learner's mesh itself (default);
  "disaggregated": the last `config.mesh.judge_devices` of the devices the sampler leaves to the learner, laid out
                   by `judge_{data,fsdp,tensor}`; the learner gets the others. The devices run in the order
                   [learner | judges | sampler].
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

MESH_AXES = ("data", "fsdp", "tensor")
SAMPLER_PLACEMENTS = ("shared", "colocated", "disaggregated")
JUDGE_PLACEMENTS = ("shared", "disaggregated")


def mesh_shape(sizes, num_devices: int, *, field: str = "config.mesh.") -> tuple[int, ...]:
    """Sizes of (data, fsdp, tensor) from the fields `<prefix>axis` of `sizes` (`config.mesh`) (>= 1, or -1 for "the rest"), for `num_devices`
    devices, where `field` = `config.mesh.<prefix>` names the fields in errors.

    At most one size is -1; the product must equal `num_devices`.
    """
    prefix = field.removeprefix("config.mesh.")
    values = {axis: int(getattr(sizes, prefix + axis)) for axis in MESH_AXES}
    bad = [f"{field}{a}={v}" for a, v in values.items() if v < 1 and v != -1]
    if bad:
        raise ValueError(f"{', '.join(bad)}: mesh axis sizes must be >= 1, or -1 for 'the remaining devices'.")
    rest = [a for a, v in values.items() if v == -1]
    if len(rest) > 1:
        raise ValueError(f"{' and '.join(f'{field}{a}' for a in rest)} are -1: at most one mesh axis may be -1 (the rest).")
    fixed = math.prod(v for v in values.values() if v != -1)
    if rest:
        if num_devices % fixed:
            raise ValueError(
                f"{field}{rest[0]}=-1: the other axes ({fixed} devices) do not divide the {num_devices} devices."
            )
        values[rest[0]] = num_devices // fixed
    shape = tuple(values[a] for a in MESH_AXES)
    if math.prod(shape) != num_devices:
        raise ValueError(
            f"{field}{{data,fsdp,tensor}}: data x fsdp x tensor = {' x '.join(map(str, shape))} = {math.prod(shape)} devices, but "
            f"{num_devices} are available; set the sizes so their product is {num_devices} (or one of them to -1)."
        )
    return shape


def make_mesh(shape: Sequence[int], devices: Sequence[jax.Device], *, whole_slice: bool | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh of `devices` (Auto axes: the compiler places activations).

    On TPU/GPU `jax.make_mesh` orders the devices by the interconnect topology when they are a whole slice
    (`whole_slice`; default: all devices of the platform, or a TPU topology's compile-only devices,
    `parallel.tpu.topology_devices`); a subset (disaggregated placement) is laid out in the given order.
    """
    types = (AxisType.Auto,) * len(MESH_AXES)
    if whole_slice is None:
        whole_slice = len(devices) == jax.device_count()
    if whole_slice:
        return jax.make_mesh(tuple(shape), MESH_AXES, axis_types=types, devices=devices)
    return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=types)


@dataclasses.dataclass(frozen=True)
class Meshes:
    """The learner's mesh, the sampler's (the same object when the placement is "shared") and the judge models'
    (the learner's when `config.mesh.judges` is "shared")."""

    learner: Mesh
    sampler: Mesh
    judges: Mesh
    placement: str = "shared"

    @property
    def shared(self) -> bool:
        return self.learner is self.sampler


def split_last(devices: list, k: int, field: str, role: str) -> tuple[list, list]:
    """(the first len - k devices, the last k) for a disaggregated `role`; ValueError naming `field` unless
    0 < k < len(devices) (the learner keeps at least one)."""
    if not 0 < k < len(devices):
        raise ValueError(
            f"{field}={k}: a disaggregated {role} needs between 1 and {len(devices) - 1} of the {len(devices)} "
            f"devices (the learner gets the rest)."
        )
    return devices[: len(devices) - k], devices[len(devices) - k :]


def meshes_from_config(mesh_cfg, devices: Sequence[jax.Device] | None = None) -> Meshes:
    """The learner's, the sampler's and the judges' meshes of `config.mesh` over `devices` (default: all of them),
    in the order [learner | judges | sampler] when disaggregated."""
    devices = list(jax.devices() if devices is None else devices)
    placement = mesh_cfg.sampler
    if placement not in SAMPLER_PLACEMENTS:
        raise ValueError(f"config.mesh.sampler={placement!r}: must be one of {SAMPLER_PLACEMENTS}.")
    if mesh_cfg.judges not in JUDGE_PLACEMENTS:
        raise ValueError(f"config.mesh.judges={mesh_cfg.judges!r}: must be one of {JUDGE_PLACEMENTS}.")
    learner_devices = sampler_devices = devices
    if placement == "disaggregated":
        learner_devices, sampler_devices = split_last(devices, mesh_cfg.sampler_devices,
                                                      "config.mesh.sampler_devices", "sampler")
    judge_devices = None
    if mesh_cfg.judges == "disaggregated":
        learner_devices, judge_devices = split_last(learner_devices, mesh_cfg.judge_devices,
                                                    "config.mesh.judge_devices", "set of judge models")
        if placement != "disaggregated":
            sampler_devices = learner_devices
    whole = placement != "disaggregated" and judge_devices is None
    learner = make_mesh(mesh_shape(mesh_cfg, len(learner_devices)), learner_devices, whole_slice=whole)
    judges = learner
    if judge_devices is not None:
        judges = make_mesh(mesh_shape(mesh_cfg, len(judge_devices), field="config.mesh.judge_"), judge_devices,
                           whole_slice=False)
    if placement == "shared":
        return Meshes(learner, learner, judges, placement)
    shape = mesh_shape(mesh_cfg, len(sampler_devices), field="config.mesh.sampler_")
    return Meshes(learner, make_mesh(shape, sampler_devices, whole_slice=whole), judges, placement)
