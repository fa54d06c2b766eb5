r"""Reproduction studies: several arms (methods) x seeds from ONE shared SFT warm start, results to committed JSONL.

    python -m experiments.reproduce --study=entropy_mechanism --root=/tmp/rl4llm/reproduce
    python -m experiments.reproduce --study=dapo_ladder --root=/tmp/rl4llm/reproduce --workers=2

Each study (`STUDIES`) names its arms (a recipe of configs/ with the study's overrides), its seeds, RL steps,
evaluation cadence and the metric keys it keeps. The script
  1. trains the warm start once (`<root>/warm_start`: the default SFT stage, seed 0, no RL), and the study's reward
     models, one per (name, seed) in `<root>/<study>/reward_models/<name>/seed<k>` (`ensure_reward_models`; an arm
     reads the seed's RM through `reward_model__checkpoint="rm:<name>"`, or its PRM through
     `task__step_reward_model="rm:<name>"`), `--workers` at a time,
  2. runs every (arm, seed) not finished yet in `<root>/<study>/<arm>/seed<k>`, a copy of the warm start (so every
     run starts from the same policy; the seed changes the RL data order and sampling), `--workers` at a time, each
     in its own process (`--job=<arm>/<seed>` runs one), seed-major (every arm's first seed before any second seed);
     a run another driver is running (its `<workdir>.pid` is alive) is left to it,
  3. writes, in a fresh process (`--job=collect`: runs may be written by newer code than the driver imported),
     `notebooks/results/<study>.jsonl` (`rl4llm.analysis.results`): one record per (arm, seed, logged
     step) with the study's keys, step 0 = the warm start's evaluation. The notebooks redraw every figure from it.
     Records the file already holds for runs not under `--root` (run earlier, elsewhere) are kept if they start
     from the same warm start (equal step-0 evaluation; otherwise it stops with an error).
  4. with `--samples=N`, writes `notebooks/results/<study>_samples.jsonl`: what the policies write (`write_samples`);
     a study with reward models also writes `<study>_reward_models.jsonl` (`collect_reward_models`).
Re-running skips finished runs and resumes interrupted ones from their checkpoints.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from typing import Callable

from absl import app
from absl import flags
from absl import logging

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_STUDY = flags.DEFINE_string("study", None, "Study name (STUDIES).", required=True)
_ROOT = flags.DEFINE_string("root", "/tmp/rl4llm/reproduce", "Where the warm start and the runs go.")
_RESULTS = flags.DEFINE_string("results", None, "Results JSONL (default notebooks/results/<study>.jsonl).")
_WORKERS = flags.DEFINE_integer("workers", 1, "Runs at a time (each in its own process).")
_ARMS = flags.DEFINE_list("arms", None, "Only these arms (default: all of the study's).")
_SEEDS = flags.DEFINE_list("seeds", None, "Only these seeds (default: the study's).")
_JOB = flags.DEFINE_string("job", None, "Internal: run one '<arm>/<seed>' in this process, or 'collect': write the "
                           "results files of the finished runs.")
_SAMPLES = flags.DEFINE_integer("samples", 0, "Also write <results>_samples.jsonl: this many held-out completions of "
                                "the warm start and of each finished run's last checkpoint (`write_samples`).")


def _override(config, overrides: dict):
    """`config` with dotted-field `overrides` (e.g. rl__loss_kwargs__clip_high=0.28) set."""
    for dotted, value in overrides.items():
        *path, leaf = dotted.split("__")
        section = config
        for part in path:
            section = section[part]
        section[leaf] = value
    return config


def _recipe(name: str, **overrides) -> Callable[[], object]:
    """An arm: configs/<name>.py's get_config() with dotted-field `overrides`."""
    return lambda: _override(importlib.import_module(f"configs.{name}").get_config(), overrides)


def _ladder(rung: str, **overrides) -> Callable[[], object]:
    """An arm: the rung of configs/dapo_ladder.py with dotted-field `overrides`."""
    return lambda: _override(importlib.import_module("configs.dapo_ladder").get_config(rung), overrides)


@dataclasses.dataclass(frozen=True)
class Study:
    """Arms x seeds of RL from the shared warm start."""

    arms: dict  # name -> () -> ConfigDict (the arm's full config before the study's common settings)
    seeds: tuple
    rl_steps: int
    eval_every: int
    keys: tuple  # metrics.jsonl keys kept in the results file (those a run does not log are left out)
    description: str
    # reward models the arms read ("rm:<name>"): name -> the RM job's dotted-field overrides of the default config;
    # the value "warm_start" stands for the warm start's directory (e.g. reward_model__sample_from)
    reward_models: dict = dataclasses.field(default_factory=dict)
    # step 0 evaluated afresh under the study's config even on the warm start's task: its evaluation measures more
    # than the warm start logged (e.g. urpo.eval_pairs' held-out referee accuracy)
    fresh_start_eval: bool = False


# Metric keys every study keeps: the learning curve, the policy's entropy, and the sample budget.
_COMMON_KEYS = (
    "reward", "entropy", "response_length", "truncated_frac", "useful_frac", "solve_all_frac", "solve_none_frac",
    "selection/generated_rollouts", "approx_kl", "grad_norm", "time/step_s",
    "eval/greedy_accuracy", "eval/pass@1", "eval/pass@4", "eval/answer_entropy",
)
_MECHANISM_KEYS = (
    "clip_frac", "clip_frac_low", "clip_frac_high", "dual_clip_frac", "clip_cov_frac", "kl_cov_frac", "kl_cov_abs_lr",
    "token_selection_frac", "entropy/p10", "entropy/p50", "entropy/p90", "cov_logp_adv",
    "selection/kept_groups", "selection/dropped_groups", "selection/gen_rounds", "selection/filled_with_dropped",
    "length_shaping/changed_frac",
)

