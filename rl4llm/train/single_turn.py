"""The single-turn rollout source of the job (`train.job`): setup (`build_setup`), SFT batches of reference solutions
(`sft_batch`), held-out evaluation (`evaluate`), and an RL step's learner inputs (`collect`): the scored rollouts
(`train.rollouts`), the rollout policy's forward pass when needed, the estimator's standard inputs
(`train.inputs`), advantages and the LearnerBatch. The multi-turn source is `train.agent`."""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp

from rl4llm import models
from rl4llm.config import validation as config_lib
from rl4llm.parallel import distributed
from rl4llm.parallel import layout as layout_lib
from rl4llm.rl import advantages as advantages_lib
from rl4llm.rl import entropy as entropy_lib
from rl4llm.rl import registry
from rl4llm.train import batches
from rl4llm.train import downsampling
from rl4llm.train import evaluate as evaluate_lib
from rl4llm.train import inputs as inputs_lib
from rl4llm.train import learner as learner_lib
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib
from rl4llm.train import teacher as teacher_lib
from rl4llm.train import urpo
from rl4llm.train.companions import adaptive_temperature
from rl4llm.train.companions import critic as critic_lib
from rl4llm.train.companions import quality_head
from rl4llm.train.companions import reward_weighting
from rl4llm.train.companions import rm_cotraining
from rl4llm.train.programs import several_updates_per_step
from rl4llm.train.setup import Setup
from rl4llm.train.step import RolloutBatch

# SFT sequences are padded to a multiple of this many tokens (a handful of compiled shapes).
SFT_LENGTH_BUCKET = 8


def sft_batch(config, setup: Setup, step: int):
    """Tokens [N, L], attention mask [N, L] and loss mask [N, L-1] of SFT step `step`: each example's prompt and
    solution (+ eos, at most `sampling.max_new_tokens` tokens) as one unpadded sequence, right-padded to a multiple
    of `SFT_LENGTH_BUCKET` (`batches.pad_training_sequences`); the loss is on the solution's tokens."""
    examples = setup.task.source.train_examples(step, config.sft.batch_size)
    prompts = [setup.tokenizer.encode_prompt(e.prompt) for e in examples]
    solutions, solution_mask = batches.encode_completions(
        setup.tokenizer, [e.solution for e in examples], config.sampling.max_new_tokens
    )
    rows = []
    for prompt, solution, mask in zip(prompts, solutions, solution_mask):
        solution = solution[mask > 0].tolist()
        rows.append((prompt + solution, [0.0] * len(prompt) + [1.0] * len(solution)))
    return batches.pad_training_sequences(rows, setup.tokenizer.pad_id, SFT_LENGTH_BUCKET)


def evaluate(config, setup: Setup, params, key) -> dict:
    """Held-out evaluation of `params` (`train.evaluate`): greedy accuracy, pass@k, ...; with urpo.eval_pairs the
    referee's held-out accuracy (`urpo.evaluate_referee`)."""
    referee = urpo.evaluate_referee(config, setup, params, key) if config.urpo.eval_pairs else {}
    params = setup.layout.sampler_params(params) if setup.layout else params
    return {**evaluate_lib.evaluate(setup.model_cfg, params, setup.tokenizer, setup.eval_examples, key,
                                    setup.eval_spec, setup.score_fn), **referee}


def learner_batch(config, data: inputs_lib.StepData, rollout, adv_scores, advantages):
    """The step's LearnerBatch [N, ...]: PPO's old log-probs (the behaviour pass with several updates per step, else
    the sampler's), the token selection (80/20's forking tokens, D³S's |A|·H tokens at step `data.step`), Lp-Reg's
    proxy log-probs, GBPO's targets, the token mask of what the policy did not sample (off-policy traces, Guide's
    hints; losses taking off_policy_mask) and the
    rewards and groups a pairwise objective pairs by when configured."""
    rl = config.rl
    pairwise = config_lib.uses_pairwise_objective(config)
    behaviour, loss_inputs = data.behaviour, registry.policy_loss_inputs(rl.loss)
    return learner_lib.LearnerBatch(
        tokens=data.tokens,
        attention_mask=data.attention_mask,
        completion_mask=data.mask,
        advantages=advantages,
        old_logp=behaviour[0] if several_updates_per_step(config) else rollout.logprobs,
        sampler_logp=rollout.logprobs,
        token_weights=token_selection(config, data, advantages),
        proxy_logp=behaviour[2] if "proxy_logp" in loss_inputs else None,
        target_advantages=(
            advantages_lib.gbpo_targets(adv_scores, data.group_ids, num_groups=rl.num_prompts)
            if "target_advantages" in loss_inputs
            else None
        ),
        off_policy_mask=(
            data.mask * jnp.asarray(data.off_policy, jnp.float32) if "off_policy_mask" in loss_inputs else None
        ),
        scores=jnp.asarray(data.scores, jnp.float32) if pairwise else None,
        group_ids=jnp.asarray(data.group_ids, jnp.int32) if pairwise else None,
    )


