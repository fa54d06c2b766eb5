"""Orbax checkpoints of a training stage: array state plus a small JSON record.

One `Checkpointer` per stage (`<workdir>/checkpoints/<stage>`). A checkpoint holds

* `state`: any pytree of arrays (params, optimizer state, step, PRNG keys, ...), saved with
    Orbax's StandardSave and restored onto the shardings of an abstract target;
* `meta`: a JSON-serialisable dict (data iterator / selection state, metrics of the stage).

`restore_latest` walks the saved steps from newest to oldest: a checkpoint that fails to
restore (a crash mid-write on a filesystem without atomic rename, a truncated file) is
reported with a warning naming the step and the error, moved aside to
`<directory>/../<stage>.unreadable/<step>` (kept for inspection, never deleted), and the previous
one is used.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging


@dataclasses.dataclass
class Restored:
    step: int
    state: Any
    meta: dict


class Checkpointer:
    """Saves and restores `(state pytree, meta dict)` pairs under `directory`."""

    def __init__(self, directory: str, *, max_to_keep: int = 3):
        self._manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
            item_names=("state", "meta"),
        )

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Writes checkpoint `step` and waits until it is on disk."""
        self._manager.save(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)),
            force=True,
        )
        self._manager.wait_until_finished()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def restore_latest(self, target: Any) -> Restored | None:
        """Restores the newest readable checkpoint onto `target`'s structure, dtypes and shardings.

        `target` may hold concrete arrays or `jax.ShapeDtypeStruct`s. Returns None when no
        checkpoint exists; raises if checkpoints exist but none can be read.
        """
        steps = self.all_steps()
        if not steps:
            return None
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        errors = []
        for step in reversed(steps):
            try:
                restored = self._manager.restore(
                    step,
                    args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()),
                )
            except Exception as e:  # pylint: disable=broad-except  (any unreadable checkpoint: fall back)
                quarantine = self._quarantine(step)
                logging.warning(
                    "Checkpoint step %d in %s is unreadable (%s: %s); moved it to %s and fell back "
                    "to an earlier one.",
                    step,
                    self._manager.directory,
                    type(e).__name__,
                    e,
                    quarantine,
                )
                errors.append((step, e))
                continue
            return Restored(step=step, state=restored.state, meta=dict(restored.meta))
        raise RuntimeError(f"No readable checkpoint in {self._manager.directory}: {errors}")

    def _quarantine(self, step: int) -> str:
        """Moves checkpoint `step` out of the manager's directory so the step can be written again."""
        directory = os.fspath(self._manager.directory)
        target_dir = directory.rstrip("/") + ".unreadable"
        os.makedirs(target_dir, exist_ok=True)
        target = os.path.join(target_dir, f"{step}-{len(os.listdir(target_dir))}")
        os.replace(os.path.join(directory, str(step)), target)
        self._manager.reload()
        return target

    def close(self) -> None:
        self._manager.close()
