"""Multi-host start-up and the rules every process follows (`config.distributed`).

One Python process per host (TPU VM worker, or GPU node) runs the same program. `initialize` connects them
(`jax.distributed.initialize`) before anything touches a device; after it, `jax.devices()` lists every
device of every process and the meshes of `parallel.mesh` span them all.

How the rest of the code stays globally consistent:
* every process runs the same jitted programs in the same order (no Python branch on a device value that
  could differ between processes; the data of a step is a pure function of the step, so every process
  builds the same host batch and `rules.place` turns it into a global array from each process's copy of its
  own devices' rows);
* what the host reads (rollouts to score, metrics) is replicated first (`layout.Layout.generate`, the
  learner step's replicated metrics), never a shard another process holds (Tunix #698);
* only process 0 writes files other than checkpoints (`is_main_process`: metrics, config.json, summary.json;
  `main_process_first`: caches such as the task tokenizer); every process calls the Orbax checkpoint save and
  restore, and Orbax coordinates the processes (one consistent checkpoint in a directory all of them see).
"""

from __future__ import annotations

import contextlib
import os

import jax
from jax.experimental import multihost_utils

# Environment fallbacks for the fields of config.distributed (JAX reads JAX_COORDINATOR_ADDRESS itself).
ENV_FIELDS = {"coordinator_address": "JAX_COORDINATOR_ADDRESS", "num_processes": "JAX_NUM_PROCESSES",
              "process_id": "JAX_PROCESS_ID"}


def initialize_kwargs(dist_cfg, environ=os.environ) -> dict:
    """Arguments of `jax.distributed.initialize` from config.distributed, else from the environment
    (`ENV_FIELDS`). Empty: JAX auto-detects the cluster (Cloud TPU pod slices, SLURM, Open MPI, Kubernetes)."""
    values = {
        "coordinator_address": dist_cfg.coordinator_address or environ.get(ENV_FIELDS["coordinator_address"], ""),
        "num_processes": dist_cfg.num_processes or int(environ.get(ENV_FIELDS["num_processes"], 0)),
        "process_id": dist_cfg.process_id if dist_cfg.process_id >= 0 else int(environ.get(ENV_FIELDS["process_id"], -1)),
    }
    given = {k for k, v in values.items() if v != ("" if k == "coordinator_address" else 0 if k == "num_processes" else -1)}
    if given and given != set(values):
        missing = ", ".join(f"config.distributed.{k} (or ${ENV_FIELDS[k]})" for k in sorted(set(values) - given))
        raise ValueError(f"config.distributed: a coordinator address, the number of processes and this process's id "
                         f"go together (or none of them, for auto-detection); missing {missing}.")
    kwargs = {k: v for k, v in values.items() if k in given}
    kwargs["initialization_timeout"] = int(dist_cfg.initialization_timeout_s)
    return kwargs


def initialize(dist_cfg) -> None:
    """`jax.distributed.initialize(**initialize_kwargs(dist_cfg))` when config.distributed.initialize is True
    (no-op otherwise). Call it first: before anything queries or uses a device."""
    if dist_cfg.initialize:
        jax.distributed.initialize(**initialize_kwargs(dist_cfg))


def is_main_process() -> bool:
    """Process 0: the one that writes logs, metrics and summaries."""
    return jax.process_index() == 0


@contextlib.contextmanager
def main_process_first(name: str):
    """Process 0 runs the block first (e.g. trains and caches a tokenizer), the others after it (and read the
    cache). A no-op with one process."""
    if jax.process_count() == 1:
        yield
        return
    if not is_main_process():
        multihost_utils.sync_global_devices(f"{name}: process 0 first")
    yield
    if is_main_process():
        multihost_utils.sync_global_devices(f"{name}: process 0 first")