def token_selection(config, data: inputs_lib.StepData, advantages):
    """The tokens that get a gradient [N, T] under `rl.token_selection` (None: all): the top-rho entropy tokens
    (80/20) or the top |A|·H tokens (D³S), from the behaviour pass's entropies."""
    rl, entropy = config.rl, data.behaviour[1] if data.behaviour else None
    if rl.token_selection == "high_entropy":
        return entropy_lib.forking_token_mask(entropy, data.mask, rho=rl.token_selection_rho)
    if rl.token_selection == "advantage_entropy":
        return downsampling.token_mask(config, data.step, advantages, entropy, data.mask)
    return None


def collect(config, setup: Setup, programs, state, step: int, *, selection=None,
            params_version: int | None = None) -> RolloutBatch:
    """The learner's inputs of RL step `step`: the scored rollout (`rollouts.rollout_and_score`) of the prompts the
    prompt selection's state `selection` picks (None: `config.selection` keeps none), the rollout policy's forward
    pass when needed, the estimator's inputs (`train.inputs`), advantages and the LearnerBatch, with the selection's
    new state. Reads `state`, never updates it. `params_version`: RL steps done by `state.params` (default `step`)."""
    rl = config.rl
    step_key = jax.random.fold_in(jax.random.wrap_key_data(state.key), step)
    t0 = time.time()
    rollout, scores, components, group_ids, off_policy, layouts, host_metrics, selection, relift_rows, features = (
        rollouts.rollout_and_score(config, setup, state.params, step, step_key, selection,
                                   adaptive_temperature.sampler_stats(config, state),
                                   rm_cotraining.params(config, state), quality_head.params(config, state)))
    mask = rollout.completion_mask.astype(jnp.float32)
    tokens, attention_mask = batches.join_sequences(rollout.prompt_tokens, rollout.prompt_mask,
                                                    rollout.completion_tokens, rollout.completion_mask)
    data = inputs_lib.StepData(config, setup, programs, state, step, step_key, scores, components, mask, tokens,
                               attention_mask, jnp.asarray(group_ids), behaviour=None, off_policy=off_policy,
                               **layouts)
    active = inputs_lib.providers(config)
    products, metrics = inputs_lib.provide(active, data, host=True)
    t_gen = time.time() - t0
    behaviour = programs.behaviour_fn(state.params, tokens, attention_mask) if programs.behaviour_fn else None
    data = dataclasses.replace(data, behaviour=behaviour)
    device_products, device_metrics = inputs_lib.provide(active, data, host=False)
    products.update(device_products)
    host_metrics.update({**metrics, **device_metrics})
    advantage_inputs = registry.advantage_inputs(rl.advantage)
    adv_scores = products.pop("scores", jnp.asarray(scores))  # KL in the reward: Σ_t token rewards

    def estimate(s):  # the run's estimator on rewards s [N] -> (advantages [N, T], value targets or None)
        return inputs_lib.advantages(s, data.group_ids, mask, name=rl.advantage, num_groups=rl.num_prompts,
                                     kwargs=tuple(sorted(inputs_lib.advantage_kwargs(config).items())),
                                     **{k: v for k, v in products.items() if k in advantage_inputs})

    reweighted = reward_weighting.weighted_advantages(config, state, components, lambda s: estimate(s)[0])
    if reweighted is None:
        (advantages, returns), reward_components = estimate(adv_scores), None
    else:  # config.reward_weighting: advantages of the re-weighted components, no value targets
        (advantages, reward_components), returns = reweighted, None
    host_metrics["useful_frac"] = useful_fraction(advantages, mask)
    kept, downsample_metrics = downsampling.rollout_mask(config, step, advantages, mask, data.group_ids)
    host_metrics.update(downsample_metrics)
    if kept is not None:  # D³S's sample level: the dropped rollouts leave the loss (the critic is excluded)
        data = dataclasses.replace(data, mask=mask * kept[:, None])
    critic_batch = None
    if returns is not None:
        critic_batch = critic_lib.CriticBatch(tokens=tokens, attention_mask=attention_mask, completion_mask=mask,
                                              old_values=products["values"], returns=returns)
        host_metrics.update(critic_lib.value_metrics(products["values"], returns, mask))
    return RolloutBatch(
        step=step, params_version=step if params_version is None else params_version,
        batch=learner_batch(config, data, rollout, adv_scores, advantages), critic_batch=critic_batch,
        prm_batch=products.get("prm_batch"), current_kl=products.get("current_kl"), host_metrics=host_metrics,
        t_gen=t_gen, selection=selection, reward_components=reward_components,
        entropy_stats=adaptive_temperature.step_stats(config, behaviour[1], mask) if behaviour else None,
        relift_rows=relift_rows,
        reward_model_batch=rm_cotraining.batch(config, tokens, attention_mask, components, group_ids),
        quality_batch=quality_head.batch(config, features, components[:, 0]),
    )


