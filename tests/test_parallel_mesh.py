"""Meshes, sharded learner and sampler, and multi-host runs (rl4llm.parallel).

The sharded runs need several devices: they run in subprocesses with simulated CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=N`): 8 for the learner/sampler equality check
(`parallel_mesh_check.py`), and 2 processes x 2 devices, connected by `jax.distributed.initialize` on
localhost, for the multi-host run.
"""

import pathlib
import socket
import subprocess
import sys
import time

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import pytest

from rl4llm.parallel import distributed
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.train import metrics as metrics_lib
from tests import subprocess_env

REPO = pathlib.Path(__file__).resolve().parents[1]


def _mesh_cfg(data, fsdp, tensor):
    return ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor))


@pytest.mark.parametrize(
    "sizes, devices, expected",
    [((-1, 1, 1), 8, (8, 1, 1)), ((2, -1, 1), 8, (2, 4, 1)), ((2, 2, -1), 8, (2, 2, 2)), ((1, 1, 1), 1, (1, 1, 1))],
)
def test_mesh_shape_fills_the_rest(sizes, devices, expected):
    assert mesh_lib.mesh_shape(_mesh_cfg(*sizes), devices) == expected


@pytest.mark.parametrize(
    "sizes, message",
    [
        ((2, 2, 1), "config.mesh.{data,fsdp,tensor}: data x fsdp x tensor = 2 x 2 x 1 = 4 devices, but 8"),
        ((-1, -1, 1), "config.mesh.data and config.mesh.fsdp are -1"),
        ((3, -1, 1), "config.mesh.fsdp=-1: the other axes (3 devices) do not divide the 8 devices"),
        ((0, 1, 1), "config.mesh.data=0: mesh axis sizes must be >= 1"),
    ],
)
def test_mesh_shape_errors_name_the_field(sizes, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}").replace("(", r"\(")
                       .replace(")", r"\)")):
        mesh_lib.mesh_shape(_mesh_cfg(*sizes), 8)


def _dist_cfg(**fields):
    c = ml_collections.ConfigDict(dict(initialize=True, coordinator_address="", num_processes=0, process_id=-1,
                                       initialization_timeout_s=60))
    c.update(fields)
    return c


def test_distributed_arguments_from_config_or_environment():
    # Nothing set: JAX auto-detects the cluster (Cloud TPU, SLURM, ...).
    assert distributed.initialize_kwargs(_dist_cfg(), environ={}) == {"initialization_timeout": 60}
    env = {"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "0"}
    assert distributed.initialize_kwargs(_dist_cfg(process_id=3), environ=env) == {
        "coordinator_address": "10.0.0.1:1234", "num_processes": 4, "process_id": 3, "initialization_timeout": 60}
    with pytest.raises(ValueError, match=r"missing config.distributed.num_processes \(or \$JAX_NUM_PROCESSES\)"):
        distributed.initialize_kwargs(_dist_cfg(coordinator_address="h:1", process_id=0), environ={})


def test_sharded_learner_and_sampler_match_single_device():
    env = subprocess_env.simulated_cpu_devices(8)
    script = pathlib.Path(__file__).with_name("parallel_mesh_check.py")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]
    assert "OK" in result.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# A tiny job (nano model, 2-operand sums) on a (data 1, fsdp 2, tensor 2) mesh of 2 processes x 2 devices.
_RUN_FLAGS = (
    "--config.model.preset=nano", "--config.task.min_operands=2", "--config.task.max_operands=2",
    "--config.task.operators=+", "--config.task.test_fraction=0.2", "--config.sampling.max_new_tokens=12",
    "--config.sampling.prompt_bucket=8", "--config.sft.steps=1", "--config.sft.batch_size=8",
    "--config.rl.num_prompts=2", "--config.rl.num_generations=4", "--config.eval.num_examples=4",
    "--config.eval.every=100", "--config.log_every=1", "--config.checkpoint.every=1",
    "--config.mesh.data=1", "--config.mesh.fsdp=2", "--config.mesh.tensor=2",
    "--config.distributed.initialize=True", "--config.distributed.num_processes=2",
    "--config.distributed.initialization_timeout_s=120",
)


def _run_two_processes(workdir, rl_steps: int, timeout_s: int = 400) -> list[str]:
    """Runs experiments.train as processes 0 and 1 of one job; returns their outputs (fails with both)."""
    port = _free_port()
    env = subprocess_env.simulated_cpu_devices(2)
    procs, logs = [], []
    for pid in range(2):
        log = open(workdir.parent / f"process{pid}_{rl_steps}.log", "w+")
        cmd = [sys.executable, "-m", "experiments.train", f"--workdir={workdir}", f"--config.rl.steps={rl_steps}",
               f"--config.distributed.coordinator_address=localhost:{port}", f"--config.distributed.process_id={pid}",
               *_RUN_FLAGS]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
        logs.append(log)
    deadline = time.monotonic() + timeout_s
    try:  # wait for both; once one fails, the other would only wait for it: stop it
        while any(p.poll() is None for p in procs) and not any(p.poll() for p in procs):
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    report = "\n".join(f"--- process {i} (exit {c}):\n{o[-4000:]}" for i, (c, o) in enumerate(zip(codes, outputs)))
    assert codes == [0, 0], report
    return outputs


def test_two_process_run_checkpoints_and_resumes(tmp_path):
    workdir = tmp_path / "run"
    _run_two_processes(workdir, rl_steps=2)
    assert [r["step"] for r in metrics_lib.read_metrics(str(workdir), "rl")] == [1, 2]
    with open(workdir / "metrics.jsonl") as f:  # process 0 alone writes metrics: one record per logged step
        assert sum('"stage": "rl"' in line for line in f) == 2
    rl_ckpt = workdir / "checkpoints" / "rl"
    assert sorted(int(p.name) for p in rl_ckpt.iterdir() if p.name.isdigit()) == [1, 2]

    outputs = _run_two_processes(workdir, rl_steps=3)  # the same job, one more step: resumes from step 2
    assert all("resuming RL from step 2" in out for out in outputs), outputs
    assert [r["step"] for r in metrics_lib.read_metrics(str(workdir), "rl")] == [1, 2, 3]
    assert sorted(int(p.name) for p in rl_ckpt.iterdir() if p.name.isdigit()) == [1, 2, 3]
    # One consistent checkpoint: this single-device process reads back the state both processes wrote.
    state, before = (_restore_on_one_device(rl_ckpt / str(step) / "state") for step in (3, 2))
    assert state["params"]["embed"].ndim == 2 and np.isfinite(state["params"]["embed"]).all()
    # Step 3 made one more optimizer update than step 2 (the updates' count in every optimizer state).
    counts, counts_before = (_update_counts(s["opt_state"]) for s in (state, before))
    assert counts and all(c == b + 1 == 3 for c, b in zip(counts, counts_before)), (counts, counts_before)


def _update_counts(opt_state) -> list[int]:
    leaves = jax.tree_util.tree_flatten_with_path(opt_state)[0]
    return [int(v) for path, v in leaves if jax.tree_util.keystr(path[-1:]) in ("['count']", ".count")]


def _restore_on_one_device(path):
    checkpointer = ocp.StandardCheckpointer()
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                          checkpointer.metadata(path).item_metadata)
    return jax.device_get(checkpointer.restore(path, target))
