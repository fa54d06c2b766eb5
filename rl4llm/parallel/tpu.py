"""Cloud TPU slices without the hardware: chips' specifications, a topology's abstract devices (libtpu's
compile-only client), the per-chip memory of a compiled program, and roofline time / MFU estimates.

`topology_devices("v5p:2x2x1")` returns the slice's devices as libtpu describes them (no TPU needed, only the
`tpu` extra: `pip install -e ".[tpu]"`); a `jax.sharding.Mesh` over them and `jax.jit(...).lower(<ShapeDtypeStructs
with NamedShardings>).compile()` give a real TPU executable, whose `memory_analysis()` is per device
(`MemoryUse`). `rl4llm.train.aot` compiles a run's programs this way; `experiments/compile_for_tpu.py` prints them.

Roofline (Williams et al. 2009): a phase takes at least max(FLOPs / peak FLOP/s, HBM bytes / HBM bandwidth) per
chip. The FLOPs are analytic (`rl4llm.models.flops`); the bytes count the weights each chip streams from HBM
and the optimizer's reads and writes (activations, and collectives over the inter-chip interconnect, are not
counted: the estimate is a lower bound on the step time, and the MFU it allows an upper bound).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re

import jax

GB = 10**9
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU chip's peak dense bf16 FLOP/s, HBM capacity (bytes) and HBM bandwidth (bytes/s)."""

    name: str
    peak_flops: float
    hbm_bytes: int
    hbm_bandwidth: float


# Cloud TPU system architecture pages, "key specifications" per chip:
#   v4:  https://cloud.google.com/tpu/docs/v4   275 TFLOPs bf16; HBM2 32 GiB, 1200 GBps
#   v5e: https://cloud.google.com/tpu/docs/v5e  197 TFLOPs bf16; HBM2 16 GB, 819 GBps
#   v5p: https://cloud.google.com/tpu/docs/v5p  459 TFLOPs bf16; HBM2e 95 GB, 2765 GBps
#   v6e: https://cloud.google.com/tpu/docs/v6e  918 TFLOPs bf16; HBM 32 GB, 1638 GBps
# The pages' "GB" of capacity are GiB: libtpu's compiler, refusing a program on v5e, names 15.75G of "available
# HBM" (16 GiB less its reserve), the unit of its memory messages being GiB.
CHIPS: dict[str, Chip] = {
    "v4": Chip("v4", 275e12, 32 * GIB, 1200 * GB),
    "v5e": Chip("v5e", 197e12, 16 * GIB, 819 * GB),
    "v5p": Chip("v5p", 459e12, 95 * GIB, 2765 * GB),
    "v6e": Chip("v6e", 918e12, 32 * GIB, 1638 * GB),
}
# Chips whose gcloud accelerator type counts TensorCores (2 per chip: v5p-64 is 32 chips); v5e / v6e count chips.
_TWO_CORES_PER_CHIP = ("v4", "v5p")


def parse_topology(topology: str) -> tuple[Chip, tuple[int, ...]]:
    """("v5p:2x2x1") -> (the chip, (2, 2, 1)): chip generation and the slice's chip grid."""
    match = re.fullmatch(r"(v[0-9][a-z]?):([0-9]+(?:x[0-9]+)+)", topology)
    if not match or match.group(1) not in CHIPS:
        raise ValueError(f"--topology={topology!r}: expected <chip>:<AxB[xC]> with chip one of {sorted(CHIPS)}, "
                         "e.g. v5e:4x4 or v5p:4x4x4.")
    return CHIPS[match.group(1)], tuple(int(n) for n in match.group(2).split("x"))


def num_chips(topology: str) -> int:
    return math.prod(parse_topology(topology)[1])


