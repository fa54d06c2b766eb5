"""URPO in the single-turn RL step (Lu et al. 2025, "URPO: A Unified Reward & Policy Optimization Framework for Large
Language Models", arXiv 2507.17515; `config.urpo`): one policy is player and referee, both trained by the same GRPO
update on one batch. The referee's text format, verdict parser and reward are `rl4llm.verifiers.referee`.

Each step (`mix`), after the prompt selection rolled out its B = rl.num_prompts groups of G: the first B − R groups
stay player groups (the task's problems, rewarded by the rule verifier), the last R = referee_share·B become referee
groups: each takes its problem and one candidate solution (`candidates`: one of that group's own rollouts, labelled
by the verifier's main reward, or the reference solution / a `wrong_solution` corruption of it), renders the referee
prompt, and the policy samples G verdicts of it at the rollout temperature (`referee_rows`), rewarded
1[verdict == label] (garbage: 0). The batch keeps N = B·G rows and B groups, so the estimator (GRPO's group
normalisation) and the learner treat both kinds alike; the mix is exact: R·G referee rows every step.

With `self_reward` (the paper's open-ended prompts, rewarded by the model's own referee), each player rollout is judged
by the policy itself (one greedy verdict of its referee prompt, `self_rewarded`): its reward is 1 if the verdict is
"correct", else 0, in place of the verifier's. Reward-hacking monitor: `urpo/self_reward_agreement` (self-reward ==
verifier label) beside `urpo/player_accuracy` (the verifier's).

Logged every step: `urpo/referee_accuracy` (agreement with the labels over the referee rows), `urpo/referee_valid_frac`
(verdicts parsed), `urpo/referee_yes_frac` (of those, 'correct'), `urpo/referee_label_mean` (candidates that are
right), `urpo/referee_signal_frac` (referee groups whose G rewards differ: the only ones GRPO learns from),
`urpo/referee_share` (referee rows / N), `urpo/player_accuracy` (verifier, player rows). `reward` is the mixed
batch's mean reward; `solve_*_frac` are the selection's, over all B problems' rollouts before the replacement. At each
evaluation with `eval_pairs` (`evaluate_referee`): `eval/referee_accuracy` and `eval/referee_valid_frac`, greedy, on
held-out problems' reference vs corrupted solutions.

Departures from the paper (whose prompt formats, mix ratio and verdict parsing we could not read; its abstract and
Figure 1 only): the referee judges ONE candidate pointwise (the paper: preference triples with an N-way ranking),
against the rule verifier's label (the paper: ground-truth preferences); the prompt is in the arithmetic task's
character alphabet; the referee groups' problems were rolled out as player groups first (their rollouts are the
candidates) and leave the player's loss.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rl4llm.data import selection as selection_lib
from rl4llm.train import batches
from rl4llm.train import completions as completions_lib
from rl4llm.train.rows import Rows, concat, take
from rl4llm.verifiers import referee as referee_lib

# fold_in streams of the step key (train.rollouts uses 4000, 4001) and the selection rng's sub-stream of the candidates
_REFEREE_STREAM, _SELF_REWARD_STREAM, _CANDIDATE_STREAM = 4002, 4003, 7
_EVAL_SEED = 2507  # the held-out referee set's corruptions: the same at every evaluation of every run


def enabled(config) -> bool:
    return config.urpo.referee_share > 0


def num_referee_groups(config) -> int:
    """R = referee_share · rl.num_prompts (validation: a whole number in [1, B − 1])."""
    return int(round(config.urpo.referee_share * config.rl.num_prompts))


def candidates(config, setup, rows: Rows, texts: list, step: int):
    """The referee groups' (questions [R], candidate texts [R], labels [R], from a rollout [R] bool): referee group j
    replaces selection group B − R + j and judges its problem; a rollout of that group (`referee.pick_rollout`, label
    = main reward ≥ 1) or a reference / corrupted solution (`referee.corrupted_candidate`), as
    `referee.candidate_plan` draws (urpo.rollout_candidates). `texts` [N]: the rows' completions."""
    u, b, g = config.urpo, config.rl.num_prompts, config.rl.num_generations
    r = num_referee_groups(config)
    examples = setup.selector.stream_examples(step, b)[b - r:]  # the uniform step's problems (validation)
    rng = selection_lib.rng(config.seed, step, _CANDIDATE_STREAM)
    plan = referee_lib.candidate_plan(r, u.rollout_candidates, rng)
    questions, texts_out, labels = [], [], []
    for j, (example, from_rollout) in enumerate(zip(examples, plan)):
        if from_rollout:
            start = (b - r + j) * g
            group_labels = (rows.main[start:start + g] >= 1.0).astype(int)
            i = referee_lib.pick_rollout(group_labels, rng)
            candidate, label = texts[start + i], int(group_labels[i])
        else:
            candidate, label = referee_lib.corrupted_candidate(example.solution, rng, u.corruption)
        questions.append(example.prompt)
        texts_out.append(candidate)
        labels.append(label)
    return questions, texts_out, np.asarray(labels, np.int32), plan


