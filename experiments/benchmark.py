r"""The benchmark workloads of shared/bench/WORKLOADS.md, on the project's own sampler and learner.

    python -m experiments.benchmark --workload grpo_step --model tiny
    python -m experiments.benchmark --workload grpo_step --model small
    python -m experiments.benchmark --workload ppo_step --model small
    python -m experiments.benchmark --workload sample_only --model tiny
    python -m experiments.benchmark --memory_probe --model small --probe_micro_batch_size 8
    python -m experiments.benchmark --memory_probe --model small --remat none --attention_query_chunk 0
    python -m experiments.benchmark --workload reward_throughput --reward_workers 2
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m experiments.benchmark --workload grpo_step \
        --model tiny --mesh 2,2,2

    python -m experiments.benchmark --workload grpo_step --model qwen2.5-0.5b --dtype bfloat16   # on a GPU
    python -m experiments.benchmark --memory_probe --model qwen2.5-0.5b --dtype bfloat16 --remat none

Prints ONE JSON line, then a short human table.

Utilisation (every record): learn_tflop_s = the learner step's model FLOPs (policy forward + backward + reference
forward, `models.flops`) / learn_s; gen_hbm_gb_s = the HBM bytes generation must stream (`train.aot_costs`: every
weight and the whole KV cache per decode step) / gen_s. On an accelerator listed in `ACCELERATORS` with a bf16 model,
`mfu` and `gen_hbm_frac` divide them by its datasheet peaks (None elsewhere).

grpo_step: 8 prompts x 8 samples of 32 random prompt tokens, 64 new tokens each (temperature 1, no
top-k / top-p), reward = fraction of even token ids in the completion (numpy, on the host), GRPO
advantages, then one learner step: ppo_clip (eps 0.2), seq-mean-token-mean, k3 KL (coef 0.04) against
the initial weights, old log-probs = stop_gradient(current), plain Adam (lr 1e-5).

ppo_step: grpo_step with PPO's critic instead of group advantages: a separate critic (a copy of the
initial decoder + a zero scalar head, `models.value_head`) computes the rollout's values, GAE (γ 1,
λ 0.95, outcome reward on the last token, whitened) gives advantages and returns, then ONE critic update
(clipped value loss, cliprange 0.5, seq-mean-token-mean, its own Adam lr 1e-5) before the same learner
step. critic_s = values forward + GAE + critic update; step_s includes it.

Timing (medians over --steps timed steps after one warm-up step; every phase ends in
`block_until_ready` / a device->host copy):
  gen_s:     `sampling.generate` + the completions' device->host copy + the host reward;
  learn_s:   the jitted learner step (reference log-probs + policy forward/backward + Adam); each group's
             prompt is forwarded once and its KV cache forked to the group's rows (--noshared_prompt: per row);
  critic_s:  ppo_step only: the critic's values forward, GAE and the critic update;
  step_s:    the whole step (gen + advantages + batch assembly + learn);
  compile_s: ahead-of-time lower + compile of `generate` and the learner step, before the warm-up
             step (whose jit calls reuse those executables).
No stop tokens are configured, so every row gets exactly max_new_tokens tokens and EOS plays no
part; the pad id is 0 and prompts are drawn from [1, V), so no prompt token is padding.

--mesh data,fsdp,tensor: the workload on a device mesh (rl4llm.parallel; -1 = the rest): state sharded by the
logical-axis rules, learner step on the mesh (`Layout.jit_step`), sampler on the same mesh (`Layout.generate`).

--memory_probe: one learner step on N=64 rows of 32 prompt + 1024 completion random tokens (no
generation), AOT-compiled so that `memory_analysis()` reports the program's temp buffers, compared
with the 64*1024*V*4 bytes that full float32 logits would take. One configuration per process, so
peak_rss_mb belongs to it. --remat and --attention_query_chunk override the model preset's
(`ModelConfig.remat`, `ModelConfig.attention_query_chunk`) for any run.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import resource
import statistics
import time
from typing import Callable

from absl import app
from absl import flags
from absl import logging
import flax
import jax
import jax.numpy as jnp
import jaxlib
import ml_collections
import numpy as np
import optax

from rl4llm import models
from rl4llm.rewards import pool as reward_pool
from rl4llm.rewards import sandbox
from rl4llm.models import config as model_config
from rl4llm.models import flops as flops_lib
from rl4llm.models import value_head
from rl4llm import sampling
from rl4llm.parallel import layout as layout_lib
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.rl import registry
from rl4llm.rl import advantages as advantages_lib
from rl4llm.train import aot_costs
from rl4llm.train import batches
from rl4llm.train import host_memory
from rl4llm.train import learner
from rl4llm.train import optim
from rl4llm.train.companions import critic as critic_lib

PAD_ID = 0
MIB = 1 << 20

# Datasheet peaks of the accelerators the figures are reported on: dense bf16 FLOP/s, HBM bytes/s (NVIDIA H100 SXM and
# H200 product pages: 989 TFLOP/s bf16 dense; 3.35 and 4.8 TB/s). Keyed by `jax.Device.device_kind`.
ACCELERATORS = {
    "NVIDIA H100 80GB HBM3": (989e12, 3.35e12),
    "NVIDIA H200": (989e12, 4.8e12),
}


@dataclasses.dataclass(frozen=True)
class Workload:
    """Shapes of one workload: num_prompts x group_size rows of prompt_len + new_tokens tokens."""
    name: str
    num_prompts: int
    group_size: int
    prompt_len: int
    new_tokens: int
    learn: bool  # run the learner step after generating
    critic: bool = False  # PPO: values, GAE and one critic update before the learner step

    @property
    def batch(self) -> int:
        return self.num_prompts * self.group_size


WORKLOADS = {
    "grpo_step": Workload("grpo_step", num_prompts=8, group_size=8, prompt_len=32, new_tokens=64, learn=True),
    "ppo_step": Workload("ppo_step", num_prompts=8, group_size=8, prompt_len=32, new_tokens=64, learn=True,
                         critic=True),
    "sample_only": Workload("sample_only", num_prompts=64, group_size=1, prompt_len=32, new_tokens=256,
                            learn=False),
}
MEMORY_PROBE = Workload("memory_probe", num_prompts=64, group_size=1, prompt_len=32, new_tokens=1024,
                        learn=True)


# Host-side workloads (no model): scorer throughput.
REWARD_WORKLOADS = ("reward_throughput",)
_WORKLOAD = flags.DEFINE_enum("workload", "grpo_step", [*WORKLOADS, *REWARD_WORKLOADS],
                              "Workload of WORKLOADS.md, or reward_throughput (sandboxed code scoring).")
_REWARD_COMPLETIONS = flags.DEFINE_integer("reward_completions", 1000, "reward_throughput: completions scored.",
                                           lower_bound=1)
_REWARD_WORKERS = flags.DEFINE_integer("reward_workers", 2, "reward_throughput: scoring processes.", lower_bound=1)
_MODEL = flags.DEFINE_enum("model", "tiny", ["tiny", "small", "qwen2.5-0.5b"],
                           "Model preset (rl4llm.models presets); qwen2.5-0.5b is the accelerator scale.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"],
                           "Parameter and compute dtype (softmax and norms stay float32); WORKLOADS.md's CPU figures "
                           "are float32, the accelerator ones bfloat16.")
_STEPS = flags.DEFINE_integer("steps", None, "Timed steps after the warm-up; default 5 for tiny, 3 for small.",
                              lower_bound=1)
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the weights, the prompts and the sampler.")
_CHUNK = flags.DEFINE_integer("logprob_chunk_size", 128, "Completion positions projected to the vocabulary at once.",
                              lower_bound=1)
_MEMORY_PROBE = flags.DEFINE_bool("memory_probe", False, "Run the learner memory probe instead of a workload.")
_PROBE_MICRO_BATCH = flags.DEFINE_integer("probe_micro_batch_size", 0,
                                          "Memory probe: learner micro-batch size (0 = whole batch).", lower_bound=0)
_REMAT = flags.DEFINE_enum("remat", None, list(model_config.REMAT_MODES),
                           "Override ModelConfig.remat of the preset (what the backward pass keeps per block).")
_SHARED_PROMPT = flags.DEFINE_bool("shared_prompt", True, "The learner forwards each group's prompt once and forks "
                                   "its KV cache to the group's rows (LearnerConfig.prompt_group).")
_QUERY_CHUNK = flags.DEFINE_integer("attention_query_chunk", None, "Override ModelConfig.attention_query_chunk "
                                    "of the preset (0 = unchunked attention).", lower_bound=0)
_MESH = flags.DEFINE_string("mesh", "", "data,fsdp,tensor sizes of a device mesh (-1 = the rest), e.g. 2,2,2; "
                            "'' = no mesh (plain jit on the default device).")
_PROBE_EXECUTE = flags.DEFINE_bool("probe_execute", True,
                                   "Memory probe: also run the step (else only compile and analyse it).")


# reward_throughput: a program that reads two integers and prints their sum, in three variants, and its tests.
_SUM_PROGRAMS = {
    "correct": "a, b = map(int, input().split())\nprint(a + b)\n",
    "wrong": "a, b = map(int, input().split())\nprint(a - b)\n",
    "error": "a, b = map(int, input().split())\nprint(a / 0)\n",
}
_SUM_TESTS = json.dumps({"tests": [{"input": f"{a} {b}", "output": str(a + b)} for a, b in ((1, 2), (10, 32), (-5, 5))]})


def reward_throughput(num_completions: int, num_workers: int, seed: int) -> dict:
    """Sandboxed code completions scored per minute by the training loop's scorer.

    `num_completions` completions (80% correct, 15% wrong output, 5% runtime error; each a fenced Python
    program with 3 stdin/stdout tests) go through `BatchScorer(rewards "code", num_workers)` in one batch, as one
    RL step's scoring would; the pool is started and warmed (one batch of `num_workers` completions) first."""
    rng = np.random.default_rng(seed)
    kinds = rng.choice(list(_SUM_PROGRAMS), size=num_completions, p=[0.8, 0.15, 0.05])
    completions = [f"```python\n{_SUM_PROGRAMS[k]}```" for k in kinds]
    with reward_pool.BatchScorer(sandbox.score, num_workers=num_workers, timeout_s=30.0) as scorer:
        scorer.score(completions[:num_workers], [_SUM_TESTS] * num_workers)
        start = time.perf_counter()
        scores, counts = scorer.score(completions, [_SUM_TESTS] * num_completions)
        elapsed = time.perf_counter() - start
    expected = np.where(kinds == "correct", 1.0, 0.0)
    return {
        "framework": "rl4llm", "workload": "reward_throughput", "model": "-", "devices": f"host, {num_workers} workers",
        "completions": num_completions, "wall_s": round(elapsed, 3),
        "completions_per_min": round(60 * num_completions / elapsed, 1),
        "isolation": sandbox.isolation(), "cpu_count": len(os.sched_getaffinity(0)),
        "scores_as_expected": bool(np.array_equal(scores, expected)), **counts,
    }


