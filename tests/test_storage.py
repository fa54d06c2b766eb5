"""Storage failures: an unwritable or too small workdir is a clear error before training; a checkpoint write that
fails (a real one: the file-size limit makes the filesystem refuse the write, as a full disk does) is one clear
error, and the previous checkpoint stays on disk and restorable."""

import os
import subprocess
import sys

import pytest

from rl4llm.train import checkpointing
from rl4llm.train import job
from tests.test_train import tiny_config

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_unwritable_workdir_is_a_clear_error_before_anything_is_built(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(checkpointing.StorageError, match=r"--workdir=.*a_file/run cannot be written"):
        job.run(tiny_config(), str(blocker / "run"))


def test_too_little_free_space_is_named_with_both_sizes(tmp_path):
    assert checkpointing.checkpoint_bytes_needed(1000, max_to_keep=3) == 1000 * (3 + 4 * 4)
    checkpointing.check_free_space(str(tmp_path), 1)
    with pytest.raises(checkpointing.StorageError, match=r"MiB free but this run's checkpoints need about 953674316"):
        checkpointing.check_free_space(str(tmp_path), 10**18)


_FAILING_WRITE = """
import resource, signal, sys
import numpy as np
from rl4llm.train import checkpointing

ckpt = checkpointing.Checkpointer(sys.argv[1], max_to_keep=1)
ckpt.save(1, {"w": np.arange(4, dtype=np.float32)}, {"data_step": 1})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    ckpt.save(2, {"w": np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)}, {"data_step": 2})
except checkpointing.StorageError as e:
    print("STORAGE ERROR:", e, flush=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
reader = checkpointing.Checkpointer(sys.argv[1], max_to_keep=1)
restored = reader.restore_latest({"w": np.zeros(4, np.float32)})
print("RESTORED", restored.step, restored.state["w"].tolist(), flush=True)
"""


def test_failed_checkpoint_write_is_one_error_and_keeps_the_previous_one(tmp_path):
    directory = tmp_path / "checkpoints"
    proc = subprocess.run([sys.executable, "-c", _FAILING_WRITE, str(directory)], cwd=_REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    error = [line for line in proc.stdout.splitlines() if line.startswith("STORAGE ERROR:")]
    assert len(error) == 1 and f"Could not write checkpoint step 2 in {directory}" in error[0], proc.stdout
    assert "Kept: step 1" in error[0]
    assert "RESTORED 1 [0.0, 1.0, 2.0, 3.0]" in proc.stdout  # max_to_keep=1, yet step 1 was not deleted
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
