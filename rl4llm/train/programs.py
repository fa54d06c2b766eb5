"""The RL stage's compiled programs, built once per run (`build_rl_programs`): the learner step, the rollout policy's
forward pass when a step needs one (`needs_behaviour_pass`), and the companions' programs (critic, implicit PRM)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable

import jax

from rl4llm.config import validation as config_lib
from rl4llm.rl import registry
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import optim
from rl4llm.train import preference_step
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.companions import epo as epo_lib
from rl4llm.train.companions import prime as prime_lib
from rl4llm.train.companions import quality_head
from rl4llm.train.companions import relift as relift_lib
from rl4llm.train.companions import reward_weighting
from rl4llm.train.companions import rm_cotraining

def several_updates_per_step(config) -> bool:
    """More than one optimizer update per rollout batch: PPO "old" log-probs need their own pass."""
    return config.rl.ppo_epochs * config.rl.num_minibatches > 1


def learner_config(config) -> learner_lib.LearnerConfig:
    rl = config.rl
    return learner_lib.LearnerConfig(
        loss=rl.loss,
        loss_kwargs=tuple(sorted(rl.loss_kwargs.items())),
        agg_mode=rl.agg_mode,
        kl_coef=0.0 if rl.kl_in_reward else rl.kl_coef,
        kl_kind=rl.kl_kind,
        entropy_coef=rl.entropy_coef,
        temperature=config.sampling.temperature,
        micro_batch_size=rl.micro_batch_size,
        logprob_chunk_size=rl.logprob_chunk_size,
        logprob_vocab_chunk_size=rl.logprob_vocab_chunk_size,
        use_old_logp=several_updates_per_step(config),
        tis_cap=rl.tis_cap,
        tis_level=rl.tis_level,
        epo=epo_lib.learner_settings(config),
        agg_norm_length=config_lib.agg_norm_length(config),
        prompt_group=config_lib.shared_prompt_group(config),
        preference=preference_step.settings(config),
    )


@dataclasses.dataclass(frozen=True)
class RLPrograms:
    """The compiled pieces of the RL stage, built once per run."""

    optimizer: Any
    learner_step: Callable  # (state, batch, key) -> (state, metrics), state donated
    # (params, tokens, attention_mask) -> (logp, entropy[, proxy_logp]) [N, T] of the completions, or None
    # when no step statistic of the rollout policy is needed (see `needs_behaviour_pass`).
    behaviour_fn: Callable | None
    # PPO's critic (rl.advantage="gae"), else None: (critic params, policy params, tokens, attention_mask) ->
    # values [N, T]; critic_step (state, critic_batch) -> (state, metrics) updates the critic alone (warm-up,
    # separate critic); shared_trunk_step (state, batch, critic_batch, key) -> (state, metrics) updates both.
    values_fn: Callable | None = None
    critic_step: Callable | None = None
    shared_trunk_step: Callable | None = None
    # PRIME's implicit PRM (rl.advantage="prime"), else None: (prm state, tokens, attention_mask) ->
    # (log π_φ, log π_ref) [N, T]; prm_step (state, prm_batch) -> (state, metrics).
    prm_logprobs_fn: Callable | None = None
    prm_step: Callable | None = None
    # Dynamic reward weighting (reward_weighting.method="dynamic"), else None: (state, batch, advantages [K, N, T],
    # key) -> the Gram matrix [K, K] of the K components' policy gradients.
    component_gram_fn: Callable | None = None
    # ReLIFT (relift.batch_size > 0), else None: (params, opt_state, tokens, attention, completion_mask) -> (params,
    # opt_state, metrics), one SFT step on buffered hardest questions (`companions.relift.make_step`).
    relift_step: Callable | None = None
    # The outcome RM co-trained with the policy (reward_model.co_train), else None: (RMState, CoTrainBatch) -> (RMState,
    # metrics), one Bradley-Terry update on the step's verified pairs (`companions.rm_cotraining`).
    reward_model_step: Callable | None = None
    # ARRoL's quality head (config.pruning), else None: (RMState, QualityBatch) -> (RMState, metrics)
    quality_head_step: Callable | None = None


def _micro_batched(fn: Callable, micro_batch_size: int, mesh, params, tokens, attention_mask):
    """`fn(params, tokens, attention_mask)` over micro-batches of `micro_batch_size` rows (`lax.map`; the whole
    batch when 0 or when it does not divide the rows), under the learner mesh (rows of the activations kept over
    its batch axes), so a forward pass over a whole step's rows holds one micro-batch's activations, as the learner
    step does (compiled for TPU, the whole 5,120-row batch of configs/scale/qwen2_5_1_5b_grpo_gsm8k.py asked for
    266 GiB per chip). -> fn's outputs, leaves [N, ...]."""
    m = micro_batch_size if micro_batch_size and tokens.shape[0] % micro_batch_size == 0 else tokens.shape[0]
    xs = optim.split_microbatches((tokens, attention_mask), m)
    with contextlib.nullcontext() if mesh is None else jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
        out = jax.lax.map(lambda x: fn(params, *x), xs)
    return jax.tree.map(lambda y: y.reshape((-1,) + y.shape[2:]), out)