def default_steps(model: str) -> int:
    """Timed steps WORKLOADS.md asks for: 5 for tiny, 3 otherwise."""
    return 5 if model == "tiny" else 3


def sampling_config(wl: Workload) -> sampling.SamplingConfig:
    """Temperature 1, full vocabulary, no stop tokens: every row gets exactly wl.new_tokens tokens."""
    return sampling.SamplingConfig(max_new_tokens=wl.new_tokens, temperature=1.0, stop_token_ids=(),
                                   pad_id=PAD_ID)


def learner_config(logprob_chunk_size: int, micro_batch_size: int = 0, prompt_group: int = 1) -> learner.LearnerConfig:
    """One on-policy PPO-clip update, seq-mean-token-mean, k3 KL 0.04, no entropy bonus; prompt_group > 1: each
    group's shared prompt forwarded once (`models.completion_hidden`)."""
    return learner.LearnerConfig(
        loss="ppo_clip", loss_kwargs=(("clip_high", 0.2), ("clip_low", 0.2)), agg_mode="seq-mean-token-mean",
        kl_coef=0.04, kl_kind="k3", entropy_coef=0.0, temperature=1.0, micro_batch_size=micro_batch_size,
        logprob_chunk_size=logprob_chunk_size, use_old_logp=False, prompt_group=prompt_group)