def verdicts(config, setup, params, questions, candidate_texts, counts: np.ndarray, key, sampling_cfg):
    """counts[i] completions of each referee prompt (question i, candidate i) -> (prompt tokens [b, P], mask, host
    completion arrays by Rows field [sum(counts), ...], their texts)."""
    prompts = [referee_lib.referee_prompt(config.urpo.template, q, c) for q, c in zip(questions, candidate_texts)]
    prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, prompts, config.sampling.prompt_bucket)
    completions = completions_lib.sample_completions(config, setup, params, prompt_tokens, prompt_mask, counts, key,
                                                     sampling_cfg)
    texts = batches.decode_completions(setup.tokenizer, completions["completion_tokens"],
                                       completions["completion_mask"])
    return prompt_tokens, prompt_mask, completions, texts


def referee_rows(config, setup, params, questions, candidate_texts, labels, key, num_components: int):
    """The referee groups' Rows [R·G]: G verdicts of each referee prompt at the rollout temperature, each rewarded
    `referee.referee_reward` (its `scores`, `main` and reward component 0; the other components 0) -> (Rows,
    verdict texts [R·G])."""
    u, g = config.urpo, config.rl.num_generations
    counts = np.full(len(questions), g)
    prompt_tokens, prompt_mask, completions, texts = verdicts(config, setup, params, questions, candidate_texts,
                                                              counts, key, setup.rollout_cfg)
    rewards = np.array([referee_lib.referee_reward(t, label, u.yes_token, u.no_token)
                        for t, label in zip(texts, np.repeat(labels, g))], np.float32)
    n, group = rewards.size, np.repeat(np.arange(len(questions)), g)
    components = np.zeros((n, num_components), np.float32)
    components[:, 0] = rewards
    rows = Rows(prompt_tokens=prompt_tokens[group], prompt_mask=prompt_mask[group], scores=rewards, main=rewards,
                components=components, hint_chars=np.zeros(n, np.int32), hint_tokens=np.zeros(n, np.int32),
                fresh=np.ones(n, bool), off_policy=np.zeros(n, bool), **completions)
    return rows, texts


def self_rewarded(config, setup, params, player: Rows, questions, texts, key) -> tuple[Rows, dict]:
    """The player rows rewarded by the policy's own greedy verdict of each (question, completion): 1 if 'correct',
    else 0 ('wrong' or garbage), in `scores`; `main` stays the verifier's. Metrics `urpo/self_reward_mean`,
    `urpo/self_reward_agreement` (== the verifier's label), `urpo/self_reward_valid_frac`."""
    u = config.urpo
    _, _, _, judged = verdicts(config, setup, params, questions, texts, np.ones(len(texts), int), key,
                               setup.eval_spec.greedy)
    parsed = [referee_lib.parse_verdict(t, u.yes_token, u.no_token) for t in judged]
    self_reward = np.array([v == 1 for v in parsed], np.float32)
    label = (player.main >= 1.0).astype(np.float32)
    metrics = {"urpo/self_reward_mean": float(self_reward.mean()),
               "urpo/self_reward_agreement": float(np.mean(self_reward == label)),
               "urpo/self_reward_valid_frac": float(np.mean([v is not None for v in parsed]))}
    return dataclasses.replace(player, scores=self_reward), metrics


