"""Ahead-of-time compilation of an RL run's programs for devices this machine does not have (a Cloud TPU slice,
`parallel.tpu.topology_devices`), with no weights in memory.

`compile_run(config, devices, prompt_len)` builds what `train.loop.run_rl` builds, but abstract: the TrainState by
`jax.eval_shape` of the run's own initialisers (policy, optimizer state, KL reference, critic), its NamedShardings
from the logical-axis rules on the config's mesh over `devices` (`parallel.layout.Layout`), and the run's own
programs (`train.programs.build_rl_programs`: the learner step with its loss, KL reference and critic; the
behaviour pass) plus the sampler's `generate` (prefill into a KV cache, then the decode loop) on the sampler mesh
and, when the sampler has its own layout, the cast of its weights copy (`parallel.layout.sampler_weights`) before
the transfer to it. Each is lowered on ShapeDtypeStructs of the shapes one RL step feeds it and compiled for those
devices; `Program` keeps its compiled memory (`parallel.tpu.MemoryUse`), the bytes of the run's state held in HBM
beside it (`Program.resident`), compile time, XLA's FLOP count and the analytic phases of its roofline
(`train.aot_costs`). `train.aot_plan` holds the layouts `experiments/compile_for_tpu.py --plan` searches. PRIME's
implicit PRM and agent (multi-turn) runs are not covered.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import types
from typing import Any, Callable

import jax
import jax.numpy as jnp
import ml_collections

from rl4llm import models
from rl4llm import sampling
from rl4llm import config as config_lib
from rl4llm.config import validation as config_validation
from rl4llm.parallel import layout as layout_lib
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.parallel import rules as rules_lib
from rl4llm.parallel import tpu
from rl4llm.rl import registry
from rl4llm.train import aot_costs
from rl4llm.train import learner as learner_lib
from rl4llm.train import loop
from rl4llm.train import programs as programs_lib
from rl4llm.train import completions
from rl4llm.train import setup as setup_lib
from rl4llm.train import state as state_lib
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.companions import prime as prime_lib

SDS = jax.ShapeDtypeStruct


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled program of the run: per-device memory, compile seconds, XLA's FLOPs per device (loop bodies
    counted once: a cross-check only), the analytic roofline phases, and how many times one RL step runs it."""

    name: str
    memory: tpu.MemoryUse | None  # None when the compiler refused it (`error`)
    compile_s: float
    xla_flops: float
    phases: tuple[tpu.Phase, ...]
    calls_per_step: int = 1
    error: str = ""  # the TPU compiler's RESOURCE_EXHAUSTED message: the program does not fit the chip's HBM
    # per-device bytes of the run's state that stay in HBM while this program runs without being among its
    # arguments (Adam's moments and the KL reference while the sampler decodes): they count against the chip too
    resident: float = 0.0
    # per-device bytes the program needs at least, known without compiling (the sampler: its weights, its KV cache
    # and the state held beside it); the planner does not compile a layout whose bound exceeds the HBM
    lower_bound: float = 0.0

    @property
    def fits(self) -> bool:
        """The TPU compiler accepted it (its own buffers fit the HBM)."""
        return not self.error

    @property
    def peak_with_state(self) -> float:
        """Bytes per device at the program's peak, with the run's state held beside it."""
        return self.memory.peak + self.resident

    def fits_chip(self, chip: tpu.Chip) -> bool:
        """Compiled, and its peak plus the state held beside it fit the device's HBM."""
        return self.fits and self.peak_with_state <= chip.hbm_bytes


def without_files(config: config_lib.RunConfig) -> config_lib.RunConfig:
    """`config` reading nothing from disk: no HF checkpoint (its preset's shapes), no critic checkpoint. Where the
    checkpoint directory exists, `model_config` reads its config.json first."""
    return config.replace(model={"hf_checkpoint": ""}, critic={"checkpoint": ""})


def parse_for_slice(config: ml_collections.ConfigDict) -> config_lib.RunConfig:
    """`rl4llm.config.parse` of a run config meant for another machine (a TPU slice): every check but those that
    read this machine (the mesh against its devices, the HF / critic checkpoint directories); `compile_run` checks
    the mesh against the slice."""
    local = config.copy_and_resolve_references()
    local.model.hf_checkpoint, local.critic.checkpoint = "", ""
    local.mesh.data, local.mesh.fsdp, local.mesh.tensor, local.mesh.sampler = -1, 1, 1, "shared"
    return config_lib.parse(local).replace(
        mesh=config.mesh.to_dict(), model={"hf_checkpoint": config.model.hf_checkpoint},
        critic={"checkpoint": config.critic.checkpoint})


