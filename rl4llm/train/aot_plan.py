"""The layouts `experiments/compile_for_tpu.py --plan` searches for a TPU slice (`train.aot` compiles them): the
learner's (mesh, remat, micro-batch) and, for the learner's layout, the sampler's (its mesh or a colocated one, rows
per call), each as config overrides with the function that applies them."""

from __future__ import annotations

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm.train import aot


def plan_candidates(config, num_devices: int, model_cfg: models.ModelConfig) -> list[dict]:
    """The layouts a planner compiles: every (data, fsdp, tensor) with data·fsdp·tensor = num_devices whose tensor
    size divides the query heads, and whose data·fsdp divides the minibatch rows; x remat "full" / "dots"; x the
    micro-batch sizes (multiples of data·fsdp dividing the minibatch, from one row per device up to 8) -- as
    config overrides {"mesh": (d, f, t), "remat": ..., "micro_batch_size": m}."""
    rows = aot.rollout_rows(config) // config.rl.num_minibatches
    out = []
    for tensor in (t for t in range(1, num_devices + 1) if num_devices % t == 0 and model_cfg.num_heads % t == 0):
        for data in (d for d in range(1, num_devices // tensor + 1) if (num_devices // tensor) % d == 0):
            shards = num_devices // tensor
            if rows % shards:
                continue
            micro = [shards * k for k in (1, 2, 4, 8) if rows % (shards * k) == 0]
            out += [dict(mesh=(data, shards // data, tensor), remat=remat, micro_batch_size=m)
                    for remat in ("full", "dots") for m in micro]
    return out


def with_layout(config: config_lib.RunConfig, candidate: dict) -> config_lib.RunConfig:
    """`config` with a planner candidate's mesh, remat mode and micro-batch size."""
    data, fsdp, tensor = candidate["mesh"]
    return config.replace(mesh=dict(data=data, fsdp=fsdp, tensor=tensor), model={"remat": candidate["remat"]},
                          rl={"micro_batch_size": candidate["micro_batch_size"]})


def sampler_candidates(config, num_devices: int, model_cfg: models.ModelConfig) -> list[dict]:
    """The sampler layouts a planner compiles, for the learner layout `config` already has: its own mesh ("shared":
    the sampler reads the learner's arrays) or the same devices in any (data, fsdp, tensor) layout whose tensor size
    divides the query heads ("colocated": a copy of the weights in the compute dtype, made after each update); each
    with every `rows_per_call` R (the step's rows, or 1/2, 1/4, ..., 1/64 of them, in whole groups). As config
    overrides {"sampler": "shared", "rows_per_call": R} / {"sampler": "colocated", "sampler_mesh": (d, f, t),
    "rows_per_call": R}. Decoding streams every weight per token, split only by `tensor`, so the roofline favours
    tensor-parallel samplers and few calls; fsdp and smaller calls only buy memory (less of the weights, less KV
    cache)."""
    g = config.rl.num_generations
    rows = config.rl.num_prompts * g
    per_call = [rows // k for k in (1, 2, 4, 8, 16, 32, 64) if rows % k == 0 and (rows // k) % g == 0]
    layouts = [dict(sampler="shared")]
    for tensor in (t for t in range(1, num_devices + 1) if num_devices % t == 0 and model_cfg.num_heads % t == 0):
        shards = num_devices // tensor
        layouts += [dict(sampler="colocated", sampler_mesh=(data, shards // data, tensor))
                    for data in range(1, shards + 1) if shards % data == 0]
    return [dict(layout, rows_per_call=r) for layout in layouts for r in per_call]


def with_sampler_layout(config: config_lib.RunConfig, candidate: dict) -> config_lib.RunConfig:
    """`config` with a sampler candidate of `sampler_candidates`."""
    rows = candidate["rows_per_call"]
    rows_per_call = 0 if rows == config.rl.num_prompts * config.rl.num_generations else rows
    if candidate["sampler"] == "shared":
        return config.replace(mesh=dict(sampler="shared"), sampling=dict(rows_per_call=rows_per_call))
    data, fsdp, tensor = candidate["sampler_mesh"]
    return config.replace(mesh=dict(sampler="colocated", sampler_data=data, sampler_fsdp=fsdp, sampler_tensor=tensor),
                          sampling=dict(rows_per_call=rows_per_call))