def accelerator_type(topology: str) -> str:
    """The gcloud `--accelerator-type` of the slice: v5p-<TensorCores> / v4-<TensorCores>, v5e-<chips> / v6e-<chips>
    (Cloud TPU docs: "TPU versions" / accelerator types)."""
    chip, grid = parse_topology(topology)
    chips = math.prod(grid)
    return f"{chip.name}-{2 * chips if chip.name in _TWO_CORES_PER_CHIP else chips}"


def require_libtpu() -> None:
    """Raises with the install command when libtpu (the `tpu` extra) is missing."""
    if importlib.util.find_spec("libtpu") is None:
        raise RuntimeError(
            "libtpu is not installed, so no TPU topology can be compiled for. Install the tpu extra: "
            f"pip install -e \".[tpu]\"  (jax[tpu]=={jax.__version__}, brings libtpu from PyPI).")


def topology_devices(topology: str) -> list:
    """The compile-only devices of a TPU slice (`jax.experimental.topologies.get_topology_desc`): one per chip, or
    per TensorCore where libtpu exposes both cores of a chip (v4 without megacore)."""
    from jax.experimental import topologies

    parse_topology(topology)
    require_libtpu()
    # libtpu takes /tmp/libtpu_lockfile so that one process owns a host's chips; compiling for a topology touches
    # no chip, so let several processes (pytest workers, a compile beside a test run) load it at once.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    return list(topologies.get_topology_desc(platform="tpu", topology_name=topology).devices)


def per_device(chip: Chip, topology: str, num_devices: int) -> Chip:
    """The chip's figures per device of the topology: libtpu exposes v4's two TensorCores as two devices
    (without megacore), which share the chip's FLOP/s, HBM and bandwidth."""
    share = num_devices // num_chips(topology)
    if share == 1:
        return chip
    return Chip(f"{chip.name} (1/{share} chip)", chip.peak_flops / share, chip.hbm_bytes // share,
                chip.hbm_bandwidth / share)


@dataclasses.dataclass(frozen=True)
class MemoryUse:
    """Per-device HBM of one compiled program (`Compiled.memory_analysis()`), bytes."""

    arguments: int
    outputs: int
    aliased: int  # outputs written into donated arguments' buffers
    temporaries: int
    code: int

    @classmethod
    def of(cls, compiled) -> "MemoryUse":
        s = compiled.memory_analysis()
        return cls(s.argument_size_in_bytes, s.output_size_in_bytes, s.alias_size_in_bytes, s.temp_size_in_bytes,
                   s.generated_code_size_in_bytes)

    @property
    def peak(self) -> int:
        """Bytes live at once, at most: arguments + outputs not aliased to them + temporaries + the program."""
        return self.arguments + self.outputs - self.aliased + self.temporaries + self.code


@dataclasses.dataclass(frozen=True)
class Phase:
    """A part of a program with one roofline: FLOPs the chips execute (rematerialisation included), model FLOPs
    (what MFU counts), and HBM bytes each chip reads or writes; totals over the slice except `hbm_bytes_per_chip`."""

    name: str
    flops: float
    model_flops: float
    hbm_bytes_per_chip: float

    def seconds(self, chip: Chip, chips: int) -> float:
        """max(FLOPs / (chips·peak), bytes per chip / HBM bandwidth)."""
        return max(self.flops / (chips * chip.peak_flops), self.hbm_bytes_per_chip / chip.hbm_bandwidth)

    def bound(self, chip: Chip, chips: int) -> str:
        compute = self.flops / (chips * chip.peak_flops)
        return "compute" if compute >= self.hbm_bytes_per_chip / chip.hbm_bandwidth else "memory"


def mfu(model_flops: float, seconds: float, chip: Chip, chips: int) -> float:
    """Model FLOPs utilisation of `seconds`: model_flops / (seconds·chips·peak)."""
    return model_flops / (seconds * chips * chip.peak_flops) if seconds > 0 else 0.0


def fits(memory: MemoryUse, chip: Chip) -> bool:
    """Whether the program's peak fits the (device's) HBM."""
    return memory.peak <= chip.hbm_bytes
