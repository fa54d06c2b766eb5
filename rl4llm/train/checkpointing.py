"""Orbax checkpoints of a training stage: array state plus a small JSON record.

One `Checkpointer` per stage (`<workdir>/checkpoints/<stage>`). A checkpoint holds

* `state`: any pytree of arrays (params, optimizer state, step, PRNG keys, ...), saved with
    Orbax's StandardSave and restored onto the shardings of an abstract target;
* `selection` (RL runs whose `config.selection` method keeps a state only): the prompt-selection state
    (`rl4llm.data.selection.SelectionState`: statistics and replay buffer; `rl4llm.data.difficulty.DifficultyState`
    or `ScalerState`),
    saved the same way and restored as host numpy arrays (its target has no shardings);
* `meta`: a JSON-serialisable dict (data iterator step, metrics of the stage).

`restore_latest` walks the saved steps from newest to oldest: a checkpoint that fails to
restore (a crash mid-write on a filesystem without atomic rename, a truncated file) is
reported with a warning naming the step and the error, moved aside to
`<directory>/../<stage>.unreadable/<step>` (kept for inspection, never deleted), and the previous
one is used. A checkpoint that is readable but holds a differently shaped state (the config changed
since it was written: optimizer schedule, model preset, KL on/off, ...) is not corruption: restoring
raises `CheckpointMismatchError` naming the differing entries, and nothing is moved.

Storage: `probe_workdir` and `check_free_space` fail before training starts when the workdir cannot be written or
its filesystem has less free space than the run's checkpoints need (`checkpoint_bytes_needed`). A checkpoint
write that fails (disk full, quota, I/O error) raises `StorageError` with one line naming the step, the directory
and the cause; Orbax writes into a temporary directory and deletes old steps (`max_to_keep`) only after the new one
is committed, so the previous good checkpoint is never lost (measured on a full tmpfs: the failed step-6 write left
step 4 intact). Orbax's own per-thread error logs of the failed write (hundreds of traceback lines) are folded into
that one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging as py_logging
import os
import shutil
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging


class CheckpointMismatchError(ValueError):
    """A readable checkpoint whose state differs in structure or shapes from this run's state."""


class StorageError(RuntimeError):
    """The workdir cannot hold the run's checkpoints, or a checkpoint write failed (the previous one is kept)."""


def checkpoint_bytes_needed(param_bytes: int, max_to_keep: int) -> int:
    """Disk the checkpoints of a run need at most, from the policy's param bytes P: SFT's (params + Adam's two
    moments: 3P) and RL's max_to_keep + 1 at once while a new one is written (params, two moments and the
    reference: 4P each). Critic / PRM params add to it; LoRA's adapter-only moments take less."""
    return param_bytes * (3 + 4 * (max_to_keep + 1))