def referee_metrics(texts, labels: np.ndarray, rewards: np.ndarray, yes_token: str, no_token: str) -> dict:
    """Agreement, parsed share, 'correct' share of the parsed verdicts and right-candidate share of one set of
    verdicts `texts` [M] of candidates labelled `labels` [M] (rewards [M] = agreement)."""
    parsed = [referee_lib.parse_verdict(t, yes_token, no_token) for t in texts]
    valid = [v for v in parsed if v is not None]
    return {"referee_accuracy": float(np.mean(rewards)), "referee_valid_frac": len(valid) / max(len(parsed), 1),
            "referee_yes_frac": float(np.mean(valid)) if valid else 0.0,
            "referee_label_mean": float(np.mean(labels))}


def mix(config, setup, params, rows: Rows, metrics: dict, step: int, key) -> tuple[Rows, dict]:
    """The step's N rows (module docstring): the first B − R selection groups as player groups (self-rewarded with
    urpo.self_reward), then R referee groups; `metrics` updated (`urpo/*`, `reward`, generated tokens)."""
    u, b, g = config.urpo, config.rl.num_prompts, config.rl.num_generations
    r = num_referee_groups(config)
    texts = batches.decode_completions(setup.tokenizer, rows.completion_tokens, rows.completion_mask)
    questions, candidate_texts, labels, from_rollout = candidates(config, setup, rows, texts, step)
    referee, verdict_texts = referee_rows(config, setup, params, questions, candidate_texts, labels,
                                          jax.random.fold_in(key, _REFEREE_STREAM), rows.components.shape[1])
    player = take(rows, np.arange((b - r) * g))
    out = {f"urpo/{k}": v for k, v in referee_metrics(verdict_texts, np.repeat(labels, g), referee.scores,
                                                      u.yes_token, u.no_token).items()}
    spread = referee.scores.reshape(r, g)
    out.update({"urpo/referee_share": r * g / (b * g), "urpo/player_accuracy": float(np.mean(player.main >= 1.0)),
                "urpo/referee_signal_frac": float(np.mean(spread.max(-1) > spread.min(-1))),
                "urpo/rollout_candidate_frac": float(np.mean(from_rollout))})
    if u.self_reward:
        player_questions = [e.prompt for e in setup.selector.stream_examples(step, b - r) for _ in range(g)]
        player, self_metrics = self_rewarded(config, setup, params, player, player_questions, texts[:(b - r) * g],
                                             jax.random.fold_in(key, _SELF_REWARD_STREAM))
        out.update(self_metrics)
    mixed = concat([player, referee], setup.tokenizer.pad_id)
    out["reward"] = float(mixed.scores.mean())
    out["generated_tokens"] = metrics.get("generated_tokens", 0.0) + float(referee.completion_mask.sum())
    out["selection/generated_rollouts"] = metrics.get("selection/generated_rollouts", 0.0) + referee.scores.size
    return mixed, {**metrics, **out}


def evaluate_referee(config, setup, params, key) -> dict:
    """Held-out referee accuracy (urpo.eval_pairs > 0): greedy verdicts of the first eval_pairs held-out problems'
    reference and `wrong_solution` candidates (`referee.held_out_pairs`, a fixed draw) -> `eval/referee_accuracy`,
    `eval/referee_valid_frac`, `eval/referee_yes_frac`."""
    u = config.urpo
    questions, candidate_texts, labels = referee_lib.held_out_pairs(setup.eval_examples, u.eval_pairs, u.corruption,
                                                                    _EVAL_SEED)
    _, _, _, texts = verdicts(config, setup, params, questions, candidate_texts, np.ones(len(labels), int), key,
                              setup.eval_spec.greedy)
    rewards = np.array([referee_lib.referee_reward(t, label, u.yes_token, u.no_token)
                        for t, label in zip(texts, labels)])
    found = referee_metrics(texts, np.asarray(labels), rewards, u.yes_token, u.no_token)
    return {f"eval/{k}": found[k] for k in ("referee_accuracy", "referee_valid_frac", "referee_yes_frac")}