def model_config(config) -> models.ModelConfig:
    """The policy's ModelConfig as the run builds it (`setup.model_config`): the HF checkpoint's config.json when
    that directory exists, else the preset with its own vocabulary (no tokenizer is built here)."""
    hf = config.model.hf_checkpoint
    if hf and os.path.exists(os.path.join(hf, "config.json")):
        return setup_lib.model_config(config, 0)
    return setup_lib.model_config(without_files(config), models.PRESETS[config.model.preset].vocab_size)


def abstract_state(config, model_cfg: models.ModelConfig):
    """(TrainState of ShapeDtypeStructs, optimizer) of the run's RL stage: `jax.eval_shape` of the run's initialisers
    (`setup.initial_params`, `state.init_rl_state`, `state.init_companions`), so no weight is materialised."""
    if prime_lib.enabled(config):
        raise NotImplementedError("PRIME's implicit PRM is not covered by ahead-of-time compilation yet.")
    optimizer = loop.rl_optimizer(config)
    local = without_files(config)
    setup = types.SimpleNamespace(model_cfg=model_cfg)  # all that the companions' init reads of a Setup

    def init(key):
        params = setup_lib.initial_params(local, model_cfg, key)
        return state_lib.init_companions(local, setup, state_lib.init_rl_state(local, params, optimizer, key))

    return jax.eval_shape(init, jax.random.key(config.seed)), optimizer


def sharded(tree: Any, shardings: Any) -> Any:
    """`tree`'s leaves as ShapeDtypeStructs carrying the matching NamedSharding of `shardings`."""
    return jax.tree.map(lambda x, s: SDS(x.shape, x.dtype, sharding=s), tree, shardings)


def key_struct(mesh) -> SDS:
    """A replicated typed PRNG key (the learner step's and the sampler's key argument)."""
    return SDS((), jax.random.key(0).dtype, sharding=rules_lib.replicated(mesh))


def learner_batch(config, rows: int, prompt_len: int, sharding) -> learner_lib.LearnerBatch:
    """The LearnerBatch of one update as `train.single_turn.learner_batch` fills it, as ShapeDtypeStructs with
    their rows over the batch axes."""
    rl, t = config.rl, config.sampling.max_new_tokens
    f32 = lambda shape: SDS(shape, jnp.float32, sharding=sharding)  # noqa: E731
    tokens = SDS((rows, prompt_len + t), jnp.int32, sharding=sharding)
    loss_inputs = registry.policy_loss_inputs(rl.loss)
    pairwise = config_validation.uses_pairwise_objective(config)  # online DPO's rewards and groups
    return learner_lib.LearnerBatch(
        tokens=tokens, attention_mask=tokens, completion_mask=f32((rows, t)), advantages=f32((rows, t)),
        old_logp=f32((rows, t)), sampler_logp=f32((rows, t)),
        token_weights=f32((rows, t)) if config_validation.token_weights_in_batch(config) else None,
        proxy_logp=f32((rows, t)) if "proxy_logp" in loss_inputs else None,
        target_advantages=f32((rows,)) if "target_advantages" in loss_inputs else None,
        off_policy_mask=f32((rows, t)) if "off_policy_mask" in loss_inputs else None,
        scores=f32((rows,)) if pairwise else None,
        group_ids=SDS((rows,), jnp.int32, sharding=sharding) if pairwise else None,
    )


def critic_batch(batch: learner_lib.LearnerBatch) -> critic_lib.CriticBatch:
    """The CriticBatch of the same rows (values and returns [N, T])."""
    return critic_lib.CriticBatch(tokens=batch.tokens, attention_mask=batch.attention_mask,
                                  completion_mask=batch.completion_mask, old_values=batch.advantages,
                                  returns=batch.advantages)


def compile_program(name: str, fn: Callable, args: tuple, phases, calls: int = 1, *,
                    compile: bool = True, resident: float = 0.0, lower_bound: float = 0.0) -> Program:
    """`fn.lower(*args).compile()` (fn jitted) timed, with its memory and XLA's FLOPs per device. The TPU compiler
    refuses a program whose buffers exceed the chip's HBM (RESOURCE_EXHAUSTED, naming the bytes it needs): that
    message is kept as the program's `error`. `compile=False`: only the analytic phases (memory None). `resident`:
    the state's bytes per device held beside it (`Program.resident`); `lower_bound`: `Program.lower_bound`."""
    if not compile:
        return Program(name, None, 0.0, 0.0, tuple(phases), calls, resident=resident, lower_bound=lower_bound)
    t0 = time.perf_counter()
    try:
        compiled = fn.lower(*args).compile()
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        print(f"{name} does not fit: {str(e).splitlines()[0]}", flush=True)
        return Program(name, None, time.perf_counter() - t0, 0.0, tuple(phases), calls, str(e).splitlines()[0],
                       resident, lower_bound)
    seconds = time.perf_counter() - t0
    print(f"compiled {name} in {seconds:.0f} s", flush=True)
    cost = compiled.cost_analysis() or {}
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return Program(name, tpu.MemoryUse.of(compiled), seconds, float(cost.get("flops", 0.0)), tuple(phases), calls,
                   resident=resident, lower_bound=lower_bound)


