"""The checks of a run config that read several fields or sections (`rl4llm.config.parse` runs them after every
field's own bound, `rl4llm.config.sections`): batch divisibility, method signatures traced on shapes, reward
ranges, companions, selection, mesh. Every error names the field as the command line writes it
(`config.rl.num_generations`); `errors(config, invalid)` returns them all.
"""

from __future__ import annotations

import functools
import inspect
import re

import jax
import jax.numpy as jnp

from rl4llm import rewards
from rl4llm.config import agent as agent_config
from rl4llm.data import arithmetic
from rl4llm.data import curriculum
from rl4llm.data import difficulty
from rl4llm.data import selection as selection_lib
from rl4llm.data import tasks
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import length as length_lib
from rl4llm.rewards import process as process_lib
from rl4llm.rl import preference
from rl4llm.rl import process as process_rl
from rl4llm.rl import registry
from rl4llm.sampling.mcts import SearchShape
from rl4llm.sampling.tree import TreeShape
from rl4llm.verifiers import referee as referee_lib
from rl4llm.verifiers import templates


def _unwrap(fn):
    return fn.func if isinstance(fn, functools.partial) else fn


def agg_norm_length(config) -> int:
    """C of the "seq-mean-token-sum-norm" aggregation (Dr.GRPO's constant): `config.rl.agg_norm_length`, or the
    run's response budget when 0 (the longest completion record the learner can see: `sampling.max_new_tokens`,
    or `agent.max_context` in agent runs), so it never changes from step to step."""
    if config.rl.agg_norm_length:
        return config.rl.agg_norm_length
    return config.agent.max_context if config.agent.env else config.sampling.max_new_tokens


def shared_prompt_group(config) -> int:
    """G = rl.num_generations when the learner may forward each group's prompt once for its G rows
    (`models.completion_hidden(prompt_group=G)`), else 1. It may when `rl.shared_prompt_forward` is on and every
    learner batch is whole groups of G consecutive rows with one prompt each: a single-turn run without hints
    (GHPO changes a regenerated group's prompts) or knapsack allocation (variable group sizes), one minibatch per
    pass (more would shuffle rows) and micro-batches of whole groups. `train.single_turn` checks the rows of every
    batch it builds against it."""
    rl, sel, g = config.rl, config.selection, config.rl.num_generations
    shareable = (rl.shared_prompt_forward and not config.agent.env and not sel.hints and sel.method != "knapsack"
                 and rl.num_minibatches == 1 and rl.micro_batch_size % g == 0)
    return g if shareable and g > 1 else 1


def uses_reward_components(config) -> bool:
    """Whether the advantage estimator gets the reward components [N, K] (the main reward, then the rewards of
    `config.task.extra_rewards`): it declares `reward_components` and extra rewards are configured. Without
    extra rewards `bnpo` normalises the combined reward as before, and `gdpo` is a config error."""
    declared = "reward_components" in registry.advantage_inputs(config.rl.advantage)
    return declared and bool(combine_lib.parse_weights(config.task.extra_rewards))


def _reward_range_errors(config) -> list[str]:
    """BNPO fits a Beta distribution to the groups' mean rewards scaled by (r_min, r_max) (default [0, 1]): a length
    shaper that adds bonuses or penalties, or KL in the reward, moves rewards out of that range, and the Beta density
    of a mean outside [0, 1] gives NaN (a group mean of -0.0025) or meaningless advantages. With reward components bnpo normalises each component, which
    neither changes (`_reward_component_errors`)."""
    rl, task = config.rl, config.task
    if rl.advantage != "bnpo" or uses_reward_components(config):
        return []
    kwargs = rl.advantage_kwargs
    if "r_min" in kwargs or "r_max" in kwargs:
        return []  # the user states the range
    errors = []
    if task.length_shaping in length_lib.LENGTH_SHAPING and task.length_shaping not in length_lib.RANGE_PRESERVING:
        errors.append(
            f"config.task.length_shaping={task.length_shaping!r} adds bonuses or penalties, so rewards leave the "
            "[0, 1] that rl.advantage='bnpo' scales by (its Beta fit then gives NaN or meaningless advantages): set "
            "config.rl.advantage_kwargs.r_min / r_max to the shaped reward's range, or use 'dler_truncation' / 'none'"
        )
    if rl.kl_in_reward:
        errors.append(
            "config.rl.kl_in_reward=True subtracts a KL penalty from the reward, so rewards leave the [0, 1] that "
            "rl.advantage='bnpo' scales by: set config.rl.advantage_kwargs.r_min / r_max, or put the KL in the loss"
        )
    return errors


def _reward_component_errors(config) -> list[str]:
    """An estimator of reward components needs extra rewards, and sees neither length shaping nor a KL penalty
    in the reward (both change the combined reward only)."""
    rl, task = config.rl, config.task
    if not _normalises_components(rl):
        return []
    try:
        has_extras = bool(combine_lib.parse_weights(task.extra_rewards))
    except ValueError:
        return []  # reported by _task_errors
    default = inspect.signature(registry.ADVANTAGES[rl.advantage]).parameters["reward_components"].default
    if not has_extras and default is inspect.Parameter.empty:
        return [
            f"config.rl.advantage={rl.advantage!r} normalises each reward component separately but "
            f"config.task.extra_rewards={task.extra_rewards!r} configures none besides the main reward (with one "
            "component it is GRPO followed by a batch whitening): set config.task.extra_rewards, e.g. "
            "'format_think_answer:0.5', or use rl.advantage='grpo'"
        ]
    errors = []
    if has_extras and task.length_shaping != "none":
        errors.append(
            f"config.task.length_shaping={task.length_shaping!r}: shapes the combined reward only, which "
            f"rl.advantage={rl.advantage!r} with extra rewards does not use (it normalises the components); "
            "set it to 'none' or drop config.task.extra_rewards"
        )
    if has_extras and rl.kl_in_reward:
        errors.append(
            f"config.rl.kl_in_reward=True: the penalty enters the combined reward only, which "
            f"rl.advantage={rl.advantage!r} with extra rewards does not use; put the KL in the loss (rl.kl_coef)"
        )
    return errors


def _check_cosine_has_decay(errors: list, config, stage: str) -> None:
    """A cosine schedule decays over the updates after the warm-up, so a stage that runs needs more updates than
    `warmup_steps` (the RL stage's updates are steps x ppo_epochs x num_minibatches)."""
    c = getattr(config, stage)
    if c.lr_schedule != "cosine" or c.steps <= 0:
        return
    updates = c.steps * (c.ppo_epochs * c.num_minibatches if stage == "rl" else 1)
    if updates <= c.warmup_steps:
        errors.append(f"config.{stage}.lr_schedule='cosine' with config.{stage}.warmup_steps={c.warmup_steps}: "
                      f"the stage makes only {updates} updates, none left to decay over; lower warmup_steps or use "
                      f"'constant'")


def _check_inputs_provided(errors, path, name, fn, standard_inputs, provided, loop="training loop"):
    """A method whose signature requires a standard input the rollout source does not provide cannot run."""
    params = inspect.signature(fn).parameters
    missing = [
        p for p in params if p in standard_inputs and p not in provided and params[p].default is inspect.Parameter.empty
    ]
    if missing:
        errors.append(
            f"config.{path}={name!r}: needs {', '.join(missing)}, which the {loop} does not provide yet; "
            "pick another method (rl4llm/rl/registry.py)"
        )


def _check_kwargs(errors, path, fn, kwargs, standard_inputs):
    """Every key of `kwargs` must be a keyword hyper-parameter of `fn`."""
    params = inspect.signature(fn).parameters
    allowed = sorted(p for p in params if p not in standard_inputs)
    for key in kwargs:
        if key not in params or key in standard_inputs:
            errors.append(f"config.{path}.{key}: not a hyper-parameter of this method; allowed: {', '.join(allowed)}")