def make_optimizer() -> optax.GradientTransformation:
    """Adam (lr 1e-5, b1 0.9, b2 0.999, eps 1e-8), constant lr, no weight decay, no clipping."""
    return optim.make_optimizer(learning_rate=1e-5, warmup_steps=0, weight_decay=0.0, grad_clip=0.0,
                                b1=0.9, b2=0.999, eps=1e-8)


def host_init_params(model_cfg: models.ModelConfig, key: jax.Array) -> dict:
    """`models.init_params` compiled and run on the host CPU, then put on the default device. The init program
    slices ~175 weights out of one draw; XLA compiles each slice as its own kernel, and on a GPU that is slow: on an
    H200 (jax 0.11.2) the 0.5B init program tripped XLA's slow-compile alarm and no 0.5B row finished within 170 s,
    while the CPU compiles it in ~20 s (2 cores)."""
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        params = models.init_params(model_cfg, jax.device_put(key, cpu))
    return jax.device_put(params, jax.devices()[0])


def init_state(model_cfg: models.ModelConfig, key: jax.Array, optimizer=None, critic: bool = False
               ) -> learner.TrainState:
    """Fresh params, their Adam state and a frozen copy of them as the KL reference (params only without
    an optimizer, for sampling alone); with `critic`, a separate critic (a copy of the decoder + a zero head)
    and its own Adam state."""
    params_key, state_key = jax.random.split(key)  # new buffers: the learner step donates the state
    params = host_init_params(model_cfg, params_key)
    if optimizer is None:
        return learner.TrainState(params=params, opt_state=None, ref_params=None,
                                  key=jax.random.key_data(state_key))
    critic_state = None
    if critic:
        critic_params = value_head.init_critic(model_cfg, params, shared_trunk=False)
        critic_state = critic_lib.CriticState(params=critic_params, opt_state=make_optimizer().init(critic_params))
    return learner.TrainState(params=params, opt_state=optimizer.init(params),
                              ref_params=jax.tree.map(jnp.copy, params),
                              key=jax.random.key_data(state_key)).with_extras(critic=critic_state)