_GUIDANCE_KEYS = (
    "generated_tokens", "eval/pass@16", "selection/hint_candidates", "selection/hint_solved",
    "selection/hint_rollouts", "off_policy_frac", "off_is_weight_mean", "off_shaped_weight_mean",
    "off_policy/trace_reward", "relift/solve_none", "relift/buffer", "relift/sft_updates", "relift/sft_loss",
    "tree/branches", "tree/distinct_branches", "tree/shared_token_frac",
    "selection/hint_rate", "selection/hinted_frac", "selection/unhinted_accuracy", "selection/hinted_accuracy",
    "selection/hint_overflow", "off_masked_frac", "off_low_prob_frac",
    "selection/hindsight_replaced", "selection/hindsight_guided_reward", "selection/hindsight_bonus",
    "selection/hindsight_unmet_items", "off_is_weight_max", "off_is_weight_min", "off_is_clamp_frac",
    "deepsearch/generated_tokens", "deepsearch/solved_by_search", "deepsearch/correct_backups",
    "deepsearch/negative_backups", "deepsearch/visited_nodes", "deepsearch/frontier_size", "deepsearch/max_depth",
    "deepsearch/root_reexpansions", "deepsearch/shared_token_frac",
)
# The guidance study's task: 6- and 7-operand chains (the warm start learnt 4 and writes 3 steps whatever the length:
# held-out greedy 0.035, pass@1 0.035, pass@16 0.207 on 256 prompts), a 64-token response budget (the longest
# correct 7-operand answer has 61 tokens with its stop token), pass@k up to 16 on 256 held-out prompts.
_GUIDANCE_TASK = dict(task__min_operands=6, task__max_operands=7, sampling__max_new_tokens=64,
                      eval__num_examples=256, eval__pass_n=16, eval__pass_k=(1, 4, 16))

# configs/grpo.py (4 minibatch updates per rollout batch) without its KL (β = 0.04) and with token-mean: the baseline of
# configs/clip_cov.py and configs/kl_cov.py.
_ENTROPY_BASE = dict(rl__kl_coef=0.0, rl__agg_mode="token-mean")

# What the step-reward studies log: the exact judge's verdicts and the step rewards during training, and the judge's
# verdicts on the held-out evaluation.
_STEP_REWARD_KEYS = (
    "reward/exact_answer", "judge/flawed_positive_frac", "judge/sound_accuracy", "judge/flawed_frac",
    "process/reward_abs", "process/sound_step_frac", "process/steps_per_response")
_JUDGE_EVAL_KEYS = (
    "eval/flawed_positive_frac", "eval/sound_accuracy", "eval/flawed_frac", "eval/sampled_flawed_positive_frac",
    "eval/sampled_sound_accuracy", "eval/sampled_flawed_frac")

# What URPO logs: the referee on the step's referee groups, the player, and the held-out referee.
_URPO_KEYS = (
    "urpo/referee_accuracy", "urpo/referee_valid_frac", "urpo/referee_yes_frac", "urpo/referee_label_mean",
    "urpo/referee_share", "urpo/player_accuracy", "urpo/rollout_candidate_frac", "urpo/referee_signal_frac",
    "eval/referee_accuracy", "eval/referee_valid_frac", "eval/referee_yes_frac")

