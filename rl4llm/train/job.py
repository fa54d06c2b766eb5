"""The job: the config parsed once (`rl4llm.config.parse`), then setup -> SFT warm start -> RL -> export -> summary (`run`).

Single-turn and multi-turn (agent) runs differ only in their rollout source, a module with the same five
functions: `build_setup(config, workdir)`, `describe(config, setup)`, `sft_batch(config, setup, step)`,
`evaluate(config, setup, params, key)`, `collect(config, setup, programs, state, step, *, selection=None,
params_version=None)`, plus `summary(sft_eval, rl_eval)` / `summary_table(summary)` for the closing report
(`train.single_turn`, `train.agent`).
"""

from __future__ import annotations

import json
import os
import time

import jax
import ml_collections

from rl4llm import config as config_lib
from rl4llm.parallel import distributed
from rl4llm.train import checkpointing
from rl4llm.train import loop
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import preemption
from rl4llm.train import sft as sft_lib
from rl4llm.train import setup as setup_lib


def rollout_source(config: config_lib.RunConfig):
    """The rollout source of a config: `train.agent` when `config.agent.env` names an env, else `train.single_turn`."""
    if config.agent.env:
        from rl4llm.train import agent as source
    else:
        from rl4llm.train import single_turn as source
    return source


def _write_json(path: str, text: str) -> None:
    if distributed.is_main_process():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def run(config: ml_collections.ConfigDict, workdir: str, *, stop_after_rl_step: int | None = None) -> dict:
    """Runs (or resumes) the whole job of `config` (its editable form, `configs/*.py`) in `workdir`; returns the
    summary also written to summary.json. Raises
    `rl4llm.config.ConfigError` (every invalid field named) before anything is built, `checkpointing.StorageError`
    before training if the workdir cannot hold the checkpoints (or when a checkpoint write fails).

    `stop_after_rl_step` ends the RL stage early (as an interruption would): used by tests. On SIGTERM / SIGINT
    the stage finishes its step, checkpoints it and raises `preemption.Preempted` (`train.preemption`).
    """
    editable, config = config, config_lib.parse(config)
    t0 = time.time()
    source = rollout_source(config)
    checkpointing.probe_workdir(workdir)
    _write_json(os.path.join(workdir, "config.json"), editable.to_json_best_effort(indent=2))
    setup = source.build_setup(config, workdir)
    checkpointing.check_free_space(workdir, checkpointing.checkpoint_bytes_needed(
        setup_lib.param_bytes(setup.model_cfg), config.checkpoint.max_to_keep))
    key = jax.random.key(config.seed)
    writer = metrics_lib.MetricsWriter(workdir) if distributed.is_main_process() else metrics_lib.NullWriter()
    print(source.describe(config, setup), flush=True)
    with preemption.StopSignal() as stop:
        try:
            sft_params, sft_eval = sft_lib.run_sft(config, setup, source, key, writer, workdir, stop)
            rl_params, rl_eval, rl_steps = loop.run_rl(
                config, setup, source, sft_params, key, writer, workdir, stop, stop_after_step=stop_after_rl_step
            )
            if config.model.export_hf:
                setup_lib.export_hf(config, setup, rl_params, os.path.join(workdir, "hf_export"))
        finally:
            if setup.rewards is not None:
                setup.rewards.close()  # the scoring worker processes
            writer.close()
    rl_eval = rl_eval or sft_eval
    summary = {
        **source.summary(sft_eval, rl_eval),
        "rl_steps": rl_steps,
        "wall_seconds": time.time() - t0,
        "sft_eval": sft_eval,
        "rl_eval": rl_eval,
        "devices": f"{jax.devices()[0].platform} x{jax.device_count()}",
    }
    _write_json(os.path.join(workdir, "summary.json"), json.dumps(summary, indent=2))
    print(f"done in {summary['wall_seconds']:.0f} s; summary in {workdir}/summary.json\n"
          f"{source.summary_table(summary)}", flush=True)
    return summary