def random_prompts(wl: Workload, vocab_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """wl.num_prompts prompts of ids uniform in [1, V), each repeated group_size times: [N, P], mask [N, P]."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(1, vocab_size, (wl.num_prompts, wl.prompt_len), dtype=np.int32)
    tokens = np.repeat(prompts, wl.group_size, axis=0)
    return tokens, np.ones(tokens.shape, bool)


def even_fraction_reward(completion_tokens: np.ndarray, completion_mask: np.ndarray) -> np.ndarray:
    """Fraction of even token ids among each row's completion tokens: [N, T] -> [N] float32."""
    even = (completion_tokens % 2 == 0) & completion_mask
    return (even.sum(-1) / np.maximum(completion_mask.sum(-1), 1)).astype(np.float32)


@functools.partial(jax.jit, static_argnames=("num_groups",))
def grpo_advantages(scores: jax.Array, group_ids: jax.Array, mask: jax.Array, *, num_groups: int) -> jax.Array:
    """GRPO advantages of the registry, broadcast over the completion mask: [N] -> [N, T]."""
    adv = registry.get_advantage("grpo")(scores, group_ids, mask, num_groups=num_groups)
    return adv[:, None] * mask


def generate_and_score(model_cfg, wl: Workload, params, prompts, key, layout=None
                       ) -> tuple[sampling.Rollout, np.ndarray]:
    """Samples the completions (on the layout's sampler mesh when given), copies them to the host and scores them."""
    if layout is None:
        rollout = sampling.generate(model_cfg, params, *prompts, key, sampling_config(wl))
    else:
        rollout = layout.generate(params, *prompts, key, sampling_config(wl))
    tokens, mask = jax.device_get((rollout.completion_tokens, rollout.completion_mask))
    return rollout, even_fraction_reward(tokens, mask)


@jax.jit
def gae_advantages(scores: jax.Array, values: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """PPO's (whitened advantages, returns) [N, T]: GAE with γ 1, λ 0.95 of the outcome reward on the last token."""
    return advantages_lib.gae(registry.last_token_rewards(scores, mask), values, mask, gamma=1.0, lam=0.95)


def joined(rollout: sampling.Rollout) -> tuple[jax.Array, jax.Array]:
    """[prompt | completion] tokens and attention mask [N, P+T] of a rollout."""
    return batches.join_sequences(rollout.prompt_tokens, rollout.prompt_mask, rollout.completion_tokens,
                                  rollout.completion_mask)


def learner_batch(rollout: sampling.Rollout, advantages: jax.Array) -> learner.LearnerBatch:
    """[prompt | completion] rows with their advantages [N, T]; old log-probs are unused (use_old_logp=False)."""
    tokens, attention_mask = joined(rollout)
    return learner.LearnerBatch(tokens=tokens, attention_mask=attention_mask,
                                completion_mask=rollout.completion_mask.astype(jnp.float32), advantages=advantages,
                                old_logp=rollout.logprobs, sampler_logp=rollout.logprobs)


CRITIC_CONFIG = critic_lib.CriticConfig(cliprange_value=0.5, agg_mode="seq-mean-token-mean", micro_batch_size=0)


@dataclasses.dataclass(frozen=True)
class Programs:
    """The jitted programs of a workload: the learner step (None: sampling alone) and PPO's critic programs."""
    learner_step: Callable | None = None  # (state, batch, key) -> (state, metrics), state donated
    values_fn: Callable | None = None  # (critic params, params, tokens, attention_mask) -> values [N, T]
    critic_step: Callable | None = None  # (state, critic batch) -> (state, metrics), state donated
    layout: layout_lib.Layout | None = None  # --mesh: where the state lives and the programs run


def make_programs(model_cfg, wl: Workload, optimizer, logprob_chunk_size: int, layout=None, state=None,
                  shared_prompt: bool = True) -> Programs:
    """The workload's programs; with a `layout` (and the sharded `state`), the learner step on its mesh.
    `shared_prompt`: the learner forwards each group's prompt once (`LearnerConfig.prompt_group` = group size)."""
    if not wl.learn:
        return Programs(layout=layout)
    prompt_group = wl.group_size if shared_prompt else 1
    learner_step = learner.make_learner_step(model_cfg, learner_config(logprob_chunk_size, 0, prompt_group), optimizer,
                                             layout, state)
    if not wl.critic:
        return Programs(learner_step, layout=layout)
    return Programs(learner_step, critic_lib.make_values_fn(model_cfg, wl.new_tokens),
                    critic_lib.make_critic_step(model_cfg, CRITIC_CONFIG, make_optimizer()), layout)


def critic_update(programs: Programs, state: learner.TrainState, rollout: sampling.Rollout, scores: jax.Array
                  ) -> tuple[learner.TrainState, jax.Array]:
    """PPO: the rollout's values, GAE, one critic update -> (state, whitened advantages [N, T])."""
    tokens, attention_mask = joined(rollout)
    mask = rollout.completion_mask.astype(jnp.float32)
    values = programs.values_fn(state.extra("critic").params, state.params, tokens, attention_mask)
    advantages, returns = gae_advantages(scores, values, mask)
    batch = critic_lib.CriticBatch(tokens=tokens, attention_mask=attention_mask, completion_mask=mask,
                                   old_values=values, returns=returns)
    state, _ = programs.critic_step(state, batch)
    return state, advantages


def group_advantages(wl: Workload, rollout: sampling.Rollout, scores: jax.Array) -> jax.Array:
    """grpo_step: GRPO advantages [N, T] of the scores [N], groups of wl.group_size consecutive rows."""
    mask = rollout.completion_mask.astype(jnp.float32)
    group_ids = jnp.repeat(jnp.arange(wl.num_prompts), wl.group_size)
    return grpo_advantages(scores, group_ids, mask, num_groups=wl.num_prompts)


def timed_step(model_cfg, wl: Workload, programs: Programs, state: learner.TrainState, prompts, key
               ) -> tuple[learner.TrainState, dict[str, float]]:
    """One workload step; returns the new state and its wall times {step_s, gen_s[, critic_s][, learn_s]}.

    The sampler draws from fold_in(key, 0); the learner step gets fold_in(key, 1).
    """
    t0 = time.perf_counter()
    rollout, scores = generate_and_score(model_cfg, wl, state.params, prompts, jax.random.fold_in(key, 0),
                                         programs.layout)
    t_gen = time.perf_counter()
    times = {"gen_s": t_gen - t0}
    if wl.learn:
        scores = jnp.asarray(scores)
        if wl.critic:
            state, advantages = jax.block_until_ready(critic_update(programs, state, rollout, scores))
            times["critic_s"] = time.perf_counter() - t_gen
        else:
            advantages = group_advantages(wl, rollout, scores)
        batch = jax.block_until_ready(learner_batch(rollout, advantages))
        t_learn = time.perf_counter()
        state, _ = jax.block_until_ready(programs.learner_step(state, batch, jax.random.fold_in(key, 1)))
        times["learn_s"] = time.perf_counter() - t_learn
    times["step_s"] = time.perf_counter() - t0
    return state, times


def compile_seconds(model_cfg, wl: Workload, programs: Programs, state: learner.TrainState, prompts, key) -> float:
    """Wall time to lower and compile `generate` (and the learner / critic programs) for this workload's shapes.

    The jit calls of the steps that follow find these executables in JAX's compilation cache.
    """
    t0 = time.perf_counter()
    if programs.layout is None:
        lowered = sampling.generate.lower(model_cfg, state.params, *prompts, key, sampling_config(wl))
    else:
        sampler_inputs = programs.layout.sampler_inputs(state.params, *prompts, key)
        lowered = programs.layout.generate_program(sampling_config(wl)).lower(*sampler_inputs)
    lowered.compile()
    if programs.learner_step is not None:
        rollout = lowered.out_info
        scores = jax.ShapeDtypeStruct((wl.batch,), jnp.float32)
        advantages = jax.ShapeDtypeStruct(rollout.completion_mask.shape, jnp.float32)
        programs.learner_step.lower(state, jax.eval_shape(learner_batch, rollout, advantages), key).compile()
        if programs.critic_step is not None:
            tokens, attention_mask = jax.eval_shape(joined, rollout)
            values = programs.values_fn.lower(state.extra("critic").params, state.params, tokens, attention_mask)
            values.compile()
            gae_advantages.lower(scores, values.out_info, advantages).compile()
            batch = critic_lib.CriticBatch(tokens=tokens, attention_mask=attention_mask, completion_mask=advantages,
                                           old_values=values.out_info, returns=values.out_info)
            programs.critic_step.lower(state, batch).compile()
    return time.perf_counter() - t0


def environment() -> dict:
    """Devices and library versions, as the JSON line reports them."""
    devices = jax.devices()
    return {"devices": f"{devices[0].platform} x{len(devices)}",
            "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
                         "optax": optax.__version__, "python": platform.python_version()}}


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.5g}")


