"""Single-turn rollouts: the RL step's prompts (`config.selection`), G sampled completions each, scored on the host by
the reward pipeline in one call and, with `config.reward_model.checkpoint`, by the outcome reward model in one jitted
call on the device, or with `config.generative_verifier`, by the verifier's P(Yes) in one jitted call (kind "critique":
its k sampled critiques' voted scores, one jitted sampling call), their steps
scored by a learned PRM in one jitted call with `config.task.step_reward_model` (`rollout_and_score`); ReMax's greedy
baseline rollout (`greedy_baseline_scores`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import sampling
from rl4llm.config import validation as config_lib
from rl4llm.rewards import combine as combine_lib
from rl4llm.rewards import process as process_lib
from rl4llm.train import batches
from rl4llm.train import completions as completions_lib
from rl4llm.train import prompt_selection
from rl4llm.train import rows as rows_lib
from rl4llm.train import search_replay
from rl4llm.train import teacher as teacher_lib
from rl4llm.train import urpo
from rl4llm.train.companions import relift
from rl4llm.train.setup import Setup
from rl4llm.verifiers import critique as critique_lib
from rl4llm.verifiers import generative as generative_lib

# The teacher's stream of the generation key (config.teacher): its traces are drawn independently of the rollouts;
# the critique judge's (config.generative_verifier.kind="critique") and the traces file's (teacher.traces_path) likewise.
_TEACHER_STREAM, _VERIFIER_STREAM, _TRACE_FILE_STREAM = 4000, 4001, 4002


def step_prompts(config, setup: Setup, step: int):
    """The RL step's uniform examples (the task's stream, or the curriculum's stage) and their left-padded prompt
    tokens / mask [B, P] (a pure function of step)."""
    examples = setup.selector.stream_examples(step, config.rl.num_prompts)
    prompt_tokens, prompt_mask = batches.encode_prompts(
        setup.tokenizer, [e.prompt for e in examples], config.sampling.prompt_bucket
    )
    return examples, prompt_tokens, prompt_mask


def score(config, setup: Setup, prompt_tokens, prompt_mask, completion_tokens, completion_mask, prompts, answers,
          group_ids: np.ndarray, prefixes=None, reward_model_params=None, key=None):
    """Host rewards of the rows `[prompt | completion]` ([N, P], [N, T] host arrays; the batch scored in one
    pipeline call and, with `config.reward_model.checkpoint`, one RM call: `with_reward_model`).
    `prompts` [N]: each row's prompt text (the process judge reads it, `config.task.flaw_judge`); `prefixes` [N]: text
    scored before each completion (a hint the prompt already holds), or None; `reward_model_params`: the co-trained
    RM's (`companions.rm_cotraining`), None: the checkpoint's; `key`: draws a critique judge's critiques (None: the
    seed's key).

    Returns (rewards [N], main reward [N], reward components [N, K], reward metrics, the process judge's `Rows` fields
    (`process_fields`)).
    """
    texts = batches.decode_completions(setup.tokenizer, completion_tokens, completion_mask)
    if prefixes is not None:
        texts = [prefix + text for prefix, text in zip(prefixes, texts)]
    first_flaws, process = None, {}
    if config.task.flaw_judge != "none":
        labels = [process_lib.JUDGES[config.task.flaw_judge](p, t) for p, t in zip(prompts, texts)]
        first_flaws = process_lib.first_flaws(labels)
        process = process_fields(config, setup, labels, first_flaws, texts, prefixes, completion_tokens,
                                 completion_mask)
    scores, main, components, metrics = setup.rewards.score(
        texts, answers, completion_mask.sum(-1), group_ids, max_length=config.sampling.max_new_tokens,
        first_flaws=first_flaws)
    if setup.step_reward_model is not None or setup.reward_model is not None:  # the models read [prompt | completion]
        tokens, mask = batches.join_sequences(prompt_tokens, prompt_mask, completion_tokens, completion_mask)
    if setup.step_reward_model is not None:
        process["step_scores"] = with_step_reward_model(setup, tokens, mask, process["step_scores"],
                                                        process["step_ends"], metrics)
    if setup.reward_model is not None:
        scores = with_reward_model(config, setup, tokens, mask, scores, main, metrics, reward_model_params)
    if setup.verifier is not None:
        questions = batches.decode_completions(setup.tokenizer, prompt_tokens, prompt_mask)
        scores = with_verifier(config, setup, questions, answers, texts, scores, main, group_ids, metrics, key)
    return scores, main, components, metrics, process


def process_fields(config, setup: Setup, labels, first_flaws, texts, prefixes, completion_tokens, completion_mask
                   ) -> dict:
    """The judge's verdicts as `Rows` fields: `process_scores` [N] (`process.sound_prefix`: PROF) and, with
    `config.task.step_reward`, each segment's label on its last token (`step_scores`, `step_ends` [N, T]:
    `process.step_layout`)."""
    fields = {"process_scores": process_lib.sound_prefix(first_flaws, np.array([len(ls) for ls in labels]))}
    if config.task.step_reward != "none":
        prefix_chars = [0] * len(texts) if prefixes is None else [len(p) for p in prefixes]
        fields["step_scores"], fields["step_ends"] = process_lib.step_layout(
            setup.tokenizer.decode, labels, texts, prefix_chars, completion_tokens, completion_mask)
    return fields


def with_step_reward_model(setup: Setup, tokens, mask, judge_labels: np.ndarray, step_ends: np.ndarray,
                           metrics: dict) -> np.ndarray:
    """The learned PRM's step scores s [N, T] on the step ends (`process_reward_model.Scorer`: one jitted forward of
    the `[prompt | completion]` rows `tokens` [N, P+T], one transfer of [N, T]) in place of the judge's labels
    `judge_labels` [N, T], which measure it. Adds `prm/step_score_mean` (mean s over step ends), `prm/judge_sound_frac`
    (the judge's mean label over them), `prm/step_agreement` (the share with s > ½ ⇔ sound), `prm/score_sum` (mean
    over responses of Σ_k s_k: the raw PRM's return, what farming raises) and `prm/response_min_score` (mean over
    responses of min_k s_k: the PRM's verdict of a whole response, PRM800K's aggregation; 0 without a step)."""
    scores = setup.step_reward_model(tokens, mask, step_ends)
    num_ends = max(int(step_ends.sum()), 1)
    has_step = step_ends.any(-1)
    metrics.update({
        "prm/step_score_mean": float(scores[step_ends].sum() / num_ends),
        "prm/judge_sound_frac": float(judge_labels[step_ends].sum() / num_ends),
        "prm/step_agreement": float(((scores > 0.5) == (judge_labels > 0.5))[step_ends].sum() / num_ends),
        "prm/score_sum": float(scores.sum(-1).mean()),
        "prm/response_min_score": float(np.where(has_step, np.where(step_ends, scores, np.inf).min(-1), 0.0).mean()),
    })
    return scores


def with_verifier(config, setup: Setup, questions, answers, texts, rewards, main, group_ids, metrics: dict,
                  key=None) -> np.ndarray:
    """The pipeline's `rewards` [N] with the generative verifier's P(Yes) of each (question, reference, completion)
    (`verifiers.generative.Verifier`: one jitted forward for the batch, one transfer of [N]), or its hard verdict, or
    with kind "critique" the normalised vote of its k critiques (`verifiers.critique.CritiqueVerifier`, drawn with
    `key`: one jitted sampling call, one transfer), combined by `config.generative_verifier.mode` / `weight`
    (`rewards.combine.with_model_score`). Adds `verifier/group_std` (the mean within-group std of the score: what
    GRPO's advantages are made of), the rule reward's mean, and `verifier/p_yes_mean`, `verifier/p_yes_std`,
    `verifier/yes_no_mass`, `verifier/truncated_frac` (P(Yes)) or `critique.critique_metrics` (critiques)."""
    v = config.generative_verifier
    if v.kind == critique_lib.KIND:
        critiques = setup.verifier(questions, answers, texts, jax.random.key(config.seed) if key is None else key)
        model_scores = critiques.rewards
        metrics.update(critique_lib.critique_metrics(critiques, main))
    else:
        p_yes, yes_no_mass, truncated = setup.verifier(questions, answers, texts)
        model_scores = generative_lib.hard_verdict(p_yes, v.threshold) if v.hard else p_yes
        metrics.update({"verifier/p_yes_mean": float(p_yes.mean()), "verifier/p_yes_std": float(p_yes.std()),
                        "verifier/yes_no_mass": float(yes_no_mass.mean()),
                        "verifier/truncated_frac": float(truncated.mean())})
    _, inverse = np.unique(group_ids, return_inverse=True)
    counts = np.bincount(inverse)
    group_mean = np.bincount(inverse, model_scores) / counts
    group_var = np.bincount(inverse, (model_scores - group_mean[inverse]) ** 2) / counts
    metrics.update({"verifier/group_std": float(np.sqrt(group_var).mean()),
                    f"reward/{config.task.reward}": float(np.mean(main))})
    return combine_lib.with_model_score(rewards, model_scores, weight=v.weight, mode=v.mode)


def with_reward_model(config, setup: Setup, tokens, mask, rewards, main, metrics: dict, params=None) -> np.ndarray:
    """The pipeline's `rewards` [N] with the outcome RM's scores of the `[prompt | completion]` sequences `tokens`
    [N, P+T] (`reward_model.Scorer`: one jitted call for the batch, one transfer of [N] scores), combined by
    `config.reward_model.mode` / `weight` (`rewards.combine.with_model_score`). `main` (correctness) is left as it
    is. Adds `reward_model/score_mean`, `reward_model/score_std` and the rule reward's mean to `metrics`. `params`:
    the RM's (co-trained), None: the checkpoint's."""
    model_scores = setup.reward_model(tokens, mask, params)
    metrics["reward_model/score_mean"] = float(model_scores.mean())
    metrics["reward_model/score_std"] = float(model_scores.std())
    metrics[f"reward/{config.task.reward}"] = float(np.mean(main))
    r = config.reward_model
    return combine_lib.with_model_score(rewards, model_scores, weight=r.weight, mode=r.mode)


def greedy_baseline_scores(config, setup: Setup, params, step: int, key, reward_model_params=None) -> np.ndarray:
    """ReMax baseline (Li et al. 2024): reward of the greedy completion of each prompt, repeated over its group [N].

    One extra greedy rollout of the step's B prompts (verl: `do_sample=False` generation in the trainer).
    """
    examples, prompt_tokens, prompt_mask = step_prompts(config, setup, step)
    rollout = completions_lib.generate(setup, params, prompt_tokens, prompt_mask, key, setup.eval_spec.greedy)
    tokens, mask = jax.device_get((rollout.completion_tokens, rollout.completion_mask))
    scores = score(config, setup, prompt_tokens, prompt_mask, tokens, mask, [e.prompt for e in examples],
                   [e.answer for e in examples], np.arange(len(examples)), reward_model_params=reward_model_params,
                   key=jax.random.fold_in(key, _VERIFIER_STREAM))[0]
    return np.repeat(scores, config.rl.num_generations)


def with_traces(config, setup: Setup, completions: dict, counts: np.ndarray, traces, stopped=None
                ) -> tuple[dict, np.ndarray]:
    """Sampled `completions` (host arrays [sum(counts), ...] by Rows field) with each prompt's off-policy traces
    after its counts[i] sampled rows, and the group sizes. A trace row is the trace text + eos, behaviour log-probs
    0 (π_b := 1, LUFFY's convention: `rl.off_policy.luffy`), `off_policy` True. Reference solutions (`stopped`
    None) all end with eos, and one longer than the response budget raises; a teacher's traces (`train.teacher`)
    are cut at the budget, and one the teacher did not stop (`stopped` [b] bool, flat) gets no eos: it is unfinished."""
    flat = [t for group in traces for t in group]
    tokens, mask = batches.encode_completions(setup.tokenizer, flat, config.sampling.max_new_tokens,
                                              truncate=stopped is not None)
    if stopped is not None:
        length = mask.sum(-1).astype(int)
        cut = np.flatnonzero(~np.asarray(stopped) & (tokens[np.arange(len(flat)), length - 1] ==
                                                      setup.tokenizer.eos_id))
        tokens[cut, length[cut] - 1], mask[cut, length[cut] - 1] = setup.tokenizer.pad_id, 0.0
    finished = ((tokens == setup.tokenizer.eos_id) & (mask > 0)).any(axis=-1)
    trace_rows = dict(completion_tokens=tokens, completion_mask=mask > 0, logprobs=np.zeros(tokens.shape, np.float32),
                      finished=finished, off_policy=np.ones(len(flat), bool))
    num_traces = np.array([len(group) for group in traces])
    group = np.concatenate([np.repeat(np.arange(len(counts)), counts), np.repeat(np.arange(len(traces)), num_traces)])
    order = np.argsort(group, kind="stable")  # each group: its sampled rows, then its traces
    merged = {k: np.concatenate([v, trace_rows[k].astype(v.dtype)])[order] for k, v in completions.items()}
    return merged, counts + num_traces


def search_verifier(config, setup: Setup, prompt_tokens, prompt_mask, prompts, answers, prefixes, counts,
                    reward_model_params=None):
    """DeepSearch's verification of the search's terminal nodes (`sampling.mcts.search`'s `verify`): a row (of the
    search's [sum(counts)], prompt-major) is correct iff its main reward (`score`) is above 1/2."""
    prompt_of = np.repeat(np.arange(len(counts)), counts)

    def correct(rows, completion_tokens, completion_mask):
        p = prompt_of[rows]
        main = score(config, setup, prompt_tokens[p], prompt_mask[p], completion_tokens, completion_mask,
                     np.asarray(prompts)[p].tolist(), np.asarray(answers)[p].tolist(), p,
                     np.asarray(prefixes)[p].tolist() if any(prefixes) else None, reward_model_params)[1]
        return np.asarray(main) > 0.5

    return correct


def search_verifiers(config, setup: Setup, prompt_tokens, prompt_mask, prompts, answers, prefixes, counts,
                     reward_model_params=None):
    """`verifier_for(groups)` -> `search_verifier` of the prompts `groups` alone (the sub-batch searched, or the one
    replayed from DeepSearch's buffer: `search_replay.search_or_replay`)."""
    def verifier_for(groups):
        return search_verifier(config, setup, prompt_tokens[groups], prompt_mask[groups], [prompts[i] for i in groups],
                               [answers[i] for i in groups], [prefixes[i] for i in groups], counts[groups],
                               reward_model_params)
    return verifier_for


def generate_rows(config, setup: Setup, params, prompts, answers, counts, key, prefixes, traces=None, greedy=False,
                  *, entropy_stats=None, solutions=None, reward_model_params=None, quality_head=None):
    """`counts[i]` completions of each prompt `prompts[i]` (in order), then its off-policy `traces[i]` (texts; None:
    none, `with_traces`; with a traces file as many drawn from it, or none and traces[i] more sampled rows:
    `teacher.file_traces`), all scored against `answers[i]` in one call with `prefixes[i]` scored before each
    completion; `greedy`: decoded greedily (the evaluation's sampling config) instead of at the rollout's, which
    reads HAPO's `entropy_stats` with an adaptive temperature (`temperature_metrics`); `solutions[i]`: the
    example's reference solution, carried by its rows (`Rows.solutions`, ReLIFT), or None; `reward_model_params`:
    the co-trained RM's (`score`); `quality_head`: ARRoL's, which prunes the sampled rows (`pruned_completions`,
    config.pruning; greedy rows are never pruned).
    -> (`prompt_selection.Rows` [sum(counts) + traces], reward metrics)."""
    counts = np.asarray(counts)
    prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, prompts, config.sampling.prompt_bucket)
    sampler_metrics, file_metrics = {}, {}
    if traces is not None and setup.file_traces is not None:  # the file's traces; a prompt without: all sampled
        counts, traces, file_metrics = teacher_lib.file_traces(setup.file_traces, prompts, counts,
                                                               [len(t) for t in traces],
                                                               jax.random.fold_in(key, _TRACE_FILE_STREAM))
    sampling_cfg = setup.eval_spec.greedy if greedy else setup.rollout_cfg
    if config.tree.enabled:  # each group is one tree of counts[i] = M(1 + LNT) paths (validation)
        completions, sampler_metrics = completions_lib.tree_completions(config, setup, params, prompt_tokens, prompt_mask, key)
    elif config.deepsearch.enabled and not greedy:  # each group: one search tree of E·n nodes, or replayed
        verifier_for = search_verifiers(config, setup, prompt_tokens, prompt_mask, prompts, answers, prefixes, counts,
                                        reward_model_params)
        completions, sampler_metrics = search_replay.search_or_replay(config, setup, params, prompts, prompt_tokens,
                                                                      prompt_mask, key, verifier_for)
    elif config.pruning.enabled and not greedy:
        completions, sampler_metrics = completions_lib.pruned_completions(config, setup, params, prompt_tokens, prompt_mask, counts,
                                                          key, quality_head)
    else:
        completions = completions_lib.sample_completions(config, setup, params, prompt_tokens, prompt_mask, counts, key,
                                         sampling_cfg, None if greedy else entropy_stats)
    sampler_metrics.update(completions_lib.temperature_metrics(completions.pop("temperatures", None), completions["completion_mask"]))
    completions["off_policy"] = np.zeros(int(counts.sum()), bool)
    sizes = counts
    if traces is not None:
        stopped = None
        if setup.teacher is not None:  # the teacher's samples in place of the reference solutions
            traces, stopped, teacher_metrics = teacher_lib.sample_traces(
                setup.teacher, prompts, [len(t) for t in traces], jax.random.fold_in(key, _TEACHER_STREAM))
            sampler_metrics.update(teacher_metrics)
        completions, sizes = with_traces(config, setup, completions, counts, traces, stopped)
    group_ids = np.repeat(np.arange(len(prompts)), sizes)
    row_tokens, row_mask = prompt_tokens[group_ids], prompt_mask[group_ids]
    scores, main, components, reward_metrics, process = score(
        config, setup, row_tokens, row_mask, completions["completion_tokens"], completions["completion_mask"],
        np.repeat(prompts, sizes).tolist(), np.repeat(answers, sizes).tolist(), group_ids,
        np.repeat(prefixes, sizes).tolist() if any(prefixes) else None, reward_model_params,
        jax.random.fold_in(key, _VERIFIER_STREAM),
    )
    rows = prompt_selection.Rows(
        prompt_tokens=row_tokens, prompt_mask=row_mask, scores=scores, main=main, components=components,
        hint_chars=np.zeros(len(scores), np.int32), hint_tokens=np.zeros(len(scores), np.int32),
        fresh=np.ones(len(scores), bool), **completions,
        solutions=None if solutions is None else np.repeat(np.asarray(solutions, object), sizes),
        **process,
    )
    return rows, {**reward_metrics, **sampler_metrics, **file_metrics}


def check_prompt_groups(rows: prompt_selection.Rows, group_ids: np.ndarray, prompt_group: int) -> None:
    """With a shared-prompt learner (`prompt_group` = G > 1, `config.validation.shared_prompt_group`), the rows
    must be consecutive groups of G with one prompt each; anything else is a bug upstream, and an error here."""
    if prompt_group == 1:
        return
    whole = len(group_ids) % prompt_group == 0 and len(rows.prompt_tokens) == len(group_ids)
    groups = np.asarray(group_ids).reshape(-1, prompt_group) if whole else None
    same = whole and (groups == groups[:, :1]).all() and all(  # host arrays, before the rollout goes to the device
        (x.reshape(groups.shape[0], prompt_group, -1) == x[::prompt_group, None]).all()
        for x in (rows.prompt_tokens, rows.prompt_mask))
    if not same:
        raise ValueError(f"the learner forwards each group's prompt once (rl.shared_prompt_forward), but this batch "
                         f"is not consecutive groups of {prompt_group} rows sharing a prompt; set "
                         f"--config.rl.shared_prompt_forward=False and report the config.")


def rollout_and_score(config, setup: Setup, params, step: int, key, selection_state=None, entropy_stats=None,
                      reward_model_params=None, quality_head=None):
    """The step's rollouts under `config.selection` (`prompt_selection.Selector.collect`: uniform prompts with G
    completions each by default), scored on the host; `entropy_stats`: HAPO's adaptive temperature's, else None;
    `reward_model_params`: the co-trained RM's, else None; `quality_head`: ARRoL's (config.pruning), else None.

    Returns (rollout, scores [N], reward components [N, K], group ids [N], off-policy tokens [N, T] bool
    (`rows.off_policy_tokens`), the rows' layouts by `inputs.StepData` field (tree node ids [N, T+1] of tree
    rollouts, config.tree; the judge's step scores and ends [N, T], config.task.step_reward; None when off; the rows
    sampled after a hint [N] bool), host metrics, new selection state, ReLIFT's new buffer rows
    (`companions.relift.hardest_questions`; None when off), the rows' checkpoint features [N, E] for ARRoL's quality
    head (None when off)).
    """
    generate = functools.partial(generate_rows, config, setup, params, entropy_stats=entropy_stats,
                                 reward_model_params=reward_model_params, quality_head=quality_head)
    collected, selection_state = setup.selector.collect(selection_state, step, key, generate)
    rows, metrics = collected.rows, collected.metrics
    if urpo.enabled(config):  # the last referee_share of the groups become referee groups
        rows, metrics = urpo.mix(config, setup, params, rows, metrics, step, key)
    check_prompt_groups(rows, collected.group_ids, config_lib.shared_prompt_group(config))
    rollout = sampling.Rollout(
        prompt_tokens=jnp.asarray(rows.prompt_tokens),
        prompt_mask=jnp.asarray(rows.prompt_mask),
        completion_tokens=jnp.asarray(rows.completion_tokens),
        completion_mask=jnp.asarray(rows.completion_mask),
        logprobs=jnp.asarray(rows.logprobs),
        lengths=jnp.asarray(rows.completion_mask.sum(-1), jnp.int32),
        finished=jnp.asarray(rows.finished),
        num_decode_steps=jnp.asarray(config.sampling.max_new_tokens - 1, jnp.int32),  # an upper bound
    )
    relift_rows, relift_metrics = relift.hardest_questions(config, setup, rows, collected.group_ids)
    return (rollout, rows.scores, rows.components, collected.group_ids, rows_lib.off_policy_tokens(rows),
            {"tree_nodes": rows.tree_nodes, "node_q": rows.node_q, "node_terminal": rows.node_terminal,
             "step_scores": rows.step_scores, "step_ends": rows.step_ends,
             "hinted": rows.hint_chars > 0},
            {**metrics, **relift_metrics}, selection_state, relift_rows, rows.quality_features)