def probe_workdir(workdir: str) -> None:
    """Raises StorageError unless `workdir` can be created and written (a file written, synced and removed; one
    per process, as the processes of a multi-host job probe the same workdir at once)."""
    probe = os.path.join(workdir, f".write_probe.{jax.process_index()}")
    try:
        os.makedirs(workdir, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
        os.remove(probe)
    except OSError as e:
        raise StorageError(f"--workdir={workdir} cannot be written ({e.strerror or e}); choose another one.") from e


def check_free_space(workdir: str, bytes_needed: int) -> None:
    """Raises StorageError if `workdir`'s filesystem has less than `bytes_needed` free."""
    free = shutil.disk_usage(workdir).free
    if free < bytes_needed:
        raise StorageError(f"--workdir={workdir} has {free / 2**20:.1f} MiB free but this run's checkpoints need about "
                           f"{bytes_needed / 2**20:.1f} MiB (config.checkpoint.max_to_keep sets how many are kept); "
                           "free some space or choose another workdir.")


class _OrbaxErrors(py_logging.Filter):
    """Drops Orbax's ERROR records (their tracebacks) while a save runs; the save raises one StorageError instead."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        return not (record.levelno >= py_logging.ERROR and "orbax" in record.pathname)


class _AbandonedWrites(py_logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" records: after a failed write, its other array writes'
    tasks fail the same way and are reported when garbage-collected, long after the save raised."""

    def filter(self, record: py_logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Task exception was never retrieved")


_ABANDONED_WRITES = _AbandonedWrites()


@contextlib.contextmanager
def _orbax_errors_folded():
    quiet, logger = _OrbaxErrors(), py_logging.getLogger("absl")
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


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


def checkpoint_signature(state, selection=None) -> dict[str, tuple[int, ...]]:
    """`state_signature` of a checkpoint's arrays: the state's leaves, and the selection state's (if any) named
    `selection.*`."""
    signature = state_signature(state)
    if selection is not None:
        signature.update(state_signature({"selection": selection}))
    return signature


@dataclasses.dataclass
class Restored:
    step: int
    state: Any
    meta: dict
    selection: Any = None  # the prompt-selection state, when the checkpoint holds one


class Checkpointer:
    """Saves and restores `(state pytree, meta dict[, selection pytree])` under `directory`."""

    def __init__(self, directory: str, *, max_to_keep: int = 3):
        self.directory = directory
        self._manager = ocp.CheckpointManager(
            directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
            item_names=("state", "selection", "meta"),
            item_handlers={"state": ocp.StandardCheckpointHandler(), "selection": ocp.StandardCheckpointHandler(),
                           "meta": ocp.JsonCheckpointHandler()},
        )

    def save(self, step: int, state: Any, meta: dict, selection: Any = None) -> None:
        """Writes checkpoint `step` (with the `selection` item unless it is None) and waits until it is on disk;
        raises StorageError (the earlier checkpoints kept) if the write fails."""
        items = {"state": ocp.args.StandardSave(state), "meta": ocp.args.JsonSave(meta)}
        if selection is not None:
            items["selection"] = ocp.args.StandardSave(selection)
        with _orbax_errors_folded():
            try:
                self._manager.save(step, args=ocp.args.Composite(**items), force=True)
                self._manager.wait_until_finished()
            except Exception as e:  # pylint: disable=broad-except  (any failed write: one clear error)
                py_logging.getLogger("asyncio").addFilter(_ABANDONED_WRITES)  # idempotent
                kept = [s for s in self._on_disk_steps() if s != step]
                cause = str(e).split("\n")[0][:300]
                raise StorageError(
                    f"Could not write checkpoint step {step} in {self.directory} ({type(e).__name__}: {cause}). "
                    f"Kept: {f'step {kept[-1]}' if kept else 'no earlier checkpoint'}; run the same command again "
                    "to resume from it once the cause is fixed."
                ) from e

    def _on_disk_steps(self) -> list[int]:
        """The committed steps in the directory (the manager's own list drops old steps before a save commits)."""
        return sorted(int(n) for n in os.listdir(self.directory) if n.isdigit())

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def restore_latest(self, target: Any, selection: Any = None) -> Restored | None:
        """Restores the newest readable checkpoint onto `target`'s structure, dtypes and shardings (and its
        selection state onto `selection`'s, unless that is None).

        `target` may hold concrete arrays or `jax.ShapeDtypeStruct`s. Returns None when no
        checkpoint exists; raises if checkpoints exist but none can be read, and
        `CheckpointMismatchError` (moving nothing) if the newest readable one holds a state (or selection state)
        of another structure than `target` (`selection`).
        """
        steps = self.all_steps()
        if not steps:
            return None
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        abstract_selection = jax.tree.map(ocp.utils.to_shape_dtype_struct, selection)
        items = {"state": ocp.args.StandardRestore(abstract), "meta": ocp.args.JsonRestore()}
        if selection is not None:
            items["selection"] = ocp.args.StandardRestore(abstract_selection)
        errors = []
        for step in reversed(steps):
            self._check_signature(step, checkpoint_signature(abstract, abstract_selection))
            try:
                restored = self._manager.restore(step, args=ocp.args.Composite(**items))
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
            return Restored(step=step, state=restored.state, meta=dict(restored.meta),
                            selection=restored.get("selection"))
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

    def _check_signature(self, step: int, expected: dict) -> None:
        """Raises CheckpointMismatchError if checkpoint `step`'s metadata is readable and describes arrays
        with other leaves or shapes than the `expected` signature (`checkpoint_signature`; an unreadable one is
        left to the corruption path)."""
        try:
            metadata = self._manager.item_metadata(step)
            saved = checkpoint_signature(metadata["state"], metadata.get("selection"))
        except Exception:  # pylint: disable=broad-except  (unreadable metadata: treated as corruption)
            return
        diffs = signature_differences(saved, expected)
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