def accelerator_peaks(model_cfg: models.ModelConfig) -> tuple[float, float] | None:
    """(peak FLOP/s, HBM bytes/s) of the device the run is on, from `ACCELERATORS`; None on an unlisted device or
    for a float32 model (the table holds bf16 peaks)."""
    if model_cfg.dtype != "bfloat16":
        return None
    return ACCELERATORS.get(jax.devices()[0].device_kind)


def learner_model_flops(model_cfg: models.ModelConfig, rows: int, prompt_len: int, new_tokens: int,
                        prompt_group: int = 1) -> float:
    """Model FLOPs of one learner step (what MFU counts; `models.flops`): the policy's forward and backward
    (3 x the forward) and the KL reference's forward, each over rows x (prompt + completion) tokens with logits for
    the completion (each group's prompt once with `prompt_group` > 1). Rematerialisation is not counted."""
    return 4 * flops_lib.learner_forward_flops(model_cfg, rows, prompt_len + new_tokens, new_tokens, prompt_group)


def generation_hbm_bytes(model_cfg: models.ModelConfig, wl: Workload) -> float:
    """HBM bytes generation streams at least (`train.aot_costs.Costs.generate`): the weights once for the prefill,
    then per decode step every weight and the whole KV cache [rows, Hkv, P+T, D] per layer."""
    phases = aot_costs.Costs(model_cfg, {}).generate(wl.batch, wl.prompt_len, wl.new_tokens)
    return sum(p.hbm_bytes_per_chip for p in phases)


