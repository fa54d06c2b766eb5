"""Orbax checkpoints of a training stage: array state plus a small JSON record.

One `Checkpointer` per stage (`<workdir>/checkpoints/<stage>`). A checkpoint holds

* `state`: any pytree of arrays (params, optimizer state, step, PRNG keys, ...), saved with
    Orbax's StandardSave and restored onto the shardings of an abstract target;
* `meta`: a JSON-serialisable dict (data iterator / selection state, metrics of the stage).

`restore_latest` walks the saved steps from newest to oldest: a checkpoint that fails to
restore (a crash mid-write on a filesystem without atomic rename, a truncated file) is
reported with a warning naming the step and the error, moved aside to
`<directory>/../<stage>.unreadable/<step>` (kept for inspection, never deleted), and the previous
one is used. A checkpoint that is readable but holds a differently shaped state (the config changed
since it was written: optimizer schedule, model preset, KL on/off, ...) is not corruption: restoring
raises `CheckpointMismatchError` naming the differing entries, and nothing is moved.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging


class CheckpointMismatchError(ValueError):
    """A readable checkpoint whose state differs in structure or shapes from this run's state."""


def _orbax_name(path) -> str:
    """Orbax's dotted name of a pytree key path, e.g. `opt_state.1.0.count`."""
    parts = []
    for key in path:
        for attr in ("key", "idx", "name"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    return ".".join(parts)


def state_signature(tree) -> dict[str, tuple[int, ...]]:
    """{Orbax name: shape} of every array leaf of a state pytree (concrete, abstract, or Orbax metadata)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {_orbax_name(path): tuple(leaf.shape) for path, leaf in leaves}


def signature_differences(saved: dict, expected: dict, limit: int = 5) -> list[str]:
    """Human-readable differences between a checkpoint's signature and this run's (at most `limit`)."""
    diffs = [f"{n}: only in the checkpoint" for n in sorted(saved.keys() - expected.keys())]
    diffs += [f"{n}: missing from the checkpoint" for n in sorted(expected.keys() - saved.keys())]
    diffs += [
        f"{n}: shape {saved[n]} in the checkpoint, {expected[n]} in this run"
        for n in sorted(saved.keys() & expected.keys())
        if saved[n] != expected[n]
    ]
    return diffs[:limit]


@dataclasses.dataclass
class Restored:
    step: int
    state: Any
    meta: dict


class Checkpointer:
    """Saves and restores `(state pytree, meta dict)` pairs under `directory`."""

    def __init__(self, directory: str, *, max_to_keep: int = 3):
        self.directory = directory
        self._manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
            item_names=("state", "meta"),
            item_handlers={"state": ocp.StandardCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()},
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
        checkpoint exists; raises if checkpoints exist but none can be read, and
        `CheckpointMismatchError` (moving nothing) if the newest readable one holds a state of another
        structure than `target`.
        """
        steps = self.all_steps()
        if not steps:
            return None
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        errors = []
        for step in reversed(steps):
            self._check_signature(step, abstract)
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

    def restore_entry(self, step: int, name: str, target: Any) -> tuple[Any, dict]:
        """(entry, meta): only the top-level entry `name` of checkpoint `step`'s state (e.g. "params" for
        evaluation: no optimizer state is read) restored onto `target`'s structure, dtypes and shardings,
        and the checkpoint's meta. Raises CheckpointMismatchError if the saved entry differs from `target`,
        FileNotFoundError if there is no checkpoint `step`."""
        if step not in self.all_steps():
            raise FileNotFoundError(f"no checkpoint step {step} in {self._manager.directory} (steps: {self.all_steps()})")
        abstract = {name: jax.tree.map(ocp.utils.to_shape_dtype_struct, target)}
        saved = state_signature(self._manager.item_metadata(step)["state"])
        diffs = signature_differences({k: v for k, v in saved.items() if k.split(".")[0] == name}, state_signature(abstract))
        if diffs:
            raise CheckpointMismatchError(
                f"Checkpoint step {step} in {self._manager.directory}: its {name!r} differ from the expected ones "
                f"({'; '.join(diffs)})."
            )
        entry = ocp.PyTreeCheckpointer().restore(
            os.path.join(os.fspath(self._manager.directory), str(step), "state"),
            args=ocp.args.PyTreeRestore(
                item=abstract, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract), partial_restore=True
            ),
        )[name]
        meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        return entry, dict(meta)

    def _check_signature(self, step: int, abstract: Any) -> None:
        """Raises CheckpointMismatchError if checkpoint `step`'s metadata is readable and describes a state
        with other leaves or shapes than `abstract` (an unreadable one is left to the corruption path)."""
        try:
            saved = state_signature(self._manager.item_metadata(step)["state"])
        except Exception:  # pylint: disable=broad-except  (unreadable metadata: treated as corruption)
            return
        diffs = signature_differences(saved, state_signature(abstract))
        if diffs:
            raise CheckpointMismatchError(
                f"Checkpoint step {step} in {self._manager.directory} holds a state of another structure than "
                f"this run's ({'; '.join(diffs)}): the config changed since it was written. Use a new --workdir, "
                f"or run with the config saved in the workdir's config.json. Nothing was moved."
            )

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