def needs_behaviour_pass(config) -> bool:
    """Whether an RL step needs a forward pass of the rollout policy before learning: old log-probs
    (several updates per step), entropies (80/20's forking-token mask, D³S's |A|·H token selection), Lp-Reg
    proxy log-probs, or the log-probs of the KL-in-reward penalty, or the responses' mean token entropies (CANON's
    `seq_metric`), or the token entropies of HAPO's adaptive temperature statistics (`sampling.temperature_tau`)."""
    rl = config.rl
    return (
        several_updates_per_step(config)
        or rl.token_selection != "all"
        or "proxy_logp" in registry.policy_loss_inputs(rl.loss)
        or rl.kl_in_reward
        or "seq_metric" in registry.advantage_inputs(rl.advantage)
        or config.sampling.temperature_tau > 0
    )


def build_rl_programs(config, setup, optimizer, *, state=None) -> RLPrograms:
    """Jitted learner step, (when needed) the rollout-policy forward pass, and the programs of the companions the run
    uses (the critic's, the implicit PRM's; with their optimizers). With a mesh (`setup.layout`), the learner step
    keeps the shardings of `state` (the RL stage's placed TrainState)."""
    lcfg = learner_config(config)
    behaviour_fn = None
    if needs_behaviour_pass(config):
        min_p = config.rl.proxy_min_p if "proxy_logp" in registry.policy_loss_inputs(config.rl.loss) else None
        logprobs = functools.partial(
            logprobs_lib.completion_logprobs,
            setup.model_cfg,
            completion_len=config.sampling.max_new_tokens,
            temperature=lcfg.temperature,
            chunk_size=lcfg.logprob_chunk_size,
            vocab_chunk_size=lcfg.logprob_vocab_chunk_size or None,
            min_p=min_p,
            prompt_group=lcfg.prompt_group,
        )
        behaviour_fn = jax.jit(functools.partial(_micro_batched, logprobs, lcfg.micro_batch_size,
                                                 setup.layout.meshes.learner if setup.layout else None))
    extra_programs = {}  # programs of the critic or the implicit PRM
    if critic_lib.enabled(config):
        ccfg, critic_optimizer = critic_lib.critic_config(config), critic_lib.make_critic_optimizer(config)
        extra_programs = dict(
            values_fn=critic_lib.make_values_fn(setup.model_cfg, config.sampling.max_new_tokens),
            critic_step=critic_lib.make_critic_step(setup.model_cfg, ccfg, critic_optimizer),
            shared_trunk_step=(
                critic_lib.make_shared_trunk_step(setup.model_cfg, lcfg, ccfg, optimizer, critic_optimizer)
                if config.critic.shared_trunk
                else None
            ),
        )
    if prime_lib.enabled(config):
        pcfg, prm_optimizer = prime_lib.prm_config(config), prime_lib.make_prm_optimizer(config)
        extra_programs = dict(
            prm_logprobs_fn=prime_lib.make_logprobs_fn(setup.model_cfg, pcfg, config.sampling.max_new_tokens),
            prm_step=prime_lib.make_prm_step(setup.model_cfg, pcfg, prm_optimizer),
        )
    if config.reward_weighting.method == "dynamic":
        extra_programs["component_gram_fn"] = reward_weighting.make_gram_fn(setup.model_cfg, lcfg)
    if relift_lib.enabled(config):
        extra_programs["relift_step"] = relift_lib.make_step(config, setup)
    if rm_cotraining.enabled(config):
        extra_programs["reward_model_step"] = rm_cotraining.make_step(config, setup)
    if quality_head.enabled(config):
        extra_programs["quality_head_step"] = quality_head.make_step(config)
    return RLPrograms(
        optimizer=optimizer,
        learner_step=learner_lib.make_learner_step(setup.model_cfg, lcfg, optimizer, setup.layout, state),
        behaviour_fn=behaviour_fn,
        **extra_programs,
    )