def utilisation(model_cfg: models.ModelConfig, wl: Workload, gen_s: float, learn_s: float | None,
                prompt_group: int) -> dict:
    """Achieved rates against the analytic counts: learn_tflop_s = learner model FLOPs / learn_s, gen_hbm_gb_s =
    generation's HBM bytes / gen_s; on a listed accelerator with a bf16 model, their fractions of its peaks (MFU,
    gen_hbm_frac). gen_s includes the prefill, the completions' copy to the host and the host reward, so the
    fraction is a lower bound on the decode loop's."""
    gen_bytes = generation_hbm_bytes(model_cfg, wl)
    learn_flops = learner_model_flops(model_cfg, wl.batch, wl.prompt_len, wl.new_tokens, prompt_group)
    peaks = accelerator_peaks(model_cfg)
    return {
        "gen_hbm_gb_s": _round(gen_bytes / gen_s / 1e9),
        "gen_hbm_frac": _round(gen_bytes / gen_s / peaks[1]) if peaks else None,
        "learn_tflop_s": _round(learn_flops / learn_s / 1e12) if learn_s else None,
        "mfu": _round(learn_flops / learn_s / peaks[0]) if peaks and learn_s else None,
    }


def summarize(model_cfg: models.ModelConfig, wl: Workload, model: str, compile_s: float,
              timed: list[dict[str, float]], prompt_group: int = 1) -> dict:
    """The JSON record of WORKLOADS.md from the compile time and the timed steps' wall times (medians);
    ppo_step adds critic_s; `utilisation` adds the achieved FLOP/s and HBM bandwidth."""
    median = lambda k: statistics.median(t[k] for t in timed)
    step_s, gen_s = median("step_s"), median("gen_s")
    learn_s = median("learn_s") if wl.learn else None
    return {
        "framework": "rl4llm", "workload": wl.name, "model": model, "dtype": model_cfg.dtype,
        "step_s": _round(step_s), "gen_s": _round(gen_s), "gen_tok_s": _round(wl.batch * wl.new_tokens / gen_s),
        **({"critic_s": _round(median("critic_s"))} if wl.critic else {}),
        "learn_s": _round(learn_s),
        "learn_tok_s": _round(wl.batch * (wl.prompt_len + wl.new_tokens) / learn_s) if wl.learn else None,
        **utilisation(model_cfg, wl, gen_s, learn_s, prompt_group),
        "peak_rss_mb": _round(peak_rss_mb()), "compile_s": _round(compile_s),
        **environment(),
    }


