"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=8 with a work directory (see test_judges_mesh.py): a
nano RL job whose outcome RM is disaggregated on the last 2 of the 8 devices (`config.mesh.judges`, fsdp 2; the
learner and the sampler on the other 6) places the RM there and runs 2 RL steps that log `reward_model/score_mean`.
Exits non-zero on a failure; prints OK."""

import math
import pathlib
import sys

import jax
import jax.numpy as jnp

from rl4llm import config as config_lib
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import single_turn
from tests.test_reward_model_rl import nano_job, write_rm


def main(workdir: pathlib.Path):
    assert jax.device_count() == 8, jax.devices()
    write_rm(workdir / "job", str(workdir / "rm"), lambda cfg: {
        "kernel": jax.random.normal(jax.random.key(1), (cfg.hidden_size,)), "bias": jnp.asarray(0.0)})
    config = nano_job(str(workdir / "rm"), mode="add", weight=0.5)
    config.rl.num_prompts, config.sft.batch_size = 3, 12  # 12 rows: a multiple of the learner's 6 devices
    config.mesh.update({"judges": "disaggregated", "judge_devices": 2, "judge_data": 1, "judge_fsdp": 2})
    setup = single_turn.build_setup(config_lib.parse(config), str(workdir / "job"))
    kernel = setup.reward_model.params["trunk"]["layers"][0]["mlp"]["gate_proj"]["kernel"]
    assert kernel.sharding.device_set == set(jax.devices()[6:]) and not kernel.sharding.is_fully_replicated, (
        kernel.sharding)
    assert math.prod(setup.layout.meshes.learner.devices.shape) == 6
    job.run(config, str(workdir / "job"))
    records = [r for r in metrics_lib.read_metrics(str(workdir / "job"), "rl") if "reward" in r]
    assert [r["step"] for r in records] == [1, 2], records
    for r in records:
        assert r["reward_model/score_std"] > 1e-3, r  # the scores depend on the completion
        assert abs(r["reward"] - (r["reward/exact_answer"] + 0.5 * r["reward_model/score_mean"])) < 1e-5, r
    print("reward_model/score_mean", [round(r["reward_model/score_mean"], 4) for r in records])
    print("OK")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