def _abstract_inputs(names) -> dict:
    """Shape-only standard inputs (N = 4 sequences of T = 3 tokens, 2 groups) for tracing a method."""
    n, t = 4, 3
    arrays = {
        "scores": (n,), "mask": (n, t), "lengths": (n,), "rewards": (n, t), "values": (n, t), "baseline_scores": (n,),
        "process_rewards": (n, t), "reward_components": (n, 2), "seq_metric": (n,),
        "logp": (n, t), "old_logp": (n, t), "advantages": (n,), "entropy": (n, t), "proxy_logp": (n, t),
        "target_advantages": (n,), "off_policy_mask": (n, t), "sampler_logp": (n, t),
    }
    inputs = {k: jax.ShapeDtypeStruct(shape, jnp.float32) for k, shape in arrays.items() if k in names}
    if "group_ids" in names:
        inputs["group_ids"] = jax.ShapeDtypeStruct((n,), jnp.int32)
    if "hinted" in names:
        inputs["hinted"] = jax.ShapeDtypeStruct((n,), jnp.bool_)
    if "tree_nodes" in names:
        inputs["tree_nodes"] = jax.ShapeDtypeStruct((n, t + 1), jnp.int32)
    if "node_q" in names:
        inputs["node_q"] = jax.ShapeDtypeStruct((n,), jnp.float32)
    if "node_terminal" in names:
        inputs["node_terminal"] = jax.ShapeDtypeStruct((n,), jnp.bool_)
    k = 2  # multi-turn layout (agent runs): K = 2 turns
    turn_arrays = {"turn_rewards": ((n, k), jnp.float32), "gt_logprobs": ((n, k + 1), jnp.float32),
                   "turn_id": ((n, t), jnp.int32), "turn_end": ((n, k), jnp.int32), "turn_valid": ((n, k), jnp.bool_)}
    inputs.update({name: jax.ShapeDtypeStruct(*spec) for name, spec in turn_arrays.items() if name in names})
    return inputs


def _check_values(errors, path, adapter, inputs, static):
    """Traces the method (shapes only, nothing compiles) with the configured hyper-parameters; the
    ValueError a kernel raises for an out-of-range hyper-parameter ("name=value: requirement") is
    reported under `config.<path>`."""
    try:
        jax.eval_shape(lambda arrays: adapter(**arrays, **static), inputs)
    except ValueError as e:
        message = str(e)
        named = re.match(r"[A-Za-z_]\w*=", message) is not None  # "name=value: ..." names the field
        errors.append(f"config.{path}.{message}" if named else f"config.{path}: {message}")


def _method_errors(config) -> list[str]:
    """The advantage estimator and the policy loss: their hyper-parameters are theirs and within their ranges
    (the kernels are traced on shapes with them), and the rollout source provides their standard inputs."""
    errors = []
    rl = config.rl
    agent = agent_config.is_agent_config(config)
    provided = registry.COMMON_ADVANTAGE_INPUTS + (
        registry.MULTI_TURN_ADVANTAGE_INPUTS if agent else registry.SINGLE_TURN_ADVANTAGE_INPUTS)
    if rl.advantage in registry.ADVANTAGES:  # else its own bound names it
        fn = _unwrap(registry.ADVANTAGES[rl.advantage])
        before = len(errors)
        _check_kwargs(errors, "rl.advantage_kwargs", fn, rl.advantage_kwargs, registry.ADVANTAGE_INPUTS)
        _check_inputs_provided(errors, "rl.advantage", rl.advantage, fn, registry.ADVANTAGE_INPUTS, provided,
                               "agent loop" if agent else "training loop")
        if len(errors) == before:
            static = {"num_groups": 2, **rl.advantage_kwargs}
            adapter = registry.get_advantage(rl.advantage)
            _check_values(errors, "rl.advantage_kwargs", adapter, _abstract_inputs(provided), static)
    if rl.loss in registry.POLICY_LOSSES:
        fn = _unwrap(registry.POLICY_LOSSES[rl.loss])
        before = len(errors)
        _check_kwargs(errors, "rl.loss_kwargs", fn, rl.loss_kwargs, registry.LOSS_INPUTS)
        _check_inputs_provided(errors, "rl.loss", rl.loss, fn, registry.LOSS_INPUTS, registry.LOSS_INPUTS)
        if len(errors) == before:
            static = {"key": jax.random.key(0), **rl.loss_kwargs}
            adapter = registry.get_policy_loss(rl.loss)
            _check_values(errors, "rl.loss_kwargs", adapter, _abstract_inputs(registry.LOSS_INPUTS), static)
    return errors


def _control_errors(config) -> list[str]:
    """KL / entropy control and asynchronous rollouts against the rest of the run."""
    errors = []
    rl = config.rl
    if rl.async_rollouts and rl.tis_cap <= 0:
        errors.append(
            f"config.rl.tis_cap={rl.tis_cap!r}: asynchronous rollouts (config.rl.async_rollouts=True) learn from "
            "older params' samples; set a truncated-IS cap > 0 (e.g. 2.0) to correct for the sampler mismatch"
        )
    if rl.async_rollouts and agent_config.is_agent_config(config):
        errors.append("config.rl.async_rollouts=True: only single-turn runs collect rollouts in the background; "
                      f"agent runs (config.agent.env={config.agent.env!r}) are synchronous")
    if rl.async_rollouts and config.distributed.initialize:
        errors.append(
            "config.rl.async_rollouts=True: the sampler thread and the learner launch programs in an order that "
            "differs between hosts, which multi-host runs (config.distributed.initialize=True) cannot do; turn one off"
        )
    if rl.kl_coef <= 0:
        for path, value, what in (
            ("rl.kl_in_reward", rl.kl_in_reward, "puts the KL penalty in the reward"),
            ("rl.kl_target", rl.kl_target, "adapts the KL coefficient"),
            ("rl.ref_reset_every", rl.ref_reset_every, "resets the KL reference policy"),
        ):
            if value and not (path == "rl.ref_reset_every" and pair_loss_reads_reference(config)):
                errors.append(f"config.{path}={value!r}: {what}, but config.rl.kl_coef=0 turns KL off; set it > 0")
    if rl.entropy_target > 0 and not 0 <= rl.entropy_coef <= 1:
        errors.append(
            f"config.rl.entropy_coef={rl.entropy_coef!r}: the adaptive entropy coefficient "
            f"(config.rl.entropy_target={rl.entropy_target}) starts here and stays in [0, 1]"
        )
    return errors