def rollout_rows(config) -> int:
    return config.rl.num_prompts * config.rl.num_generations


def sampler_programs(config, layout: layout_lib.Layout, params, prompt_len: int,
                     build: Callable = compile_program, resident: tuple[float, float] = (0.0, 0.0)) -> list[Program]:
    """The sampler's `generate` (prefill + decode loop) on the sampler mesh over the rows of one call (the step's
    N = prompts x G rows, or `sampling.rows_per_call` of them, called N / rows_per_call times per step:
    `completions.sample_completions`), and, when the sampler has its own layout, the learner -> sampler reshard of the
    weights (its copy: `layout.sampler_weights`); each made a Program by `build` (`compile_program`). `resident`:
    per-device bytes of the learner's whole state and of its params, for what stays in HBM beside each program
    (the whole state beside a colocated sampler's copy; the state but its params beside a shared-mesh sampler,
    which reads those; nothing on a disaggregated sampler's own devices)."""
    model_cfg, mesh = layout.model_cfg, layout.meshes.sampler
    per_call = completions.prompts_per_call(config, config.rl.num_prompts)
    n, calls = per_call * config.rl.num_generations, config.rl.num_prompts // per_call
    sampling_cfg = sampling.SamplingConfig(
        max_new_tokens=config.sampling.max_new_tokens, temperature=config.sampling.temperature,
        top_k=config.sampling.top_k, top_p=config.sampling.top_p, min_p=config.sampling.min_p,
        stop_token_ids=(0,), pad_id=0)
    prompts = per_call if config.sampling.shared_prefix_prefill else n  # rows prefilled
    own_copy = layout.meshes.placement != "shared"  # the sampler holds its copy: matrices in the compute dtype
    weights = jax.eval_shape(functools.partial(layout_lib.sampler_weights, model_cfg=model_cfg), params) \
        if own_copy else params
    sampler_params = sharded(weights, rules_lib.tree_shardings(mesh, weights, model_cfg, layout.rules))
    args = (sampler_params, SDS((prompts, prompt_len), jnp.int32, sharding=layout.sampler_rows(prompts)),
            SDS((prompts, prompt_len), jnp.bool_, sharding=layout.sampler_rows(prompts)), key_struct(mesh),
            SDS((n,), jnp.int32, sharding=layout.sampler_rows(n)) if config.sampling.shared_prefix_prefill else None,
            SDS((), jnp.int32, sharding=rules_lib.replicated(mesh)))  # row_offset
    costs = aot_costs.Costs(dataclasses.replace(model_cfg, param_dtype=model_cfg.dtype) if own_copy else model_cfg,
                            dict(mesh.shape))
    state_bytes, params_bytes = resident
    held = {"shared": state_bytes - params_bytes, "colocated": state_bytes, "disaggregated": 0.0}
    # at least: the weights, the KV cache, the prefill's MLP activations, and the state held beside them
    cache = costs.kv_cache_read(n, prompt_len + sampling_cfg.max_new_tokens)
    floor = (aot_costs.per_device_bytes(sampler_params) + cache + costs.prefill_mlp_bytes(prompts, prompt_len)
             + held[layout.meshes.placement])
    out = [build("sampler.generate", layout.generate_program(sampling_cfg), args,
                 costs.generate(n, prompt_len, sampling_cfg.max_new_tokens, prompts), calls,
                 resident=held[layout.meshes.placement], lower_bound=floor)]
    if layout.meshes.placement == "colocated":
        # As `Layout.sampler_params` runs it: the cast where the learner's shards are (compiled here), then a
        # device_put to the sampler's layout, a transfer between two meshes (its device order differs, so no one
        # program holds both); while it runs, the state and the sampler-layout copy it writes are held beside.
        cast = jax.jit(functools.partial(layout_lib.sampler_weights, model_cfg=model_cfg))
        copy_bytes = aot_costs.per_device_bytes(sampler_params)
        out.append(build("weights.learner_to_sampler", cast, (params,), costs.transfer(params, sampler_params),
                         resident=state_bytes - params_bytes + copy_bytes))
    return out