def run_workload(model_cfg: models.ModelConfig, model: str, wl: Workload, steps: int, seed: int,
                 logprob_chunk_size: int = 128, mesh: str = "", shared_prompt: bool = True) -> dict:
    """AOT compilation, one warm-up step, then `steps` timed steps of `wl`; returns the JSON record.
    `mesh` "data,fsdp,tensor": on that device mesh (shared by the learner and the sampler)."""
    key = jax.random.key(seed)
    optimizer = make_optimizer() if wl.learn else None
    state = jax.block_until_ready(init_state(model_cfg, key, optimizer, critic=wl.critic))
    layout = None
    if mesh:
        sizes = dict(zip(mesh_lib.MESH_AXES, map(int, mesh.split(","))))
        meshes = mesh_lib.meshes_from_config(ml_collections.ConfigDict({**sizes, "sampler": "shared",
                                                                        "judges": "shared"}))
        layout = layout_lib.Layout(meshes, model_cfg)
        state = jax.block_until_ready(layout.shard_state(state))
    programs = make_programs(model_cfg, wl, optimizer, logprob_chunk_size, layout, state, shared_prompt)
    prompts = random_prompts(wl, model_cfg.vocab_size, seed)
    compile_s = compile_seconds(model_cfg, wl, programs, state, prompts, key)
    times = []
    for step in range(steps + 1):
        state, step_times = timed_step(model_cfg, wl, programs, state, prompts, jax.random.fold_in(key, step))
        times.append(step_times)
    prompt_group = wl.group_size if shared_prompt else 1
    return {**summarize(model_cfg, wl, model, compile_s, times[1:], prompt_group), **({"mesh": mesh} if mesh else {})}


def probe_batch(wl: Workload, vocab_size: int, seed: int) -> learner.LearnerBatch:
    """Random [prompt | completion] rows with random advantages, all tokens valid."""
    rng = np.random.default_rng(seed)
    n, length = wl.batch, wl.prompt_len + wl.new_tokens
    completion = np.ones((n, wl.new_tokens), np.float32)
    return learner.LearnerBatch(
        tokens=jnp.asarray(rng.integers(1, vocab_size, (n, length), dtype=np.int32)),
        attention_mask=jnp.ones((n, length), jnp.int32), completion_mask=jnp.asarray(completion),
        advantages=jnp.asarray(rng.standard_normal((n, wl.new_tokens), np.float32)),
        old_logp=jnp.zeros_like(completion), sampler_logp=jnp.zeros_like(completion))