def _batch_errors(config) -> list[str]:
    """Groups of >= 2, minibatches that divide the batch, micro-batches that divide a minibatch; schedules."""
    errors = []
    rl = config.rl
    if rl.num_generations < 2:
        errors.append(
            f"config.rl.num_generations={rl.num_generations}: group-relative advantages need a group "
            "of at least 2 completions per prompt"
        )
    batch = rl.num_prompts * rl.num_generations
    if batch % rl.num_minibatches:
        errors.append(
            f"config.rl.num_minibatches={rl.num_minibatches}: must divide the batch of "
            f"num_prompts*num_generations={batch} sequences"
        )
    elif rl.micro_batch_size and (batch // rl.num_minibatches) % rl.micro_batch_size:
        errors.append(
            f"config.rl.micro_batch_size={rl.micro_batch_size}: must divide the minibatch of "
            f"{batch // rl.num_minibatches} sequences (0 = no accumulation)"
        )
    for stage in ("sft", "rl"):
        _check_cosine_has_decay(errors, config, stage)
    return errors


def _task_errors(config) -> list[str]:
    """The arithmetic operand range, the selected non-arithmetic task's section, and the reward pipeline."""
    errors = []
    task = config.task
    if task.max_operands < task.min_operands:
        errors.append(
            f"config.task.max_operands={task.max_operands}: must be >= config.task.min_operands={task.min_operands}"
        )
    if task.name in tasks.SECTIONS:
        try:
            tasks.SECTIONS[task.name](**getattr(task, task.name), seed=0)
        except (TypeError, ValueError) as e:
            errors.append(f"config.task.{task.name}: {e}")
        if task.name == "local" and not task.local["train_path"]:
            errors.append("config.task.local.train_path='': set it to a local JSONL/JSON/Parquet file or TFDS dir")
    try:
        weights = combine_lib.parse_weights(task.extra_rewards)
        for name in weights:
            if name not in rewards.REWARDS:
                known = ", ".join(sorted(rewards.REWARDS))
                errors.append(f"config.task.extra_rewards: unknown reward {name!r}; known: {known}")
    except ValueError as e:
        errors.append(f"config.task.extra_rewards={task.extra_rewards!r}: {e}")
    if task.length_shaping in length_lib.LENGTH_SHAPING:
        fn = length_lib.LENGTH_SHAPING[task.length_shaping]
        _check_kwargs(errors, "task.length_shaping_kwargs", fn, task.length_shaping_kwargs, length_lib.STANDARD_INPUTS)
    if task.pseudo_labels == "majority_vote" and task.reward not in rewards.EXTRACTORS:
        errors.append(
            f"config.task.pseudo_labels='majority_vote': reward {task.reward!r} has no answer extractor; "
            f"use one of {', '.join(sorted(rewards.EXTRACTORS))}"
        )
    return errors


def _round_hint_errors(config) -> list[str]:
    """SEELE's and ADHint's per-problem hint rounds (selection.hint_schedule 'irt' / 'adhint': `hints.round_groups`)."""
    errors = []
    sel, g = config.selection, config.rl.num_generations
    if g % sel.hint_rounds:
        errors.append(f"config.selection.hint_rounds={sel.hint_rounds}: must divide config.rl.num_generations={g} "
                      "(every round draws G / hint_rounds rollouts of each problem)")
    if sel.hint_schedule == "irt" and not sel.irt_guess < sel.target < 1.0:
        errors.append(f"config.selection.target={sel.target}: SEELE's hint needs irt_guess={sel.irt_guess} < "
                      "target < 1 (the accuracy a(h) = c + (1 - c) sigmoid(k (h - b)) reaches only (c, 1))")
    if sel.method != "uniform":
        errors.append(f"config.selection.hint_schedule={sel.hint_schedule!r}: needs config.selection.method='uniform' "
                      f"(got {sel.method!r}: its per-prompt statistics and replay take one hint per group, these "
                      "groups mix the hints of their rounds)")
    return errors


def _hinted_advantage_errors(config) -> list[str]:
    """ADHint's advantage (rl.advantage='adhint') compares a group's hinted rollouts with its unhinted ones."""
    sel = config.selection
    if config.rl.advantage != "adhint" or not sel.hints or sel.hint_schedule in curriculum.ROUND_RATES:
        return []
    return [f"config.rl.advantage='adhint': compares each group's hinted and unhinted rollouts, and "
            f"config.selection.hint_schedule={sel.hint_schedule!r} makes groups all hinted or all unhinted; use "
            f"{' | '.join(sorted(curriculum.ROUND_RATES))}"]


def _off_policy_loss_errors(rl, field: str, tokens: str) -> list[str]:
    """`rl.loss` must take `off_policy_mask`, or it would train `tokens` (the policy did not sample) as sampled."""
    if rl.loss not in registry.POLICY_LOSSES or "off_policy_mask" in registry.policy_loss_inputs(rl.loss):
        return []
    takers = sorted(n for n in registry.POLICY_LOSSES if "off_policy_mask" in registry.policy_loss_inputs(n))
    return [f"{field}: config.rl.loss={rl.loss!r} does not take off_policy_mask and would train {tokens} as sampled; "
            f"use {' | '.join(takers)}"]


def _hindsight_errors(config) -> list[str]:
    """HeRL's hindsight guidance (selection.hint_schedule='hindsight', `train.hints.hindsight_groups`)."""
    sel, rl = config.selection, config.rl
    field = "config.selection.hint_schedule='hindsight'"
    errors = []
    if config.task.name not in process_lib.RUBRICS:
        errors.append(f"{field}: builds guidance from a task rubric, and config.task.name={config.task.name!r} has "
                      f"none; use {' | '.join(sorted(process_lib.RUBRICS))}")
    if rl.loss != "herl":
        errors.append(f"{field}: config.rl.loss={rl.loss!r}; the guided responses need 'herl', whose importance "
                      "weight divides by their behaviour probability under the guidance")
    if rl.num_generations < 2:
        errors.append(f"{field}: config.rl.num_generations={rl.num_generations}; the guided response replaces "
                      "another rollout than the failed one it was guided by: needs >= 2")
    if sel.replay_capacity:
        errors.append(f"{field}: config.selection.replay_capacity={sel.replay_capacity} replays groups without "
                      "their guidance; set it to 0")
    return errors


def _hint_placement_errors(config) -> list[str]:
    """Guide's hints trained in the completion (selection.hint_placement='completion', `train.hints`)."""
    sel, rl = config.selection, config.rl
    field = "config.selection.hint_placement='completion'"
    errors = []
    if not sel.hints:
        errors.append(f"{field}: places hints, and config.selection.hints=False gives none; set hints=True")
    errors += _off_policy_loss_errors(rl, field, "the hint's tokens")
    if sel.replay_capacity:
        errors.append(f"{field}: config.selection.replay_capacity={sel.replay_capacity} replays groups with their "
                      "hint in the prompt; set it to 0")
    if rl.tis_cap > 0:
        errors.append(f"{field}: config.rl.tis_cap={rl.tis_cap} divides by sampler log-probs, which the hint's "
                      "tokens do not have")
    return errors


def _selection_errors(config) -> list[str]:
    """Prompt selection, replay, rollout allocation, hints and curriculum (config.selection.*) against the run."""
    errors = []
    sel, rl = config.selection, config.rl
    method = sel.method
    if sel.acc_low > sel.acc_high:
        errors.append(f"config.selection.acc_low={sel.acc_low}: must be <= config.selection.acc_high={sel.acc_high}")
    if method in selection_lib.POOL_METHODS and sel.pool_size < rl.num_prompts:
        errors.append(f"config.selection.pool_size={sel.pool_size}: must be >= config.rl.num_prompts={rl.num_prompts}")
    if sel.replay_capacity:
        errors += _replay_errors(config)
    if method == "knapsack":
        if sel.knapsack_max_n < sel.knapsack_min_n:
            errors.append(
                f"config.selection.knapsack_max_n={sel.knapsack_max_n}: must be >= knapsack_min_n={sel.knapsack_min_n}"
            )
        if sel.knapsack_min_n > rl.num_generations:
            errors.append(
                f"config.selection.knapsack_min_n={sel.knapsack_min_n}: must be <= config.rl.num_generations="
                f"{rl.num_generations} (the budget is num_prompts x num_generations)"
            )
        if sel.hints:
            errors.append("config.selection.hints=True: not supported with method 'knapsack' (unequal groups)")
    if sel.hints and sel.hint_schedule in curriculum.ROUND_RATES:
        errors += _round_hint_errors(config)
    errors += _hinted_advantage_errors(config)
    if sel.hints and sel.hint_schedule == "hindsight":
        errors += _hindsight_errors(config)
    if sel.hint_placement == "completion":
        errors += _hint_placement_errors(config)
    if method != "uniform" and "baseline_scores" in registry.advantage_inputs(rl.advantage):
        errors.append(
            f"config.selection.method={method!r}: rl.advantage={rl.advantage!r} rolls out a greedy baseline of the "
            "step's uniform prompts; use selection.method='uniform' or another estimator"
        )
    if sel.curriculum_steps:
        if config.task.name != "arithmetic":
            errors.append(
                f"config.selection.curriculum_steps={sel.curriculum_steps}: the curriculum schedules the arithmetic "
                f"task (config.task.name={config.task.name!r}); set it to 0"
            )
        if method in selection_lib.POOL_METHODS or method in selection_lib.LEVEL_METHODS:
            errors.append(
                f"config.selection.curriculum_steps={sel.curriculum_steps}: method {method!r} chooses its own "
                "problems; the curriculum works with the stream's methods: uniform, dynamic_sampling, accuracy_band, "
                "std_filter, low_likelihood"
            )
    if method in selection_lib.LEVEL_METHODS:
        if config.task.name not in difficulty.LADDERS:
            errors.append(
                f"config.selection.method={method!r}: task {config.task.name!r} has no difficulty ladder "
                f"(rl4llm.data.difficulty.LADDERS: {', '.join(difficulty.LADDERS)})"
            )
        if sel.difficulty_initial > sel.difficulty_max:
            errors.append(f"config.selection.difficulty_initial={sel.difficulty_initial}: must be <= "
                          f"config.selection.difficulty_max={sel.difficulty_max}")
    if method == "std_filter":
        errors += _std_filter_errors(sel.std_filter_ratio, rl.num_prompts, rl.num_generations)
    if method == "prof":
        errors += _prof_errors(config)
    if method == "exit":
        errors += [f"config.{field}={value!r}: ExIt resumes its own partial histories in plain groups; not with "
                   "method 'exit'" for field, value in (("selection.hints", sel.hints),
                                                        ("rl.off_policy_traces", rl.off_policy_traces),
                                                        ("tree.enabled", config.tree.enabled)) if value]
        errors += _exit_separator_errors(config)
    return errors


def _exit_separator_errors(config) -> list[str]:
    """ExIt cuts partial histories after a step's separator: with a task whose solutions never hold it, no instance
    would ever be made and the method would silently be GRPO. Checked on the task's first reference solutions."""
    sep, name = config.selection.exit_separator, config.task.name
    try:
        examples = tasks.build(config.task, config.seed).source.train_examples(0, 8)
    except (OSError, TypeError, ValueError):
        return []  # the task's own errors are reported with its section
    if any(sep in e.solution for e in examples):
        return []
    return [f"config.selection.exit_separator={sep!r}: task {name!r}'s solutions have no such step separator (e.g. "
            f"{examples[0].solution!r}), so ExIt could never cut a partial history; set the text that ends a step"]


def _prof_errors(config) -> list[str]:
    """PROF keeps num_generations of prof_rollouts sampled rollouts per prompt by the process judge's scores."""
    sel, rl, errors = config.selection, config.rl, []
    if sel.prof_rollouts <= rl.num_generations:
        errors.append(f"config.selection.prof_rollouts={sel.prof_rollouts}: PROF keeps config.rl.num_generations="
                      f"{rl.num_generations} of them, so it must be larger")
    if config.task.flaw_judge == "none":
        errors.append("config.selection.method='prof': filters by a process judge's scores; set config.task.flaw_judge")
    for field, value in (("selection.hints", sel.hints), ("rl.off_policy_traces", rl.off_policy_traces),
                         ("tree.enabled", config.tree.enabled)):
        if value:
            errors.append(f"config.{field}={value!r}: PROF filters sampled groups of equal size; not with method 'prof'")
    return errors


def _std_filter_errors(ratio: float, num_prompts: int, num_generations: int) -> list[str]:
    """StarPO-S: the groups rolled out, num_prompts / ratio, must be whole; a group's std needs two rows."""
    errors = []
    rolled = num_prompts / ratio
    if abs(rolled - round(rolled)) > 1e-6:
        errors.append(f"config.selection.std_filter_ratio={ratio}: config.rl.num_prompts={num_prompts} / ratio = "
                      f"{rolled:g} groups to roll out; choose a ratio that makes it whole (e.g. 0.25, 0.5)")
    if num_generations < 2:
        errors.append(f"config.selection.method='std_filter': config.rl.num_generations={num_generations}: a group's "
                      "reward std needs at least 2 rollouts")
    return errors


def _replay_errors(config) -> list[str]:
    """Rollout replay (selection.replay_capacity > 0): a per-prompt pool, importance weights, combined rewards."""
    errors = []
    sel, rl = config.selection, config.rl
    if sel.method not in ("dots", "bots", "insight"):
        errors.append(
            f"config.selection.replay_capacity={sel.replay_capacity}: rollout replay needs method 'dots', "
            f"'bots' or 'insight' (per-prompt pool), not {sel.method!r}; set it to 0"
        )
    if rl.tis_cap <= 0:
        errors.append(
            "config.rl.tis_cap=0: replayed rollouts are off-policy and need the importance weights against "
            "their behaviour log-probs (DOTS's clip = PPO clip x pi_old/mu_b); set it > 0 (1e9: untruncated)"
        )
    if uses_reward_components(config):
        errors.append(
            f"config.selection.replay_capacity={sel.replay_capacity}: the replay buffer keeps combined rewards, "
            f"not the reward components rl.advantage={rl.advantage!r} normalises; set it to 0"
        )
    if sel.replay_capacity < rl.num_prompts:
        errors.append(
            f"config.selection.replay_capacity={sel.replay_capacity}: must be >= config.rl.num_prompts="
            f"{rl.num_prompts} (or 0 for no replay)"
        )
    return errors


# Selection methods whose groups are the G rows of one generation call (`prompt_selection.Selector.generate_groups`);
# the others keep per-prompt statistics or replay rows, which would count the traces as the policy's own.
_TRACE_SELECTION_METHODS = ("uniform", "dynamic_sampling", "accuracy_band")


def _off_policy_errors(config) -> list[str]:
    """`rl.off_policy_traces` (k reference-solution rows per group) against the group, the loss and the rollouts."""
    rl, k = config.rl, config.rl.off_policy_traces
    if not k:
        return []
    field = f"config.rl.off_policy_traces={k}"
    errors = []
    if k >= rl.num_generations:
        errors.append(f"{field}: must be < config.rl.num_generations={rl.num_generations} (a group needs sampled rows)")
    errors += _off_policy_loss_errors(rl, field, "the traces")
    if agent_config.is_agent_config(config):
        errors.append(f"{field}: traces are mixed into single-turn groups only, not agent runs")
    if config.selection.method not in _TRACE_SELECTION_METHODS or config.selection.hints:
        errors.append(f"{field}: needs config.selection.method in {_TRACE_SELECTION_METHODS} and "
                      "config.selection.hints=False (pool statistics, replay and hinted groups would count the traces "
                      "as the policy's rollouts)")
    if rl.tis_cap > 0:
        errors.append(f"{field}: config.rl.tis_cap={rl.tis_cap} divides by sampler log-probs, which traces do not have")
    t = config.teacher
    if config.task.name == "local" and not config.task.local["solution_field"] and not (
            t.checkpoint or t.hf_checkpoint or t.traces_path):
        errors.append(f"{field}: config.task.local.solution_field='' gives no reference solutions to mix in (or "
                      "set config.teacher)")
    return errors


def tree_shape(config) -> TreeShape:
    """The sampler's tree shape (`sampling.tree.TreeShape`) of config.tree."""
    t = config.tree
    return TreeShape(t.initial_paths, t.branch_points, t.branches, t.iterations, t.criterion, t.critical_top_k)


def _tree_errors(config) -> list[str]:
    """Tree rollouts (config.tree) against the group, the rollout source and the advantage estimator (DeepSearch's
    search trees, config.deepsearch, also give `tree_nodes`)."""
    tree, rl = config.tree, config.rl
    if not tree.enabled:
        if "tree_nodes" in registry.advantage_inputs(rl.advantage) and not config.deepsearch.enabled:
            return [f"config.rl.advantage={rl.advantage!r}: needs tree rollouts (config.tree.enabled=True)"]
        return []
    field = (f"config.tree (initial_paths={tree.initial_paths}, branch_points={tree.branch_points}, "
             f"branches={tree.branches}, iterations={tree.iterations})")
    if tree.criterion == "critical" and tree.critical_top_k < tree.branch_points:
        return [f"config.tree.critical_top_k={tree.critical_top_k}: the {tree.branch_points} critical tokens per "
                f"tree (config.tree.branch_points) are drawn without replacement from it; set it >= "
                f"{tree.branch_points}"]
    errors = []
    rows = tree_shape(config).rows_per_prompt
    if rl.num_generations != rows:
        errors.append(f"config.rl.num_generations={rl.num_generations}: with {field} a group is "
                      f"M*(1 + L*N*T) = {rows} paths; set it to {rows}")
    if agent_config.is_agent_config(config):
        errors.append("config.tree.enabled=True: tree rollouts are single-turn; agent runs branch with "
                      "config.agent.arpo")
    if config.selection.method != "uniform" or config.selection.hints:
        errors.append(f"config.tree.enabled=True: needs config.selection.method='uniform' and hints=False (got "
                      f"{config.selection.method!r}): a group must be one tree, sampled in one call")
    if rl.off_policy_traces:
        errors.append(f"config.tree.enabled=True: config.rl.off_policy_traces={rl.off_policy_traces} would add rows "
                      "outside the tree; set it to 0")
    return errors


def search_shape(config) -> SearchShape:
    """The search's shape (`sampling.mcts.SearchShape`) of config.deepsearch."""
    d = config.deepsearch
    return SearchShape(d.candidates, d.expansions, d.step_tokens, d.gamma_min, d.quality, d.uncertainty, d.depth)


def _deepsearch_errors(config) -> list[str]:
    """DeepSearch's MCTS rollouts (config.deepsearch) against the group, the estimator and the other samplers."""
    ds, rl = config.deepsearch, config.rl
    reads_q = "node_q" in registry.advantage_inputs(rl.advantage)
    if not ds.enabled:
        errors = [f"config.rl.advantage={rl.advantage!r}: needs DeepSearch's tree (config.deepsearch.enabled=True)"] \
            if reads_q else []
        if ds.replay_path:
            errors.append(f"config.deepsearch.replay_path={ds.replay_path!r}: the replay buffer stands in for "
                          "DeepSearch's searches; set config.deepsearch.enabled=True")
        return errors
    errors = []
    rows = ds.expansions * ds.candidates
    if rl.num_generations != rows:
        errors.append(f"config.rl.num_generations={rl.num_generations}: with config.deepsearch (expansions="
                      f"{ds.expansions}, candidates={ds.candidates}) a group is the tree's {rows} nodes; set it to {rows}")
    if not reads_q:
        errors.append(f"config.rl.advantage={rl.advantage!r}: DeepSearch's rows are search-tree nodes valued by the "
                      "search (config.deepsearch.enabled=True); set it to 'deepsearch'")
    if ds.step_tokens > config.sampling.max_new_tokens:
        errors.append(f"config.deepsearch.step_tokens={ds.step_tokens}: a step must fit the budget "
                      f"config.sampling.max_new_tokens={config.sampling.max_new_tokens}")
    conflicts = (("tree.enabled", config.tree.enabled), ("pruning.enabled", config.pruning.enabled),
                 ("selection.hints", config.selection.hints), ("rl.off_policy_traces", rl.off_policy_traces),
                 ("sampling.rows_per_call", config.sampling.rows_per_call),
                 ("sampling.temperature_tau", config.sampling.temperature_tau), ("agent.env", config.agent.env))
    errors += [f"config.{field}={value!r}: DeepSearch (config.deepsearch.enabled) samples each group as one search "
               "tree in one call, single-turn, at the base temperature; turn it off" for field, value in conflicts if value]
    if config.selection.method != "uniform":
        errors.append(f"config.selection.method={config.selection.method!r}: DeepSearch's groups are whole search "
                      "trees sampled in one call; needs 'uniform'")
    return errors


def _rollout_chunk_errors(config) -> list[str]:
    """`sampling.rows_per_call` = R: the sampler takes R / G whole groups per call, the same program every call
    (`train.completions.sample_completions`), so R is a multiple of G that divides the step's rows, and every group
    has G rows, sampled single-turn without a tree."""
    r, rl = config.sampling.rows_per_call, config.rl
    if not r:
        return []
    field, batch = f"config.sampling.rows_per_call={r}", rl.num_prompts * rl.num_generations
    errors = []
    if r % rl.num_generations:
        errors.append(f"{field}: a call takes whole groups; make it a multiple of config.rl.num_generations="
                      f"{rl.num_generations}")
    elif batch % r:
        errors.append(f"{field}: must divide the step's num_prompts*num_generations={batch} rows (every call the "
                      "same compiled program)")
    if config.selection.method == "knapsack":
        errors.append(f"{field}: config.selection.method='knapsack' gives groups of different sizes; chunks need "
                      "groups of rl.num_generations")
    if config.tree.enabled:
        errors.append(f"{field}: tree rollouts (config.tree.enabled) sample each group as one tree in one call; "
                      "set it to 0")
    if agent_config.is_agent_config(config):
        errors.append(f"{field}: agent runs sample with config.agent's multi-turn sampler; set it to 0")
    return errors


def _adaptive_temperature_errors(config) -> list[str]:
    """HAPO's adaptive temperature (`sampling.temperature_tau`) is a single-turn sampler control: the tree and the
    multi-turn samplers draw every token at the base temperature."""
    if not config.sampling.temperature_tau:
        return []
    field = f"config.sampling.temperature_tau={config.sampling.temperature_tau}"
    errors = []
    if config.tree.enabled:
        errors.append(f"{field}: tree rollouts (config.tree.enabled) sample at the base temperature; set it to 0")
    if agent_config.is_agent_config(config):
        errors.append(f"{field}: agent runs sample with config.agent's multi-turn sampler; set it to 0")
    return errors


def token_weights_in_batch(config) -> bool:
    """Whether the LearnerBatch carries token weights: a token selection (80/20's forking tokens, D³S's |A|·H)."""
    return config.rl.token_selection != "all"


def _downsampling_errors(config) -> list[str]:
    """D³S's down-sampling (`rl.rollout_selection`, `rl.token_selection="advantage_entropy"`) selects among a
    single-turn batch's rollouts and tokens by their advantages: not in agent runs (their batches are built by the
    agent loop) and not beside a critic's value targets (the dropped rollouts would still train the critic)."""
    rl = config.rl
    errors = []
    for field, value, on in (("rl.rollout_selection", rl.rollout_selection, rl.rollout_selection != "all"),
                             ("rl.token_selection", rl.token_selection, rl.token_selection == "advantage_entropy")):
        if on and agent_config.is_agent_config(config):
            errors.append(f"config.{field}={value!r}: selects among single-turn rollouts; agent runs do not support it")
        if on and rl.advantage in registry.RETURNS_VALUE_TARGETS:
            errors.append(f"config.{field}={value!r}: with a critic (rl.advantage={rl.advantage!r}) the dropped "
                          "rollouts would still train it; use a critic-free estimator")
    if rl.rollout_selection != "all" and rl.rollout_selection_scope == "group" and rl.num_generations < 3:
        errors.append(f"config.rl.rollout_selection_scope='group': groups of rl.num_generations={rl.num_generations} "
                      "keep at least 2 rollouts each, so nothing is dropped; use >= 3 or scope 'batch'")
    return errors


def _relift_errors(config) -> list[str]:
    """ReLIFT buffers single-turn questions with their reference solutions: not in agent runs; a batch must fit the
    buffer."""
    r = config.relift
    if not r.batch_size:
        return []
    errors = []
    if r.batch_size > r.capacity:
        errors.append(f"config.relift.batch_size={r.batch_size}: an SFT step takes that many buffered questions; "
                      f"make it <= config.relift.capacity={r.capacity}")
    if agent_config.is_agent_config(config):
        errors.append(f"config.relift.batch_size={r.batch_size}: buffers single-turn questions; agent runs do not "
                      "support it")
    if config.selection.replay_capacity:
        errors.append(f"config.relift.batch_size={r.batch_size}: replayed rows carry no reference solution; set "
                      f"config.selection.replay_capacity={config.selection.replay_capacity} to 0")
    return errors


def _model_source(section, name: str, role: str | None = None) -> tuple[str, str, list[str]]:
    """(source, the field that names it, errors) of a model section `config.<name>` loaded from its `checkpoint`
    (an rl4llm workdir) or its `hf_checkpoint`: the one set, and an error when both are."""
    source = section.checkpoint or section.hf_checkpoint
    field = f"config.{name}.{'checkpoint' if section.checkpoint else 'hf_checkpoint'}={source!r}"
    errors = []
    if section.checkpoint and section.hf_checkpoint:
        errors.append(f"config.{name}.checkpoint={section.checkpoint!r} and hf_checkpoint={section.hf_checkpoint!r}: "
                      f"the {role or name} comes from one of them; unset the other")
    return source, field, errors


def _teacher_errors(config) -> list[str]:
    """A teacher (config.teacher) samples the traces of rl.off_policy_traces, from one source, or a file holds them."""
    model, field, errors = _model_source(config.teacher, "teacher")
    path = config.teacher.traces_path
    if path and model:
        errors.append(f"config.teacher.traces_path={path!r} and {field}: the traces come from the file or from the "
                      "teacher model; unset one")
    if not model:
        field = f"config.teacher.traces_path={path!r}"
    if not (model or path):
        return []
    if not config.rl.off_policy_traces:
        errors.append(f"{field}: it gives the off-policy traces; set config.rl.off_policy_traces >= 1 "
                      "(and an off-policy loss, e.g. rl.loss='luffy')")
    return errors


MULTI_TURN_PAIR_LOSSES = ("dmpo", "sdpo")  # pair losses on agent episodes (their turns); the others: single-turn
REFERENCE_PAIR_LOSSES = ("dpo", "dmpo", "sdpo")  # pair losses on log-ratios to the reference policy


def uses_pairwise_objective(config) -> bool:
    """Whether a pairwise preference loss (`config.preference.loss`: online DPO, CPL, P3O, DMPO, SDPO) replaces
    `rl.loss`."""
    return config.preference.loss != "none"


def pair_loss_reads_reference(config) -> bool:
    """Whether the pair loss reads the reference policy whether or not KL is on: DPO's, DMPO's and SDPO's
    log-ratios do (`rl.ref_reset_every` then resets their reference); CPL is reference-free and P3O's ratios are
    to π_old."""
    return config.preference.loss in REFERENCE_PAIR_LOSSES


def _preference_errors(config) -> list[str]:
    """A pairwise objective learns from each group's best-vs-worst pair of sampled rollouts (single-turn
    completions for DPO / CPL / P3O, agent episodes for DMPO / SDPO), in one update over the whole batch
    (`train.preference_step`): what cannot combine with it, and its kernel's settings (the selected loss traced on
    a pair: IPO has no label smoothing, robust DPO needs epsilon < 0.5, P3O's clip ratio < 1; DMPO and SDPO are the
    sigmoid loss)."""
    p, rl = config.preference, config.rl
    if not uses_pairwise_objective(config):
        return []
    field = f"config.preference.loss={p.loss!r}"
    multi_turn = p.loss in MULTI_TURN_PAIR_LOSSES
    agent = agent_config.is_agent_config(config)
    conflicts = (  # (field, its value, whether it conflicts, why)
        ("rl.num_minibatches", rl.num_minibatches, rl.num_minibatches > 1, "pairs are formed over the whole "
         "batch's groups, which minibatches would split; set it to 1 (rl.ppo_epochs repeats the update)"),
        ("rl.off_policy_traces", rl.off_policy_traces, rl.off_policy_traces > 0,
         "pairs are of the policy's own samples; set it to 0"),
        ("rl.tis_cap", rl.tis_cap, rl.tis_cap > 0, "per-token importance weights do not apply to a sequence-level "
         "pair loss; set it to 0 (asynchronous rollouts and replay need them: run synchronous, without replay)"),
        ("rl.token_selection", rl.token_selection, rl.token_selection != "all",
         "a pair's sequence log-probs sum all its tokens; use 'all'"),
        ("rl.kl_in_reward", rl.kl_in_reward, rl.kl_in_reward, "shapes the advantages' reward, which the pairs are "
         "not chosen by; put the KL in the loss (rl.kl_coef) or rely on preference.beta"),
        ("rl.advantage", rl.advantage, rl.advantage in registry.RETURNS_VALUE_TARGETS or rl.advantage == "prime",
         "trains a critic / PRM whose output the pair loss never reads; use 'grpo'"),
        ("agent.env", config.agent.env, agent and not multi_turn, "pairs come from single-turn groups only; "
         "agent runs take preference.loss='dmpo' or 'sdpo'"),
        ("agent.env", config.agent.env, multi_turn and not agent, "weighs the turns of agent episodes; set an env "
         "(single-turn runs take 'dpo', 'cpl' or 'p3o')"),
        ("preference.kind", p.kind, multi_turn and p.kind != "sigmoid", "is the sigmoid (DPO) loss; use 'sigmoid'"),
        ("preference.label_smoothing", p.label_smoothing, multi_turn and p.label_smoothing > 0,
         "has no label smoothing; set it to 0"),
    )
    errors = [f"config.{path}={value!r}: {field} {why}" for path, value, bad, why in conflicts if bad]
    kernels = {  # the selected pair loss, traced on shapes: nothing compiles
        "dpo": lambda x: preference.dpo_loss(x, x, x, x, beta=p.beta, kind=p.kind, label_smoothing=p.label_smoothing),
        "cpl": lambda x: (preference.discounted_sequence_logprobs(x[None], x[None], gamma=p.discount),
                          preference.cpl_loss(x, x, alpha=p.alpha, conservative_bias=p.conservative_bias)),
        "p3o": lambda x: preference.p3o_loss(x, x, x, x, x, x, clip_ratio=p.clip_ratio, clip_mode=p.clip_mode),
        "dmpo": lambda x: preference.dmpo_loss(x[None], x[None], x[None], x[None], x[None].astype(jnp.int32),
                                               x[None].astype(jnp.int32), beta=p.beta, gamma=p.turn_discount),
        "sdpo": lambda x: preference.sdpo_segments(x[None].astype(jnp.int32), x[None].astype(jnp.int32),
                                                   x.astype(jnp.int32), segment_turns=p.segment_turns),
    }
    try:
        jax.eval_shape(kernels[p.loss], jnp.zeros((1,)))
    except ValueError as e:
        errors.append(f"config.preference.{e}")
    return errors


_PLAIN_ADVANTAGE_INPUTS = frozenset({"scores", "group_ids", "mask", "num_groups"})


def _reward_weighting_errors(config) -> list[str]:
    """Dynamic weighting and constrained RLHF (`config.reward_weighting`) re-weight the single-turn reward pipeline's
    components [N, K] each step and run the estimator on each component alone (`train.companions.reward_weighting`):
    they need extra rewards (constrained: a threshold on each constrained one), an estimator of the scores alone,
    and nothing that changes only the combined reward or carries rows without components."""
    w, rl, task = config.reward_weighting, config.rl, config.task
    if w.method == "none":
        return [f"config.reward_weighting.thresholds={w.thresholds!r}: set but config.reward_weighting.method='none'; "
                "use method='constrained'"] if w.thresholds else []
    field = f"config.reward_weighting.method={w.method!r}"
    try:
        extras = combine_lib.parse_weights(task.extra_rewards)
    except ValueError:
        return []  # reported by _task_errors
    errors = []
    if not extras:
        errors.append(f"config.task.extra_rewards={task.extra_rewards!r}: {field} weighs the main reward against extra "
                      "reward components, and none is configured; e.g. 'format_arithmetic:1'")
    try:
        thresholds = combine_lib.parse_weights(w.thresholds)
    except ValueError as e:
        thresholds, errors = {}, errors + [f"config.reward_weighting.thresholds={w.thresholds!r}: {e}"]
    if w.method == "constrained" and not thresholds:
        errors.append(f"config.reward_weighting.thresholds={w.thresholds!r}: {field} needs a threshold on at least one "
                      "extra reward, e.g. 'format_arithmetic:0.9'")
    if w.method == "dynamic" and any(weight <= 0 for weight in extras.values()):
        errors.append(f"config.task.extra_rewards={task.extra_rewards!r}: {field} starts from the weights (1, w_1, ...) "
                      "normalised, which must be > 0 (mirror descent stays on the simplex's interior)")
    if w.method == "dynamic" and thresholds:
        errors.append(f"config.reward_weighting.thresholds={w.thresholds!r}: thresholds are for method='constrained'")
    for name in set(thresholds) - set(extras) if w.method == "constrained" else ():
        errors.append(f"config.reward_weighting.thresholds: a constraint on {name!r}, a component the task does not "
                      f"produce (config.task.extra_rewards={task.extra_rewards!r}); constrain one of "
                      f"{sorted(extras) or 'none'}")
    extra_inputs = sorted(registry.advantage_inputs(rl.advantage) - _PLAIN_ADVANTAGE_INPUTS) \
        if rl.advantage in registry.ADVANTAGES else []
    conflicts = (  # (field, its value, whether it conflicts, why)
        ("rl.advantage", rl.advantage, bool(extra_inputs), f"reads {extra_inputs} besides the scores; the "
         "components' advantages need an estimator of the scores alone (grpo, dr_grpo, rloo, ...)"),
        ("rl.loss", rl.loss, rl.loss in registry.POLICY_LOSSES and "target_advantages" in
         registry.policy_loss_inputs(rl.loss), "takes targets from the combined reward, not the re-weighted one"),
        ("task.length_shaping", task.length_shaping, task.length_shaping != "none",
         "shapes the combined reward only, which the re-weighted components never carry; set it to 'none'"),
        ("rl.kl_in_reward", rl.kl_in_reward, rl.kl_in_reward, "enters the combined reward only; use rl.kl_coef"),
        ("reward_model.checkpoint", config.reward_model.checkpoint, bool(config.reward_model.checkpoint),
         "an RM score is not one of the pipeline's components; set it to ''"),
        *((f"generative_verifier.{f}", getattr(config.generative_verifier, f), bool(getattr(
            config.generative_verifier, f)), "a verifier's score is not one of the pipeline's components; set it to "
           "''") for f in ("checkpoint", "hf_checkpoint")),
        ("preference.loss", config.preference.loss, config.preference.loss != "none",
         "a pair loss reads no advantages; set it to 'none'"),
        ("rl.async_rollouts", rl.async_rollouts, rl.async_rollouts, "the weights of a step are read when its batch "
         "is collected, which runs ahead in the background; run synchronously"),
        ("selection.replay_capacity", config.selection.replay_capacity, config.selection.replay_capacity > 0,
         "replayed groups keep no reward components; set it to 0"),
        ("agent.env", config.agent.env, agent_config.is_agent_config(config), "the components come from the "
         "single-turn reward pipeline"),
    )
    return errors + [f"config.{path}={value!r}: {field} {why}" for path, value, bad, why in conflicts if bad]


def _critic_errors(config) -> list[str]:
    """PPO's value model (config.critic.*), trained when rl.advantage needs values (rl.advantage="gae"), and
    PRIME's implicit PRM (rl.advantage="prime")."""
    errors = []
    c = config.critic
    uses_critic = config.rl.advantage in registry.RETURNS_VALUE_TARGETS
    if not uses_critic and (c.warmup_steps or c.checkpoint):
        errors.append(
            f"config.critic: warmup_steps / checkpoint are set but config.rl.advantage={config.rl.advantage!r} "
            f"trains no critic (one of: {', '.join(sorted(registry.RETURNS_VALUE_TARGETS))})"
        )
    return errors


def _normalises_components(rl) -> bool:
    """Whether `rl.advantage` normalises the reward components itself (and never reads the combined reward)."""
    return rl.advantage in registry.ADVANTAGES and "reward_components" in registry.advantage_inputs(rl.advantage)


def _reward_model_errors(config) -> list[str]:
    """An RM scoring rollouts (config.reward_model.checkpoint) enters the combined reward of a single-turn run."""
    rl, checkpoint = config.rl, config.reward_model.checkpoint
    errors = _co_train_errors(config) if config.reward_model.co_train else []
    if not checkpoint:
        return errors
    if agent_config.is_agent_config(config):
        errors.append(f"config.reward_model.checkpoint={checkpoint!r}: scores single-turn rollouts only; agent runs "
                      f"(config.agent.env={config.agent.env!r}) are scored by their env")
    if _normalises_components(rl):
        errors.append(f"config.reward_model.checkpoint={checkpoint!r}: the RM's score enters the combined reward "
                      f"only, which rl.advantage={rl.advantage!r} does not use (it normalises the components)")
    task = config.task
    if config.reward_model.mode == "replace" and (task.extra_rewards or task.length_shaping != "none"):
        errors.append("config.reward_model.mode='replace': the reward is the RM's score alone, so "
                      f"config.task.extra_rewards={task.extra_rewards!r} / length_shaping={task.length_shaping!r} "
                      "would be dropped; use mode='add' or unset them")
    return errors


def _flaw_judge_errors(config) -> list[str]:
    """A process judge reads its task's prompts and single-turn completions; FAPO's penalty needs one and enters the
    combined reward."""
    task, errors = config.task, []
    if task.flaw_penalty and task.flaw_judge == "none":
        errors.append(f"config.task.flaw_penalty={task.flaw_penalty}: penalises the flawed positives a process judge "
                      f"finds; set config.task.flaw_judge (one of {', '.join(process_lib.JUDGES)})")
    errors += _step_reward_errors(config)
    if task.flaw_judge == "none":
        return errors
    judged = process_lib.JUDGE_TASKS.get(task.flaw_judge)
    if judged and task.name != judged:
        errors.append(f"config.task.flaw_judge={task.flaw_judge!r} reads the prompts of task {judged!r}, not "
                      f"config.task.name={task.name!r}")
    if agent_config.is_agent_config(config):
        errors.append(f"config.task.flaw_judge={task.flaw_judge!r}: judges single-turn completions only; agent runs "
                      f"(config.agent.env={config.agent.env!r}) are scored by their env")
    rl = config.rl
    if task.flaw_penalty and _normalises_components(rl):
        errors.append(f"config.task.flaw_penalty={task.flaw_penalty}: FAPO's penalty enters the combined reward only, "
                      f"which rl.advantage={rl.advantage!r} does not use (it normalises the components)")
    return errors


def _pruning_errors(config) -> list[str]:
    """ARRoL prunes the sampled rollouts of synchronous single-turn steps, one plain group per prompt, at a checkpoint
    inside the completion budget; every trained row must be a kept rollout (its quality head learns from all)."""
    pr = config.pruning
    if not pr.enabled:
        return []
    errors = []
    if pr.checkpoint_tokens >= config.sampling.max_new_tokens:
        errors.append(f"config.pruning.checkpoint_tokens={pr.checkpoint_tokens}: must be < config.sampling."
                      f"max_new_tokens={config.sampling.max_new_tokens} (the kept rollouts are decoded on from it)")
    conflicts = (  # (field, value, whether it conflicts, why)
        ("agent.env", config.agent.env, agent_config.is_agent_config(config), "prunes single-turn rollouts"),
        ("tree.enabled", config.tree.enabled, config.tree.enabled, "a tree's paths are not pruned"),
        ("rl.off_policy_traces", config.rl.off_policy_traces, config.rl.off_policy_traces > 0,
         "its head learns from sampled rollouts only"),
        ("selection.replay_capacity", config.selection.replay_capacity, config.selection.replay_capacity > 0,
         "replayed groups were not pruned by this step's head"),
        ("rl.async_rollouts", config.rl.async_rollouts, config.rl.async_rollouts,
         "the head that prunes a step is the one the step before trained"),
        ("sampling.temperature_tau", config.sampling.temperature_tau, config.sampling.temperature_tau > 0,
         "HAPO's adaptive temperature is not applied to the pruned decode"),
    )
    errors += [f"config.{path}={value!r}: ARRoL (config.pruning.enabled) {why}; not with pruning"
               for path, value, bad, why in conflicts if bad]
    return errors


def _co_train_errors(config) -> list[str]:
    """The co-trained RM learns from the rule verifier's labels of the step's own rollouts, synchronously."""
    r, errors = config.reward_model, []
    if not r.checkpoint:
        errors.append("config.reward_model.co_train=True trains the RM that scores the rollouts; set "
                      "config.reward_model.checkpoint")
    if config.task.pseudo_labels != "none":
        errors.append(f"config.reward_model.co_train=True learns from the rule verifier's labels, not "
                      f"config.task.pseudo_labels={config.task.pseudo_labels!r}")
    if config.rl.async_rollouts:
        errors.append("config.reward_model.co_train=True scores each step with the RM the step before trained: not "
                      "with config.rl.async_rollouts")
    return errors


def _step_reward_errors(config) -> list[str]:
    """Step rewards come from a process judge (its labels, or a learned PRM's scores of the steps it segments) and go to
    an estimator that takes process rewards other than PRIME's (which trains its own implicit PRM for them);
    `process_grpo` has no other source."""
    task, rl, errors = config.task, config.rl, []
    takes = rl.advantage in registry.ADVANTAGES and "process_rewards" in registry.advantage_inputs(rl.advantage)
    if task.step_reward != "none":
        if task.flaw_judge == "none":
            errors.append(f"config.task.step_reward={task.step_reward!r}: rewards the steps a process judge labels; set "
                          f"config.task.flaw_judge (one of {', '.join(process_lib.JUDGES)})")
        if not takes or rl.advantage == "prime":
            errors.append(f"config.task.step_reward={task.step_reward!r}: rl.advantage={rl.advantage!r} does not train "
                          f"on a judge's step rewards; use rl.advantage='process_grpo'")
    elif rl.advantage == "process_grpo":
        errors.append("config.rl.advantage='process_grpo' trains on a process judge's step rewards; set "
                      f"config.task.step_reward (one of {', '.join(process_rl.STEP_REWARDS)}) and config.task.flaw_judge")
    if task.step_reward_model and task.step_reward == "none":
        errors.append(f"config.task.step_reward_model={task.step_reward_model!r}: the PRM scores the steps that "
                      "config.task.step_reward turns into rewards; set it "
                      f"(one of {', '.join(process_rl.STEP_REWARDS)})")
    return errors


def _generative_verifier_errors(config) -> list[str]:
    """A generative verifier (config.generative_verifier) scores single-turn rollouts into the combined reward, from
    one source, with a readable template."""
    v = config.generative_verifier
    source, field, errors = _model_source(v, "generative_verifier", role="verifier")
    if not source:
        return []
    try:
        templates.template_pieces(v.template)
    except ValueError as e:
        errors.append(f"config.generative_verifier.template={v.template!r}: {e}")
    if v.kind == "p_yes" and v.yes_token == v.no_token:
        errors.append(f"config.generative_verifier.no_token={v.no_token!r}: the same text as yes_token")
    errors += _critique_errors(v)
    if agent_config.is_agent_config(config):
        errors.append(f"{field}: scores single-turn rollouts only; agent runs (config.agent.env="
                      f"{config.agent.env!r}) are scored by their env")
    rl = config.rl
    if _normalises_components(rl):
        errors.append(f"{field}: the verifier's score enters the combined reward only, which rl.advantage="
                      f"{rl.advantage!r} does not use (it normalises the components)")
    if config.reward_model.checkpoint:
        errors.append(f"{field}: config.reward_model.checkpoint={config.reward_model.checkpoint!r} also scores the "
                      "rollouts; use one model reward")
    task = config.task
    if v.mode == "replace" and (task.extra_rewards or task.length_shaping != "none"):
        errors.append("config.generative_verifier.mode='replace': the reward is the verifier's score alone, so "
                      f"config.task.extra_rewards={task.extra_rewards!r} / length_shaping={task.length_shaping!r} "
                      "would be dropped; use mode='add' or unset them")
    return errors


def _critique_errors(v) -> list[str]:
    """The sampling fields of a critique judge (config.generative_verifier.kind='critique') and the P(Yes) fields of
    the other kind do not cross."""
    if v.kind == "critique":
        errors = []
        if v.hard:
            errors.append("config.generative_verifier.hard=True: thresholds P(Yes) (kind='p_yes'); a critique judge's "
                          "reward is its vote of parsed scores")
        if v.samples > 1 and v.temperature == 0:
            errors.append(f"config.generative_verifier.samples={v.samples}: at temperature 0 the k critiques are the "
                          "same greedy one; set samples=1 or config.generative_verifier.temperature > 0")
        return errors
    return [f"config.generative_verifier.{f}={getattr(v, f)!r}: samples critiques (kind='critique'); kind='p_yes' "
            "reads one forward" for f, default in (("samples", 1), ("temperature", 0.0)) if getattr(v, f) != default]


def _urpo_errors(config) -> list[str]:
    """URPO's referee judges the arithmetic task's worked solutions (its corruptions are `wrong_solution`'s) in the
    char tokenizer's alphabet; its referee groups replace whole groups of a plain uniform step (a whole number of them,
    at least one player group left), scored by the rule verifier alone (`train.urpo`)."""
    u = config.urpo
    if not (u.referee_share or u.eval_pairs or u.self_reward):
        return []
    errors = []
    if config.task.name != "arithmetic" or agent_config.is_agent_config(config):
        errors.append(f"config.urpo: the referee judges the arithmetic task's worked solutions; not with config.task."
                      f"name={config.task.name!r}, config.agent.env={config.agent.env!r}")
    if u.yes_token.startswith(u.no_token) or u.no_token.startswith(u.yes_token):
        errors.append(f"config.urpo.yes_token={u.yes_token!r} / no_token={u.no_token!r}: neither may start the other")
    literal = "".join(text for text, _ in referee_lib.template_pieces(u.template)) + u.yes_token + u.no_token
    unknown = sorted(set(literal) - set(arithmetic.ALPHABET))
    if unknown and not config.model.hf_checkpoint:
        errors.append(f"config.urpo.template={u.template!r} / yes_token / no_token: the task's char tokenizer has no "
                      f"token for {unknown} (alphabet {arithmetic.ALPHABET!r})")
    if u.self_reward and not u.referee_share:
        errors.append("config.urpo.self_reward=True: the player is rewarded by its own referee, trained by the referee "
                      "groups; set config.urpo.referee_share > 0")
    if not u.referee_share:
        return errors
    b = config.rl.num_prompts
    groups = u.referee_share * b
    if abs(groups - round(groups)) > 1e-9 or not 1 <= round(groups) <= b - 1:
        errors.append(f"config.urpo.referee_share={u.referee_share}: must make a whole number of config.rl.num_prompts="
                      f"{b} groups, between 1 and {b - 1} (a player group is left)")
    conflicts = (  # (field, value, whether it conflicts)
        ("selection.method", config.selection.method, config.selection.method != "uniform"),
        ("selection.hints", config.selection.hints, config.selection.hints),
        ("rl.off_policy_traces", config.rl.off_policy_traces, config.rl.off_policy_traces > 0),
        ("tree.enabled", config.tree.enabled, config.tree.enabled),
        ("deepsearch.enabled", config.deepsearch.enabled, config.deepsearch.enabled),
        ("pruning.enabled", config.pruning.enabled, config.pruning.enabled),
        ("task.flaw_judge", config.task.flaw_judge, config.task.flaw_judge != "none"),
        ("task.pseudo_labels", config.task.pseudo_labels, config.task.pseudo_labels != "none"),
        ("reward_model.checkpoint", config.reward_model.checkpoint, bool(config.reward_model.checkpoint)),
        ("generative_verifier.checkpoint", config.generative_verifier.checkpoint,
         bool(config.generative_verifier.checkpoint or config.generative_verifier.hf_checkpoint)),
        ("reward_weighting.method", config.reward_weighting.method, config.reward_weighting.method != "none"),
        ("relift.batch_size", config.relift.batch_size, config.relift.batch_size > 0),
        ("sampling.temperature_tau", config.sampling.temperature_tau, config.sampling.temperature_tau > 0),
    )
    errors += [f"config.{path}={value!r}: URPO (config.urpo.referee_share) replaces whole groups of a plain uniform "
               f"step rewarded by the rule verifier; not with this" for path, value, bad in conflicts if bad]
    return errors


def _model_errors(config) -> list[str]:
    """LoRA against the reference reset; the HF checkpoint is readable."""
    errors = []
    m = config.model
    if m.lora.rank > 0 and config.rl.ref_reset_every:
        errors.append(
            f"config.rl.ref_reset_every={config.rl.ref_reset_every}: with LoRA (config.model.lora.rank="
            f"{m.lora.rank}) the KL reference is the frozen base (adapters off) and cannot be reset; set it to 0"
        )
    if m.hf_checkpoint:
        try:
            from rl4llm.models import hf_checkpoint  # the `hf` extra

            hf_checkpoint.config_from_hf(hf_checkpoint.read_hf_config(m.hf_checkpoint))
        except ImportError as e:
            errors.append(f"config.model.hf_checkpoint: needs the hf extra (pip install -e '.[hf]'): {e}")
        except (OSError, ValueError, KeyError) as e:
            errors.append(f"config.model.hf_checkpoint={m.hf_checkpoint!r}: {e}")
    return errors


def _mesh_errors(config) -> list[str]:
    """config.mesh fits the devices (`parallel.mesh.meshes_from_config`), and the learner's batches (RL minibatch,
    SFT batch) split evenly over its batch axes (data x fsdp)."""
    try:
        meshes = mesh_lib.meshes_from_config(config.mesh)
    except (ValueError, TypeError) as e:
        return [str(e)]
    errors = []
    if meshes.placement == "disaggregated" and jax.process_count() > 1:
        errors.append(
            "config.mesh.sampler='disaggregated': copying weights between disjoint device sets is supported in a "
            "single process only; use 'colocated' (same devices, another layout) on several hosts"
        )
    errors += _judge_mesh_errors(config)
    shards = meshes.learner.shape["data"] * meshes.learner.shape["fsdp"]
    rl = config.rl
    rows = {
        "rl.num_prompts*num_generations/num_minibatches": rl.num_prompts * rl.num_generations // rl.num_minibatches,
        "sft.batch_size": config.sft.batch_size,
    }
    for path, n in rows.items():
        if n % shards:
            errors.append(
                f"config.{path}={n}: the learner splits batch rows over config.mesh.data x fsdp = {shards} devices; "
                f"make it a multiple of {shards}"
            )
    return errors


def _judge_mesh_errors(config) -> list[str]:
    """config.mesh.judges="disaggregated" (`parallel.judges`) needs a judge model to place, one process, and an RM
    that is not the learner's state (co-training keeps its params on the learner mesh)."""
    if config.mesh.judges != "disaggregated":
        return []
    field = "config.mesh.judges='disaggregated'"
    v = config.generative_verifier
    errors = []
    if not (config.reward_model.checkpoint or config.task.step_reward_model or v.checkpoint or v.hf_checkpoint):
        errors.append(f"{field}: the run has no judge model to place (config.reward_model.checkpoint, "
                      "config.task.step_reward_model, config.generative_verifier.checkpoint / hf_checkpoint)")
    if jax.process_count() > 1:
        errors.append(f"{field}: the judges' devices must be this process's (single process only); use 'shared'")
    if config.reward_model.co_train:
        errors.append(f"{field} with config.reward_model.co_train=True: the co-trained RM is the learner's state, on "
                      "the learner's mesh; use 'shared'")
    return errors


def _eval_errors(config) -> list[str]:
    bad_k = [k for k in config.eval.pass_k if not isinstance(k, int) or not 1 <= k <= config.eval.pass_n]
    if bad_k:
        return [f"config.eval.pass_k={tuple(config.eval.pass_k)!r}: every k must be an integer in "
                f"[1, config.eval.pass_n={config.eval.pass_n}]"]
    return []


# Each check across fields, and the sections whose fields it needs within their bounds (its arithmetic divides by
# them); the others guard what they read, so a config's errors are all reported at once.
CHECKS = (
    (_task_errors, ()),
    (_model_errors, ()),
    (_batch_errors, ("rl", "sft")),
    (_method_errors, ()),
    (_reward_component_errors, ()),
    (_reward_range_errors, ()),
    (_control_errors, ()),
    (_off_policy_errors, ("rl",)),
    (_preference_errors, ("rl", "preference")),
    (_critic_errors, ()),
    (_reward_weighting_errors, ()),
    (_tree_errors, ("rl", "tree", "selection", "deepsearch")),
    (_deepsearch_errors, ("rl", "deepsearch", "sampling", "selection")),
    (_rollout_chunk_errors, ("rl", "sampling", "tree", "selection")),
    (_adaptive_temperature_errors, ("sampling",)),
    (_downsampling_errors, ("rl",)),
    (_relift_errors, ("relift", "selection")),
    (_teacher_errors, ()),
    (_reward_model_errors, ()),
    (_pruning_errors, ("sampling", "pruning")),
    (_flaw_judge_errors, ()),
    (_generative_verifier_errors, ()),
    (_urpo_errors, ("rl", "urpo")),
    (_selection_errors, ("rl", "selection")),
    (agent_config.agent_config_errors, ()),
    (_mesh_errors, ("rl", "sft")),
    (_eval_errors, ()),
)


def errors(config, invalid: frozenset = frozenset()) -> list[str]:
    """Every error of the checks across fields of `config` (a `sections.RunConfig`), but those that need a section
    in `invalid` (one with a field out of its bound)."""
    out = []
    for check, needs in CHECKS:
        if not invalid.intersection(needs):
            out += check(config)
    return out