def learner_programs(config, layout: layout_lib.Layout, state, optimizer, prompt_len: int,
                     build: Callable = compile_program) -> list:
    """The run's own jitted updates (`build_rl_programs`: the learner step, its critic's, the behaviour pass)
    on the learner mesh for one minibatch of `N / rl.num_minibatches` rows (the behaviour pass and the critic's
    values: the whole step's N rows), each made a Program by `build` (`compile_program`)."""
    rl, model_cfg, mesh = config.rl, layout.model_cfg, layout.meshes.learner
    setup = types.SimpleNamespace(model_cfg=model_cfg, layout=layout)  # all build_rl_programs reads of a Setup
    programs = programs_lib.build_rl_programs(config, setup, optimizer, state=state)
    critic = critic_lib.enabled(config)
    n, updates = rollout_rows(config), rl.ppo_epochs * rl.num_minibatches
    batch = learner_batch(config, n // rl.num_minibatches, prompt_len, layout.learner_batch)
    full = learner_batch(config, n, prompt_len, layout.learner_batch)
    costs = aot_costs.Costs(model_cfg, dict(mesh.shape))
    lcfg = programs_lib.learner_config(config)
    key = key_struct(mesh)
    out = []
    if critic and config.critic.shared_trunk:
        out.append(build("learner.shared_trunk_step", programs.shared_trunk_step,
                         (state, batch, critic_batch(batch), key), costs.learner(lcfg, state, batch), updates))
    else:
        out.append(build("learner.step", programs.learner_step, (state, batch, key),
                         costs.learner(lcfg, state, batch), updates))
    if critic and not config.critic.shared_trunk:
        critic_state = state.extra("critic")
        out.append(build("critic.step", programs.critic_step, (state, critic_batch(batch)),
                         costs.critic(lcfg, critic_state, batch), updates))
        out.append(build("critic.values", programs.values_fn,
                         (critic_state.params, state.params, full.tokens, full.attention_mask),
                         costs.forward("values", full, 0),
                         resident=held_beside(state, state.params, critic_state.params)))
    if programs.behaviour_fn is not None:
        out.append(build("behaviour.logprobs", programs.behaviour_fn,
                         (state.params, full.tokens, full.attention_mask),
                         costs.forward("behaviour", full, rl.micro_batch_size, lcfg.prompt_group),
                         resident=held_beside(state, state.params)))
    return out


def held_beside(state, *arguments) -> float:
    """Per-device bytes of `state` (ShapeDtypeStructs with shardings) that are not among a program's `arguments`
    (parts of the state): what stays in HBM beside the program."""
    return aot_costs.per_device_bytes(state) - sum(aot_costs.per_device_bytes(a) for a in arguments)


def check_rows(config: config_lib.RunConfig, meshes: mesh_lib.Meshes) -> None:
    """The mesh's check against the slice: the learner's minibatch rows split evenly over its data x fsdp axes."""
    shards = meshes.learner.shape["data"] * meshes.learner.shape["fsdp"]
    rows = rollout_rows(config) // config.rl.num_minibatches
    if rows % shards:
        raise config_lib.ConfigError(
            f"config.rl.num_prompts*num_generations/num_minibatches={rows}: the learner splits batch rows over "
            f"config.mesh.data x fsdp = {shards} devices; make it a multiple of {shards}")


PARTS = ("learner", "sampler")


def compile_run(config, devices, prompt_len: int, *, compile: bool = True,
                parts: tuple[str, ...] = PARTS) -> list[Program]:
    """Every program of one RL step of `config` compiled for `devices` (e.g. `tpu.topology_devices("v5p:4x4x4")`),
    for prompts of `prompt_len` tokens and `config.sampling.max_new_tokens` completion tokens (`compile=False`:
    their analytic phases only, in seconds); `parts`: the learner's programs, the sampler's, or both."""
    unknown = set(parts) - set(PARTS)
    if unknown or not parts:
        raise ValueError(f"parts={parts!r}: choose among {PARTS}")
    build = functools.partial(compile_program, compile=compile)
    model_cfg = model_config(config)
    meshes = mesh_lib.meshes_from_config(config.mesh, devices)
    check_rows(config, meshes)
    layout = layout_lib.Layout(meshes, model_cfg, rules_lib.logical_axis_rules(config.mesh.shard_params_over_data))
    state, optimizer = abstract_state(config, model_cfg)
    state = sharded(state, layout.state_shardings(state))
    resident = (aot_costs.per_device_bytes(state), aot_costs.per_device_bytes(state.params))
    learner = learner_programs(config, layout, state, optimizer, prompt_len, build) if "learner" in parts else []
    sampler = sampler_programs(config, layout, state.params, prompt_len, build, resident) if "sampler" in parts else []
    return learner + sampler


def step_estimate(programs: list[Program], chip: tpu.Chip, devices: int) -> tuple[float, float]:
    """(roofline seconds, model FLOPs) of one RL step: each program's phases times its calls per step."""
    seconds = sum(p.calls_per_step * ph.seconds(chip, devices) for p in programs for ph in p.phases)
    model_flops = sum(p.calls_per_step * ph.model_flops for p in programs for ph in p.phases)
    return seconds, model_flops