STUDIES = {
    "entropy_mechanism": Study(
        arms={
            # Every arm: GRPO advantages, token-mean, no KL, 16 prompts x 16 per step in 4 minibatch updates (the
            # Clip-Cov / KL-Cov recipes' batch and schedule); they differ only in the entropy intervention, each at its
            # paper's setting (80/20 on top of clip-higher, as the paper builds on DAPO).
            "grpo": _recipe("grpo", **_ENTROPY_BASE),
            "clip_cov": _recipe("clip_cov"),
            "kl_cov": _recipe("kl_cov"),
            "clip_higher": _recipe("grpo", **_ENTROPY_BASE, rl__loss_kwargs__clip_high=0.28),
            "entropy_80_20": _recipe("grpo", **_ENTROPY_BASE, rl__loss_kwargs__clip_high=0.28,
                                     rl__token_selection="high_entropy"),
            # control: Clip-Cov's opened PPO clip ([0, 2]; dual clip out of reach, as Clip-Cov has none) without its
            # covariance intervention
            "open_clip": _recipe("grpo", **_ENTROPY_BASE, rl__loss_kwargs__clip_low=1.0, rl__loss_kwargs__clip_high=1.0,
                                 rl__loss_kwargs__dual_clip=1e9),
            # sensitivity: 10x the paper's token fractions (one minibatch of 64 sequences has ~1,500 tokens, so the
            # paper's fractions act on ~1 and ~3 tokens per update)
            "clip_cov_x10": _recipe("clip_cov", rl__loss_kwargs__clip_cov_ratio=2e-3),
            "kl_cov_x10": _recipe("kl_cov", rl__loss_kwargs__kl_cov_ratio=2e-2),
        },
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=10,
        keys=_COMMON_KEYS + _MECHANISM_KEYS,
        description="Cui et al. 2025: entropy collapse under GRPO, R = -a exp(H) + b, Clip-Cov / KL-Cov",
    ),
    "dapo_ladder": Study(
        arms={rung: _ladder(rung) for rung in ("grpo", "clip_higher", "overlong", "token_loss", "dapo")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=10,
        keys=_COMMON_KEYS + _MECHANISM_KEYS,
        description="Yu et al. 2025 (DAPO) Table 1: each component added in turn",
    ),
    # The ladder where dynamic sampling has work to do: RL on longer chains (4 to 6 operands, uniformly) from the same
    # 4-operand warm start, which solves 5 and 6 operands rarely (on the mix, the AVX-512 machine's warm start: held-out
    # greedy 0.221, pass@1 0.162, pass@4 0.307; pass@16 0.46 on 256 prompts), so about half the groups are all wrong. Response budget 56 tokens (the
    # longest correct 6-operand answer has 48 with its stop token; DAPO's overlong punishment starts above 48).
    "dapo_hard": Study(
        arms={rung: _ladder(rung, task__min_operands=4, task__max_operands=6, sampling__max_new_tokens=56)
              for rung in ("grpo", "clip_higher", "overlong", "token_loss", "dapo")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=10,
        keys=_COMMON_KEYS + _MECHANISM_KEYS,
        description="DAPO's ladder on longer chains (4-6 operands) from the 4-operand warm start",
    ),
    # Issue 23's evidence: where the warm start mostly fails, does guidance (the task's reference solutions mixed into
    # the groups: LUFFY; solution prefixes as hints for all-fail groups: GHPO; SFT on the questions no rollout
    # solves: ReLIFT; per-problem hints fitted for accuracy 0.5: SEELE) or tree rollouts (TreeRL) lift pass@k where
    # plain GRPO stalls? RL on _GUIDANCE_TASK's longer chains from the 4-operand warm start; pass@16 on 256 held-out
    # prompts. The x-axis of the comparison is the sampling budget (`selection/generated_rollouts`,
    # `generated_tokens`: TreeRL draws 240 rows a step, the others 256, LUFFY 224 of them sampled).
    "guidance_hard": Study(
        arms={
            "grpo": _recipe("default", **_GUIDANCE_TASK),
            "luffy": _recipe("luffy", **_GUIDANCE_TASK),
            "ghpo": _recipe("ghpo", **_GUIDANCE_TASK),
            "relift": _recipe("relift", **_GUIDANCE_TASK),
            "treerl": _recipe("treerl", **_GUIDANCE_TASK),
            "seele": _recipe("seele", **_GUIDANCE_TASK),
        },
        seeds=(0, 1, 2),
        rl_steps=40,
        eval_every=10,
        keys=_COMMON_KEYS + _GUIDANCE_KEYS,
        description="Guidance (LUFFY, GHPO, ReLIFT, SEELE) and tree rollouts (TreeRL) vs GRPO where the warm start "
                    "mostly fails",
    ),
    # Where a hint is trained: GHPO keeps it in the prompt, Guide moves it into the unhinted prompt's response as
    # off-policy tokens; same hints, same task and steps as guidance_hard, from one warm start (a study of its own:
    # guidance_hard's runs were made on a machine whose warm start rounds differently).
    # ADHint (configs/adhint.py: hints in the completion as Guide's, at the rate h_max·(1 − unhinted accuracy), its
    # modulated loss and posterior-scaled advantage) joins them, and HeRL (configs/herl.py: an all-fail group's failed
    # rollout and its unmet rubric items as guidance, the best guided response trained off-policy after the prompt).
    # DeepSearch (configs/deepsearch.py: an MCTS tree of 4 expansions x 4 one-step children per prompt, 16 nodes) with
    # steps of 16 tokens, so that the 4 expansions can reach the 64-token budget (d_T = 4) and a 7-operand answer.
    "guidance_guide": Study(
        arms={"grpo": _recipe("default", **_GUIDANCE_TASK), "ghpo": _recipe("ghpo", **_GUIDANCE_TASK),
              "guide": _recipe("guide", **_GUIDANCE_TASK), "adhint": _recipe("adhint", **_GUIDANCE_TASK),
              "herl": _recipe("herl", **_GUIDANCE_TASK),
              "deepsearch": _recipe("deepsearch", deepsearch__step_tokens=16, **_GUIDANCE_TASK)},
        seeds=(0, 1, 2),
        rl_steps=40,
        eval_every=10,
        keys=_COMMON_KEYS + _GUIDANCE_KEYS,
        description="Guide vs GHPO (the same hints, trained in the completion vs in the prompt) and GRPO",
    ),
    # Issue 22's "online DPO vs GRPO on the same budget": the main job's RL stage, and the same with DPO on each
    # group's best-vs-worst pair in place of the policy gradient (configs/online_dpo.py), from the main job's warm start.
    "online_dpo": Study(
        arms={"grpo": _recipe("default"), "online_dpo": _recipe("online_dpo")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + ("dpo/loss", "dpo/rewards/margins", "dpo/rewards/accuracies", "dpo/valid_pair_frac",
                             "dpo/logps/chosen", "dpo/logps/rejected"),
        description="Online DPO (Guo et al. 2024) vs GRPO on the main job's task, warm start and rollout budget",
    ),
    # Issue 22's pair objectives beside GRPO, each its recipe on the main job's RL stage: CPL (reference-free, on each
    # group's best-vs-worst pair), P3O (the clipped pairwise policy gradient on the same pairs, 4 epochs) and SPO (each
    # completion's win rate in its group minus 1/2 as the advantage of PPO-clip, 4 minibatch updates), from the warm
    # start this machine trains (the online_dpo study's was another machine's, so its GRPO arm is run again here).
    "pair_objectives": Study(
        arms={"grpo": _recipe("default"), "cpl": _recipe("cpl"), "p3o": _recipe("p3o"), "spo": _recipe("spo"),
              # the recipe's P3O with one epoch per batch: the first epoch's quotient R is 1, so the clip cannot bind
              "p3o_one_epoch": _recipe("p3o", rl__ppo_epochs=1)},
        seeds=(0, 1, 2),
        rl_steps=50,
        eval_every=25,
        keys=_COMMON_KEYS + ("loss/pg", "clip_frac", "time/learn_s", "time/gen_s",
                             "cpl/accuracy", "cpl/margin", "cpl/valid_pair_frac", "cpl/logps/chosen",
                             "cpl/logps/rejected", "p3o/clip_frac", "p3o/ratio_mean", "p3o/ratio_max",
                             "p3o/ratio_min", "p3o/reward_margin", "p3o/valid_pair_frac"),
        description="CPL, P3O and SPO vs GRPO on the main job's task, warm start and rollout budget (50 steps)",
    ),
    # Issue 23's ExIt (configs/exit.py): half of each step's groups resume partial histories of the policy's own
    # solutions, prioritised by their groups' return variance, vs the main job's GRPO (the online_dpo study's arm: the
    # same config and seeds), from the main job's warm start, at the same rollouts per step.
    "exit": Study(
        arms={"grpo": _recipe("default"), "exit": _recipe("exit")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + ("selection/exit_resumed_groups", "selection/exit_new_instances",
                             "selection/exit_buffer_size", "selection/exit_buffer_priority",
                             "selection/exit_resumed_reward", "selection/exit_history_chars"),
        description="ExIt (partial histories replayed by learnability) vs GRPO on the main job's task and warm start",
    ),
    # Issue 23's ARRoL (configs/arrol.py): each group the balanced half of twice the rollouts, pruned after 8 tokens by
    # a quality head learnt online, vs the main job's GRPO (the online_dpo study's arm), from the main job's warm start.
    "pruning": Study(
        arms={"grpo": _recipe("default"), "arrol": _recipe("arrol")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + ("generated_tokens", "time/gen_s", "time/learn_s", "pruning/sampled_rows",
                             "pruning/kept_rows", "pruning/stopped_at_checkpoint", "pruning/kept_quality",
                             "pruning/dropped_quality", "pruning/decoded_tokens", "pruning/head_loss",
                             "pruning/head_accuracy", "pruning/head_predicted", "pruning/head_outcome"),
        description="ARRoL (online rollout pruning by a learnt quality head) vs GRPO on the main job's task",
    ),
    # Issue 22's "FAPO's flawed-positive rate before/after": the main job's RL stage with the exact step judge watching
    # (penalty 0) vs FAPO's penalty on flawed positives (configs/fapo.py) and PROF's filter of 16 from 32 rollouts
    # (configs/prof.py), and PROF's balancing alone (the same counts kept in sampled order: its process score's share),
    # from the main job's warm start, a third of whose right answers come from a wrong step.
    "fapo": Study(
        arms={"grpo": _recipe("default", task__flaw_judge="arithmetic_steps"), "fapo": _recipe("fapo"),
              "prof": _recipe("prof"), "prof_balance_only": _recipe("prof", selection__prof_balance_only=True)},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + (
            "reward/exact_answer", "judge/flawed_positive_frac", "judge/sound_accuracy", "judge/flawed_frac",
            "judge/penalty_mean", "eval/flawed_positive_frac", "eval/sound_accuracy", "eval/flawed_frac",
            "eval/sampled_flawed_positive_frac", "eval/sampled_sound_accuracy", "eval/sampled_flawed_frac",
            "selection/prof_generated_accuracy", "selection/prof_kept_accuracy", "selection/prof_balance_gain",
            "selection/prof_correct_score_generated", "selection/prof_correct_score_kept"),
        description="FAPO (flawed positives rewarded half-way) and PROF (consistency filter) vs GRPO, exact step judge",
    ),
    # Issue 22's URPO (configs/urpo.py): the policy as player and referee, a quarter of each step's groups referee
    # groups, vs GRPO on the verifier alone; every arm measures the referee on 128 held-out problems' reference vs
    # corrupted-final-answer solutions (greedy verdict "1" / "0", urpo_dash's "1" / "-") before and after.
    "urpo": Study(
        arms={"grpo": _recipe("default", urpo__eval_pairs=128), "urpo": _recipe("urpo"),
              # "wrong" = "-": after the referee prompt the warm start writes "1" (p 0.30) or "-" (0.17), "0" rarely (0.05)
              "urpo_dash": _recipe("urpo", urpo__no_token="-")},
        seeds=(0, 1, 2),
        rl_steps=40,
        eval_every=20,
        keys=_COMMON_KEYS + _URPO_KEYS,
        description="URPO (one policy as player and referee, 4 of 16 groups referee) vs GRPO, held-out referee",
        fresh_start_eval=True,
    ),
    # Whether the referee learns to judge, not only to answer, given three times the steps (the urpo study's 40 did not).
    "urpo_long": Study(
        arms={"urpo": _recipe("urpo")},
        seeds=(0, 1, 2),
        rl_steps=120,
        eval_every=40,
        keys=_COMMON_KEYS + _URPO_KEYS,
        description="URPO over 120 steps: the held-out referee's parsed-verdict accuracy",
        fresh_start_eval=True,
    ),
    # Issue 22's step-level process rewards: the exact step judge's labels as step rewards beside the outcome (GRPO's
    # advantage + 0.5 x their return-to-go): the raw score (hackable: its return grows with the steps), PRM Clip and
    # Delta (Gao et al. 2024), TP-GRPO's thoughts with the capability-adaptive weight, against GRPO with the judge
    # watching (the fapo study's arm: same config and seeds).
    "process_rewards": Study(
        arms={"grpo": _recipe("default", task__flaw_judge="arithmetic_steps"),
              "prm": _recipe("prm_clip", task__step_reward="prm"), "prm_clip": _recipe("prm_clip"),
              "prm_delta": _recipe("prm_clip", task__step_reward="prm_delta"), "tp_grpo": _recipe("tp_grpo")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + _STEP_REWARD_KEYS + ("process/thoughts_per_response",) + _JUDGE_EVAL_KEYS,
        description="Step rewards from the exact judge: raw PRM, PRM Clip, PRM Delta, TP-GRPO thoughts vs GRPO",
    ),
    # Issue 22's "GRPO with the RM vs with the rule verifier": the main job's RL stage rewarded by the rule verifier, by an
    # outcome RM trained on the warm start's own completions labelled by the verifier (the RLHF pipeline), and by one
    # trained on reference vs corrupted-final-answer solutions (README's RM), each RM trained per seed; the exact step
    # judge watches every arm (reward hacking: what the RM rewards that the verifier or the judge does not).
    "reward_model": Study(
        arms={"grpo": _recipe("default", task__flaw_judge="arithmetic_steps"),
              "rm_sampled": _recipe("default", task__flaw_judge="arithmetic_steps",
                                    reward_model__checkpoint="rm:sampled"),
              "rm_corrupted": _recipe("default", task__flaw_judge="arithmetic_steps",
                                      reward_model__checkpoint="rm:corrupted"),
              # the verifier's reward plus 0.1 x the corrupted-pairs RM's score (mode add): the RM as a bonus
              "rm_corrupted_add": _recipe("default", task__flaw_judge="arithmetic_steps",
                                          reward_model__checkpoint="rm:corrupted", reward_model__mode="add",
                                          reward_model__weight=0.1),
              # the same RM alone, co-trained on the policy's verified pairs every step (Cooper, configs/cooper.py): on
              # all (accepted, rejected) pairs of each group, or on each group's worst-ordered pair only
              "rm_corrupted_cooper": _recipe("cooper", reward_model__checkpoint="rm:corrupted"),
              "rm_corrupted_cooper_hardest": _recipe("cooper", reward_model__checkpoint="rm:corrupted",
                                                     reward_model__co_train_pairs="hardest"),
              # all pairs at a tenth of the RM's learning rate: does the RM still flatten?
              "rm_corrupted_cooper_slow": _recipe("cooper", reward_model__checkpoint="rm:corrupted",
                                                  reward_model__learning_rate=1e-4)},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + (
            "reward/exact_answer", "reward_model/score_mean", "reward_model/score_std", "judge/flawed_positive_frac",
            "judge/sound_accuracy", "eval/flawed_positive_frac", "eval/sound_accuracy",
            "eval/sampled_flawed_positive_frac", "eval/sampled_sound_accuracy", "reward_model/pair_accuracy",
            "reward_model/hard_pair_accuracy", "reward_model/loss", "reward_model/pairs"),
        description="GRPO rewarded by the rule verifier vs by an outcome RM (policy-sampled or corrupted pairs; "
                    "frozen or co-trained)",
        reward_models={
            "sampled": dict(reward_model__sample_from="warm_start", reward_model__steps=300,
                            reward_model__eval_every=50),
            "corrupted": dict(reward_model__steps=300, reward_model__eval_every=50),
        },
    ),
    # Gao et al.'s claim, which process_rewards could not test (an exact judge cannot be farmed): step rewards from a
    # LEARNED PRM (trained per seed on the exact judge's labels of the warm start's own samples, its trunk the warm
    # start's) — raw (whose return grows with the steps: hackable), Clip, Delta — against GRPO with the judge watching
    # (the fapo study's arm: same config and seeds). The judge measures what the PRM rewards: prm/judge_sound_frac vs
    # prm/step_score_mean, judge/* and eval/* soundness beside the PRM's prm/score_sum and steps per response.
    "learned_prm": Study(
        arms={"grpo": _recipe("default", task__flaw_judge="arithmetic_steps"),
              "prm": _recipe("prm_learned", task__step_reward="prm", task__step_reward_model="rm:process"),
              "prm_clip": _recipe("prm_learned", task__step_reward_model="rm:process"),
              "prm_delta": _recipe("prm_learned", task__step_reward="prm_delta", task__step_reward_model="rm:process")},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=25,
        keys=_COMMON_KEYS + _STEP_REWARD_KEYS + (
            "prm/step_score_mean", "prm/judge_sound_frac", "prm/step_agreement", "prm/score_sum",
            "prm/response_min_score") + _JUDGE_EVAL_KEYS,
        description="Step rewards from a learned PRM: raw PRM, PRM Clip, PRM Delta vs GRPO",
        reward_models={
            "process": dict(reward_model__objective="process", reward_model__sample_from="warm_start",
                            reward_model__init_from="warm_start", reward_model__sample_prompts=256,
                            reward_model__steps=300, reward_model__eval_every=50),
        },
    ),
    # The longer horizon of guidance_hard's two extremes: LUFFY's policy learns the traces' longer answers yet its pass@k
    # falls over 40 steps, while GRPO's barely moves. Does either change with 2.5x the steps?
    "guidance_hard_long": Study(
        arms={"grpo": _recipe("default", **_GUIDANCE_TASK), "luffy": _recipe("luffy", **_GUIDANCE_TASK)},
        seeds=(0, 1, 2),
        rl_steps=100,
        eval_every=20,
        keys=_COMMON_KEYS + _GUIDANCE_KEYS,
        description="guidance_hard's GRPO and LUFFY arms over 100 steps",
    ),
}


def run_config(study: Study, arm: str, seed: int, root: str = _ROOT.default, study_name: str = ""):
    """The full config of one run: the arm's recipe with the study's seed, steps and cadence; a reward model (or PRM)
    named "rm:<name>" is the study's RM of that name and seed under `root`."""
    config = study.arms[arm]()
    for section, field in (("reward_model", "checkpoint"), ("task", "step_reward_model")):
        if config[section][field].startswith("rm:"):
            name = config[section][field].removeprefix("rm:")
            if name not in study.reward_models:
                raise ValueError(f"arm {arm}: no reward model {name!r} in the study ({list(study.reward_models)})")
            config[section][field] = os.path.join(reward_model_dir(root, study_name, name, seed), "reward_model")
    config.seed = seed
    config.rl.steps = study.rl_steps
    config.eval.every = study.eval_every
    config.log_every = 1
    config.checkpoint.every = study.eval_every * 5
    return config


def warm_start_dir(root: str) -> str:
    return os.path.join(root, "warm_start")


def run_dir(root: str, study_name: str, arm: str, seed: int) -> str:
    return os.path.join(root, study_name, arm, f"seed{seed}")


def reward_model_dir(root: str, study_name: str, name: str, seed: int) -> str:
    return os.path.join(root, study_name, "reward_models", name, f"seed{seed}")


def reward_model_config(study: Study, name: str, seed: int, root: str):
    """The RM job's config of the study's reward model `name` for `seed`: the default config with its overrides."""
    from configs import default

    overrides = {k: warm_start_dir(root) if v == "warm_start" else v for k, v in study.reward_models[name].items()}
    config = _override(default.get_config(), overrides)
    config.seed = seed
    return config


def train_reward_model(study_name: str, name: str, seed: int, root: str) -> None:
    """One reward model of the study (`reward_model_job.run`), in a fresh directory (the job does not resume), with the
    warm start's tokenizer, which every run of the study reads (the task's tokenizer is trained on the seed's corpus)."""
    from rl4llm.train import reward_model_job

    workdir = reward_model_dir(root, study_name, name, seed)
    shutil.rmtree(workdir, ignore_errors=True)  # an interrupted RM job starts again
    shutil.copytree(os.path.join(warm_start_dir(root), "tokenizer"), os.path.join(workdir, "tokenizer"))
    reward_model_job.run(reward_model_config(STUDIES[study_name], name, seed, root), workdir)


def run_processes(commands: list, logs: list, workers: int) -> list:
    """Runs `commands` (argument lists, in this repo), `workers` at a time, each with its log file; returns the
    commands that failed."""
    running, failed = [], []
    for command, log in zip(commands, logs):
        while len(running) >= workers:
            time.sleep(10)
            failed += [p.args for p in running if p.poll() not in (None, 0)]
            running = [p for p in running if p.poll() is None]
        running.append(subprocess.Popen(command, cwd=_REPO, stdout=open(log, "w", encoding="utf-8"),
                                        stderr=subprocess.STDOUT))
    return failed + [p.args for p in running if p.wait() != 0]


def ensure_reward_models(study_name: str, root: str, seeds, workers: int) -> None:
    """Trains the study's reward models not finished yet (each (name, seed) in its own process, `workers` at a time)."""
    study = STUDIES[study_name]
    todo = [(name, seed) for seed in seeds for name in study.reward_models
            if not os.path.exists(os.path.join(reward_model_dir(root, study_name, name, seed), "summary.json"))]
    commands = [[sys.executable, "-m", "experiments.reproduce", f"--study={study_name}", f"--root={root}",
                 f"--job=rm:{name}/{seed}"] for name, seed in todo]
    logs = [os.path.join(root, f"{study_name}_rm_{name}_seed{seed}.log") for name, seed in todo]
    for name, seed in todo:
        print(f"training reward model {name} seed {seed}", flush=True)
    failed = run_processes(commands, logs, workers)
    if failed:
        sys.exit(f"reward models failed: {[c[-1] for c in failed]} (logs in {root})")


def collect_reward_models(study_name: str, root: str, path: str) -> int:
    """Writes the study's reward models' training records (stage "rm": held-out pairwise accuracy, loss; step 0 with
    the sampled pairs' counts) to `path`, one per (RM name as "arm", seed, logged step); returns their number."""
    from rl4llm.analysis import results
    from rl4llm.train import metrics as metrics_lib

    study = STUDIES[study_name]
    records = []
    for name in study.reward_models:
        for seed in study.seeds:
            workdir = reward_model_dir(root, study_name, name, seed)
            if os.path.exists(os.path.join(workdir, "summary.json")):
                records += [{"arm": name, "seed": seed, **{k: v for k, v in r.items() if k != "stage"}}
                            for r in metrics_lib.read_metrics(workdir, "rm")]
    return results.write_results(path, records)


def ensure_warm_start(root: str) -> str:
    """The shared warm start: the default config's SFT stage (seed 0) in `<root>/warm_start`, trained once."""
    from configs import default
    from rl4llm.train import job

    workdir = warm_start_dir(root)
    if not os.path.exists(os.path.join(workdir, "summary.json")):
        config = default.get_config()
        config.rl.steps = 0
        job.run(config, workdir)
    return workdir


def run_job(study_name: str, arm: str, seed: int, root: str) -> None:
    """One (arm, seed) run in a copy of the warm start (resumed when interrupted)."""
    from rl4llm.train import job

    study = STUDIES[study_name]
    workdir = run_dir(root, study_name, arm, seed)
    if not os.path.isdir(os.path.join(workdir, "checkpoints", "sft")):
        source = warm_start_dir(root)
        shutil.copytree(os.path.join(source, "checkpoints", "sft"), os.path.join(workdir, "checkpoints", "sft"))
        shutil.copytree(os.path.join(source, "tokenizer"), os.path.join(workdir, "tokenizer"))
    config = run_config(study, arm, seed, root, study_name)
    job.run(config, workdir)  # validates the config before anything is built


def collect(study_name: str, root: str, path: str) -> int:
    """Writes the study's results file from its finished runs; returns the number of records.

    Runs finished under `root` replace their records; the records an existing results file holds for runs that are
    not under `root` (run earlier, elsewhere) are kept, provided they start from the same warm start: their step-0
    evaluation must equal this root's, else the arms would not be comparable and this raises."""
    from rl4llm.analysis import results
    from rl4llm.train import metrics as metrics_lib

    study = STUDIES[study_name]
    warm_evals = {arm: start_eval(study_name, root, arm if study.fresh_start_eval else None) for arm in study.arms}
    records, finished = [], set()
    for arm in study.arms:
        for seed in study.seeds:
            workdir = run_dir(root, study_name, arm, seed)
            if not os.path.exists(os.path.join(workdir, "summary.json")):
                continue
            finished.add((arm, seed))
            records.append({"arm": arm, "seed": seed, "step": 0, **warm_evals[arm]})
            for r in metrics_lib.read_metrics(workdir, "rl"):
                records.append({"arm": arm, "seed": seed, "step": r["step"],
                                **{k: r[k] for k in study.keys if k in r}})
    if os.path.exists(path):
        kept = [r for r in results.read_results(path) if (r["arm"], r["seed"]) not in finished]
        for r in kept:
            warm_eval = warm_evals.get(r["arm"], {})
            if r["step"] == 0 and not all(math.isclose(r[k], v, rel_tol=1e-5) for k, v in warm_eval.items() if k in r):
                raise ValueError(f"{path}: {r['arm']} seed {r['seed']} starts from another warm start than "
                                 f"{warm_start_dir(root)} ({ {k: r[k] for k in warm_eval if k in r} } vs {warm_eval})")
        records += kept
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return results.write_results(path, records)


def write_samples(study_name: str, root: str, path: str, num_prompts: int) -> int:
    """Writes what the policies write: one completion (the run's rollout sampling, key 0) for each of the first
    `num_prompts` held-out prompts, from the warm start (arm "warm_start", step 0: the first arm's seed-0 SFT
    checkpoint of the first finished run, under the study's task) and from every finished run's last RL checkpoint.
    Records: arm, seed, step, prompt, completion, answer, reward, length, finished. An existing file's records of
    runs not under `root` are kept (as `collect` keeps their metrics; a changed warm start shows in its "warm_start"
    records, which are replaced). Returns the number of records."""
    from rl4llm.analysis import results
    from rl4llm.train import runs

    study = STUDIES[study_name]
    finished = [(arm, seed, run_dir(root, study_name, arm, seed), "rl") for arm in study.arms for seed in study.seeds
                if os.path.exists(os.path.join(run_dir(root, study_name, arm, seed), "summary.json"))]
    sources = [("warm_start", 0, finished[0][2], "sft")] + finished if finished else []
    records = []
    for arm, seed, workdir, stage in sources:
        policy = runs.restore_policy(workdir, stage, num_examples=num_prompts)
        try:
            records += [{"arm": arm, "seed": seed, "step": policy.step if stage == "rl" else 0, **c}
                        for c in runs.sample_completions(policy, num_prompts)]
        finally:
            policy.setup.rewards.close()
    if os.path.exists(path):
        sampled = {(arm, seed) for arm, seed, _, _ in sources}
        records += [r for r in results.read_results(path) if (r["arm"], r["seed"]) not in sampled]
    return results.write_results(path, records)


def start_eval(study_name: str, root: str, arm: str | None = None) -> dict:
    """Step 0 of every arm: the shared warm start evaluated on the study's held-out set. When the study trains on the
    warm start's task, the warm start's own logged evaluation; otherwise (e.g. dapo_hard's longer chains) its SFT
    checkpoint evaluated under the study's config (its first arm's task), in the first run under `root` (the study's arm
    and seed order; every run starts from a copy of the warm start) with the run's pass_k and evaluation key (`runs.evaluate_checkpoint`,
    which reproduces what a run logs), kept in that run's `eval_sft_<step>.json`. `arm`: under that arm's config, in
    its first run (a study with `fresh_start_eval` whose arms evaluate differently); None, or an arm without a run
    under `root`: the first arm's."""
    from configs import default
    from rl4llm.train import metrics as metrics_lib
    from rl4llm.train import runs

    study = STUDIES[study_name]
    if arm and not any(os.path.exists(run_dir(root, study_name, arm, s)) for s in study.seeds):
        arm = None  # no run of the arm under root: the first arm's
    first_arm = arm or next(iter(study.arms))
    config = run_config(study, first_arm, 0, root, study_name)
    if config.task.to_dict() == default.get_config().task.to_dict() and not study.fresh_start_eval:
        logged = {k: v for r in metrics_lib.read_metrics(warm_start_dir(root), "sft") for k, v in r.items()}
    else:
        workdir = next((run_dir(root, study_name, a, s) for a in ([arm] if arm else study.arms) for s in study.seeds
                        if os.path.exists(run_dir(root, study_name, a, s))), run_dir(root, study_name, first_arm, 0))
        found = [f for f in os.listdir(workdir) if f.startswith("eval_sft_")]
        if found:
            with open(os.path.join(workdir, found[0]), encoding="utf-8") as f:
                logged = json.load(f)["metrics"]
        else:
            logged = runs.evaluate_checkpoint(workdir, list(config.eval.pass_k), stage="sft")["metrics"]
    return {k: logged[k] for k in study.keys if k.startswith("eval/") and k in logged}


def _running(workdir: str) -> bool:
    """Whether a live process (another driver's worker) holds `<workdir>.pid`."""
    try:
        with open(workdir + ".pid", encoding="utf-8") as f:
            os.kill(int(f.read()), 0)
        return True
    except (OSError, ValueError):
        return False


def _pending(study_name: str, root: str, arms, seeds) -> list[tuple[str, int]]:
    """(arm, seed) pairs not finished and not being run by another driver, seed-major: every arm's seed 0 first."""
    return [(arm, seed) for seed in seeds for arm in arms
            if not os.path.exists(os.path.join(run_dir(root, study_name, arm, seed), "summary.json"))
            and not _running(run_dir(root, study_name, arm, seed))]


def write_results(study_name: str, root: str) -> None:
    """The study's results files from its finished runs: `collect`, `collect_reward_models` and, with --samples,
    `write_samples`."""
    path = _RESULTS.value or os.path.join(_REPO, "notebooks", "results", f"{study_name}.jsonl")
    print(f"wrote {collect(study_name, root, path)} records to {path}", flush=True)
    if STUDIES[study_name].reward_models:
        rm_path = path.removesuffix(".jsonl") + "_reward_models.jsonl"
        print(f"wrote {collect_reward_models(study_name, root, rm_path)} records to {rm_path}", flush=True)
    if _SAMPLES.value:
        samples_path = path.removesuffix(".jsonl") + "_samples.jsonl"
        print(f"wrote {write_samples(study_name, root, samples_path, _SAMPLES.value)} records to {samples_path}",
              flush=True)


def main(argv):
    del argv
    from rl4llm.train import host_memory

    host_memory.reuse_freed_memory()  # before JAX starts its threads
    study = STUDIES[_STUDY.value]
    root = _ROOT.value
    if _JOB.value == "collect":
        write_results(_STUDY.value, root)
        return
    if _JOB.value:
        arm, seed = _JOB.value.split("/")
        if arm.startswith("rm:"):
            train_reward_model(_STUDY.value, arm.removeprefix("rm:"), int(seed), root)
        else:
            run_job(_STUDY.value, arm, int(seed), root)
        return
    arms = _ARMS.value or list(study.arms)
    unknown = sorted(set(arms) - set(study.arms))
    if unknown:
        sys.exit(f"--arms: unknown {unknown}; {_STUDY.value} has {list(study.arms)}")
    seeds = [int(s) for s in _SEEDS.value] if _SEEDS.value else list(study.seeds)
    ensure_warm_start(root)
    ensure_reward_models(_STUDY.value, root, seeds, _WORKERS.value)
    jobs = _pending(_STUDY.value, root, arms, seeds)
    print(f"{_STUDY.value}: {len(jobs)} runs to do ({study.description})", flush=True)
    running: list[subprocess.Popen] = []
    workdirs = [run_dir(root, _STUDY.value, a, s) for a in study.arms for s in study.seeds]
    for arm, seed in jobs:
        # a slot is free when fewer than --workers runs live: this driver's and any other driver's (their pid files)
        while max(len(running), sum(_running(w) for w in workdirs)) >= _WORKERS.value:
            time.sleep(10)
            running = [p for p in running if p.poll() is None]
        if (arm, seed) not in _pending(_STUDY.value, root, [arm], [seed]):  # another driver took it meanwhile
            continue
        log = open(os.path.join(root, f"{_STUDY.value}_{arm}_seed{seed}.log"), "w", encoding="utf-8")
        command = [sys.executable, "-m", "experiments.reproduce", f"--study={_STUDY.value}", f"--root={root}",
                   f"--job={arm}/{seed}"]
        running.append(subprocess.Popen(command, cwd=_REPO, stdout=log, stderr=subprocess.STDOUT))
        workdir = run_dir(root, _STUDY.value, arm, seed)
        os.makedirs(os.path.dirname(workdir), exist_ok=True)
        with open(workdir + ".pid", "w", encoding="utf-8") as f:  # other drivers leave this run alone while it lives
            f.write(str(running[-1].pid))
        print(f"started {arm} seed {seed}", flush=True)
    failed = [p.args[-1] for p in running if p.wait() != 0]
    # in a fresh process: the runs' configs may hold fields newer than this driver's imported code (a long study)
    subprocess.run([sys.executable, "-m", "experiments.reproduce", *sys.argv[1:], "--job=collect"], cwd=_REPO,
                   check=True)
    if failed:
        sys.exit(f"failed runs: {failed} (logs in {root})")


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)
    app.run(main)