def useful_fraction(advantages, mask):  # [N, T] each
    """Rows that carry a learning signal (a non-zero advantage on a trained token): 1 − the share of the batch that
    all-equal groups (or masked rows) waste; generated rollouts / useful rows = samples per useful gradient."""
    return jnp.mean(jnp.any((advantages != 0) & (mask > 0), axis=-1))


def build_setup(config, workdir: str) -> Setup:
    """`setup.build_setup` (process 0 trains and caches the tokenizer, the others load it), on the config's meshes,
    with the teacher that samples the off-policy traces or the file that holds them (config.teacher), and
    DeepSearch's replay buffer (config.deepsearch.replay_path)."""
    with distributed.main_process_first("task tokenizer"):
        setup = setup_lib.build_setup(config, workdir)
    setup = setup_lib.with_layout(setup, layout_lib.layout_from_config(config, setup.model_cfg))
    return dataclasses.replace(setup, teacher=teacher_lib.load(config),
                               file_traces=teacher_lib.load_file_traces(config, setup),
                               search_replay=teacher_lib.load_file_traces(config, setup, "deepsearch.replay_path"))


def describe(config, setup: Setup) -> str:
    """The job's opening line: the model, its size and the devices."""
    shapes = jax.eval_shape(functools.partial(models.init_params, setup.model_cfg), jax.random.key(0))
    num_params = sum(x.size for x in jax.tree.leaves(shapes))
    return (f"model {config.model.hf_checkpoint or config.model.preset}: {num_params / 1e6:.2f}M params, "
            f"{setup.model_cfg}; devices: {jax.devices()}")


def summary(sft_eval: dict, rl_eval: dict) -> dict:
    """The headline numbers of summary.json: greedy accuracy after the warm start and after RL."""
    return {"sft_eval_accuracy": sft_eval["eval/greedy_accuracy"], "rl_eval_accuracy": rl_eval["eval/greedy_accuracy"]}


def summary_table(summary: dict) -> str:
    """A short human table of warm-start vs after-RL evaluation.

    The two evaluations may differ in what they measured (a warm start reused from another run evaluated other
    pass@k): a number one of them lacks shows as "-".
    """
    evals = (("warm start", summary["sft_eval"]), ("after RL", summary["rl_eval"]))
    pass_keys = {k for _, ev in evals for k in ev if k.startswith("eval/pass@")}
    keys = ["eval/greedy_accuracy", *sorted(pass_keys, key=lambda k: int(k.removeprefix("eval/pass@"))),
            "eval/response_length"]
    rows = [f"{'':12s}" + "".join(f"{k.removeprefix('eval/'):>18s}" for k in keys)]
    for name, ev in evals:
        rows.append(f"{name:12s}" + "".join(f"{ev[k]:>18.3f}" if k in ev else f"{'-':>18s}" for k in keys))
    return "\n".join(rows)