def memory_probe(model_cfg: models.ModelConfig, model: str, wl: Workload, logprob_chunk_size: int,
                 micro_batch_size: int, seed: int, execute: bool) -> dict:
    """Compiles (and, if `execute`, runs) one learner step on random rows; returns its memory record."""
    optimizer = make_optimizer()
    state = jax.block_until_ready(init_state(model_cfg, jax.random.key(seed), optimizer))
    batch = probe_batch(wl, model_cfg.vocab_size, seed)
    step = learner.make_learner_step(model_cfg, learner_config(logprob_chunk_size, micro_batch_size), optimizer)
    key = jax.random.key(seed + 1)  # the learner step's key for losses that draw (ppo_clip does not)
    t0 = time.perf_counter()
    compiled = step.lower(state, batch, key).compile()
    compile_s = time.perf_counter() - t0
    stats = compiled.memory_analysis()
    step_s = learn_flops = None
    if execute:  # one warm-up call, then the median of 3 (the step donates the state: each call takes the last's)
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            state, _ = jax.block_until_ready(compiled(state, batch, key))
            times.append(time.perf_counter() - t0)
        step_s = statistics.median(times[1:])
        learn_flops = learner_model_flops(model_cfg, wl.batch, wl.prompt_len, wl.new_tokens)
    peaks = accelerator_peaks(model_cfg)
    return {
        "framework": "rl4llm", "workload": wl.name, "model": model, "batch": wl.batch,
        "prompt_len": wl.prompt_len, "completion_len": wl.new_tokens, "micro_batch_size": micro_batch_size,
        "logprob_chunk_size": logprob_chunk_size, "remat": model_cfg.remat,
        "attention_query_chunk": model_cfg.attention_query_chunk,
        "full_logits_mb": _round(wl.batch * wl.new_tokens * model_cfg.vocab_size * 4 / MIB),
        "temp_mb": _round(stats.temp_size_in_bytes / MIB), "argument_mb": _round(stats.argument_size_in_bytes / MIB),
        "output_mb": _round(stats.output_size_in_bytes / MIB), "alias_mb": _round(stats.alias_size_in_bytes / MIB),
        "peak_rss_mb": _round(peak_rss_mb()), "step_s": _round(step_s), "compile_s": _round(compile_s),
        "learn_tflop_s": _round(learn_flops / step_s / 1e12) if step_s else None,
        "mfu": _round(learn_flops / step_s / peaks[0]) if step_s and peaks else None,
        **environment(),
    }


def notes(workload: str) -> list[str]:
    """What the figures of `workload` include, for the human table."""
    if workload in REWARD_WORKLOADS:
        return ["each completion: a sandboxed subprocess (namespaces, rlimits, uid drop) running 3 stdin/stdout tests",
                "wall_s: one BatchScorer.score call on the whole batch after a warm-up batch"]
    if workload not in WORKLOADS:
        return ["temp/argument/output/alias_mb: compiled.memory_analysis(); compile_s: AOT lower + compile"]
    gen = "generate + device->host copy" + (" + host reward" if WORKLOADS[workload].learn else "")
    return ["no stop tokens: exactly new_tokens per row, so EOS plays no part; pad id 0; prompts uniform in [1, V)",
            f"gen_s = {gen}; compile_s = AOT lower + compile of generate (+ learner step); times are medians"]


def table(record: dict) -> str:
    """A short human table of a record: one `name  value` row per figure, then the notes."""
    dtype = record.get("dtype", "float32")
    rows = [f"{record['framework']} {record['workload']} {record['model']} ({record['devices']}, {dtype})"]
    rows += [f"  {k:<20s}{v}" for k, v in record.items()
             if k not in ("framework", "workload", "model", "dtype", "devices", "versions") and v is not None]
    rows += [f"  note: {n}" for n in notes(record["workload"])]
    return "\n".join(rows)


def main(argv):
    del argv
    host_memory.reuse_freed_memory()  # before JAX starts its threads
    if _WORKLOAD.value in REWARD_WORKLOADS:
        record = reward_throughput(_REWARD_COMPLETIONS.value, _REWARD_WORKERS.value, _SEED.value)
        print(json.dumps(record), flush=True)
        print(table(record), flush=True)
        return
    overrides = {name: flag.value for name, flag in (("remat", _REMAT), ("attention_query_chunk", _QUERY_CHUNK))
                 if flag.value is not None}
    if _DTYPE.value != "float32":
        overrides.update(dtype=_DTYPE.value, param_dtype=_DTYPE.value)
    model_cfg = models.get_config(_MODEL.value, **overrides)
    if _MEMORY_PROBE.value:
        record = memory_probe(model_cfg, _MODEL.value, MEMORY_PROBE, _CHUNK.value, _PROBE_MICRO_BATCH.value,
                              _SEED.value, _PROBE_EXECUTE.value)
    else:
        steps = _STEPS.value or default_steps(_MODEL.value)
        record = run_workload(model_cfg, _MODEL.value, WORKLOADS[_WORKLOAD.value], steps, _SEED.value,
                              _CHUNK.value, _MESH.value, _SHARED_PROMPT.value)
    print(json.dumps(record), flush=True)
    print(table(record), flush=True)


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)  # keep stdout/stderr to the record and the table
    app.run(main)
