"""Preemption: SIGTERM mid-RL makes the binary finish its step, checkpoint it and exit 0; running the same command
again resumes and ends exactly as an uninterrupted run (metrics and final params, bit for bit). A second signal
aborts at once."""

import os
import re
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp

from rl4llm.train import metrics as metrics_lib

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RL_STEPS = 16

# The tiny job of tests/test_train.py, with RL long enough to be interrupted and no periodic RL checkpoint but the
# last: the only one a resumed run can start from is the one the signal made it write.
_CONFIG = f'''
from tests.test_train import tiny_config


def get_config():
    c = tiny_config()
    c.rl.steps = {_RL_STEPS}
    c.eval.every = 8
    c.checkpoint.every = 100
    return c
'''


def _command(config_path, workdir):
    return [sys.executable, "-m", "experiments.train", f"--config={config_path}", f"--workdir={workdir}"]


def _rl_steps_logged(workdir) -> list[int]:
    try:
        return [r["step"] for r in metrics_lib.read_metrics(workdir, "rl")]
    except (FileNotFoundError, ValueError):  # not written yet, or a line being written
        return []


def _comparable(record):
    return {k: v for k, v in record.items() if not k.startswith(("time/", "tokens_per_s", "step_s"))}


def _final_params(workdir):
    return ocp.StandardCheckpointer().restore(os.path.join(workdir, "checkpoints", "rl", str(_RL_STEPS), "state"))[
        "params"]


def test_sigterm_mid_rl_checkpoints_exits_zero_and_resumes_exactly(tmp_path):
    config_path = tmp_path / "tiny.py"
    config_path.write_text(_CONFIG)
    full, preempted = str(tmp_path / "full"), str(tmp_path / "preempted")
    uninterrupted = subprocess.Popen(_command(config_path, full), cwd=_REPO, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
    proc = subprocess.Popen(_command(config_path, preempted), cwd=_REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while not _rl_steps_logged(preempted) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    seen = max(_rl_steps_logged(preempted), default=0)
    assert proc.poll() is None and 1 <= seen, f"the run ended (or hung) before RL: {proc.communicate()[0][-3000:]}"
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output[-3000:]
    assert "received SIGTERM" in output and "Run the same command again to resume" in output, output[-3000:]
    # Not a terminal: no bar, and each metric line ends with the stage's progress.
    assert re.search(rf"\[rl\] step +1 \|.* \| 1/{_RL_STEPS} \| [\d.]+ s/step \| elapsed \d\d:\d\d \| ETA \d\d:\d\d\n",
                     output), output[-3000:]
    assert "%|" not in output
    saved = [int(s) for s in os.listdir(os.path.join(preempted, "checkpoints", "rl")) if s.isdigit()]
    # It finished the step in progress (at most one after the last one logged when the signal left) and saved it.
    assert len(saved) == 1 and seen <= saved[0] <= seen + 1 < _RL_STEPS, (saved, seen)
    assert max(_rl_steps_logged(preempted)) == saved[0]

    resumed = subprocess.run(_command(config_path, preempted), cwd=_REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming RL from step {saved[0]}" in resumed.stdout
    output, _ = uninterrupted.communicate(timeout=600)
    assert uninterrupted.returncode == 0, output[-3000:]

    full_rl, resumed_rl = metrics_lib.read_metrics(full, "rl"), metrics_lib.read_metrics(preempted, "rl")
    assert [r["step"] for r in resumed_rl] == [r["step"] for r in full_rl] == list(range(1, _RL_STEPS + 1))
    for a, b in zip(full_rl, resumed_rl):
        assert _comparable(a) == _comparable(b), a["step"]
    full_params, resumed_params = _final_params(full), _final_params(preempted)
    flat_full = jax.tree_util.tree_flatten_with_path(full_params)[0]
    flat_resumed = jax.tree_util.tree_flatten_with_path(resumed_params)[0]
    assert [p for p, _ in flat_full] == [p for p, _ in flat_resumed] and flat_full
    for (path, a), (_, b) in zip(flat_full, flat_resumed):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a), err_msg=jax.tree_util.keystr(path))


def test_live_progress_bars_on_a_terminal(tmp_path):
    """On a terminal (a pseudo-terminal here) each stage draws a tqdm bar with step / total, rate and ETA."""
    import fcntl
    import pty
    import struct
    import termios

    config_path = tmp_path / "tiny.py"
    config_path.write_text(_CONFIG.replace(f"c.rl.steps = {_RL_STEPS}", "c.rl.steps = 3"))
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(_command(config_path, tmp_path / "run"), cwd=_REPO, stdout=follower,
                            stderr=subprocess.DEVNULL, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    assert proc.wait(timeout=600) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    for stage, total in (("sft", 6), ("rl", 3)):
        assert re.search(rf"{stage}: +100%\|.*\| {total}/{total} \[\d\d:\d\d<00:00", screen), screen[-3000:]
    assert "eval: " in screen


def test_second_signal_aborts_at_once():
    script = ("import os, signal, time\n"
              "from rl4llm.train import preemption\n"
              "with preemption.StopSignal() as stop:\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(0.5)\n"
              "    assert stop.should_stop(1), 'the first signal only asks to stop'\n"
              "    print('still running after the first signal', flush=True)\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    time.sleep(10)\n"
              "    print('still running after the second signal', flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=_REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-2000:])
    assert "still running after the first signal" in proc.stdout
    assert "still running after the second signal" not in proc.stdout
    assert "received SIGTERM: finishing the current step" in proc.stderr
