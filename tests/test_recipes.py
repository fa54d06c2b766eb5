"""Every recipe in configs/ runs a few RL steps of the main job on a tiny config without NaNs, and the mechanism
its paper is about acts (`MECHANISMS`: the metric that shows it is non-zero).

The SFT warm start is shared: one module-scoped run finishes SFT (and no RL); each recipe copies that
workdir, so `sft.run_sft` finds a completed SFT checkpoint and reuses it. The tiny policy solves almost
nothing, so every group would get all-zero rewards and zero advantages (no mechanism could act): the runs score
with `_parity_reward` instead (even answers: always right, so those groups are all-equal; odd answers: right iff
the completion has an even length), with the recipe's own update schedule and a learning rate large enough
(`MECHANISM_LR`) that two RL steps move the ratio well away from 1.
"""

import importlib
import math
import os
import shutil

import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import job
from rl4llm.train import single_turn
from tests.test_train import tiny_config

RECIPES = (
    "grpo",
    "grpo_async",
    "dr_grpo",
    "dapo",
    "rloo",
    "reinforce_pp",
    "gspo",
    "cispo",
    "clip_cov",
    "kl_cov",
    "entropy_80_20",
    "lp_reg",
    "ppo_arithmetic",
    "prime",
    "dynamic_sampling",
    "dots",
    "bots",
    "luffy",
    "rl_plus",
    "rlve",
    "treerl",
    "online_dpo",
    "cpl",
    "p3o",
    "spo",
    "starpo_s",
    "scaler",
    "self_low_likelihood",
    "constrained_format",
    "dynamic_reward_weighting",
    "brorl",
    "insight",
    "tree_opo",
    "cure",
    "ettrl",
    "grpo_soft_verifier",
    "grpo_critique_verifier",
    "hapo",
    "d3s",
    "iterative_dpo",
    "fapo",
    "prof",
    "tp_grpo",
    "prm_clip",
    "prm_learned",
    "cooper",
    "exit",
    "arrol",
    "adhint",
    "deepsearch",
    "urpo",
)
RL_STEPS = 2
SFT_STEPS = 60  # a warm start with structure: after tiny_config's 6 steps the nano policy is uniform (H 2.98 of 3.0)
MECHANISM_LR = 3e-2

# recipe -> metrics that must be non-zero at some RL step: the paper's mechanism acting (see rl4llm/rl/README.md)
MECHANISMS = {
    "grpo": ("clip_frac", "kl"),
    "grpo_async": ("async/staleness", "tis/weight_mean"),
    "dr_grpo": ("clip_frac",),
    "dapo": ("clip_frac_high", "selection/dropped_groups", "length_shaping/changed_frac"),
    "rloo": ("clip_frac", "kl"),
    "reinforce_pp": ("clip_frac", "kl"),
    "gspo": ("seq_clip_frac",),
    "cispo": ("is_clip_frac",),
    "clip_cov": ("clip_cov_frac",),
    "kl_cov": ("kl_cov_frac", "kl_cov_abs_lr"),
    "entropy_80_20": ("token_selection_frac", "clip_frac_high"),
    "lp_reg": ("lp_reg_frac",),
    "ppo_arithmetic": ("clip_frac", "critic/vf_clip_frac"),
    "prime": ("prime/process_reward_abs", "selection/dropped_groups"),
    "dynamic_sampling": ("selection/dropped_groups", "clip_frac"),
    "dots": ("selection/replayed_groups", "tis/weight_mean"),
    "bots": ("selection/predicted_success", "clip_frac"),
    "luffy": ("off_policy_frac", "off_is_weight_mean", "off_shaped_weight_mean"),
    "rl_plus": ("off_policy_frac", "off_is_weight_mean", "off_exploration_weight_mean"),
    "rlve": ("selection/frontier_accuracy", "selection/difficulty_upper"),
    "treerl": ("tree/branches", "tree/shared_token_frac", "tree/distinct_branches"),
    # the search expanded frontier nodes (not only the root) and backed up a correct or a most-confident-negative path
    "deepsearch": ("deepsearch/expansions", "deepsearch/frontier_size", "deepsearch/visited_nodes",
                   "deepsearch/correct_backups", "deepsearch/negative_backups"),
    # the DPO path fires: groups gave best-vs-worst pairs and the pair loss was evaluated on them
    "online_dpo": ("dpo/valid_pair_frac", "dpo/loss"),
    # CPL's pairs were formed and its (conservative) contrastive loss evaluated on them
    "cpl": ("cpl/valid_pair_frac", "cpl/loss"),
    # P3O's pair ratio left [1 - ε, 1 + ε] on a later epoch and the clip bound
    "p3o": ("p3o/valid_pair_frac", "p3o/clip_frac"),
    # SPO's win rates spread within groups: rows whose win rate is not ½ carry a non-zero advantage
    "spo": ("useful_frac", "clip_frac"),
    # groups were dropped, and the kept ones had reward spread (the parity reward's odd-answer groups)
    "starpo_s": ("selection/dropped_groups", "selection/chosen_in_group_std"),
    "exit": ("selection/exit_new_instances", "selection/exit_resumed_groups"),
    "arrol": ("pruning/head_grad_norm", "pruning/dropped_quality"),
    # the parity reward is ~75 % right, so d rises from 0 by 2 x (0.75 - 0.5) per step
    "scaler": ("selection/difficulty_level", "selection/difficulty_step"),
    # the greedy probe solved some prompts (the parity reward's even answers) and kept some
    "self_low_likelihood": ("selection/greedy_solved_frac", "selection/kept_groups"),
    # the nano policy breaks the format: the violated constraint raised its multiplier above its initial 0
    "constrained_format": ("constraint/multiplier/format_arithmetic", "constraint/violation/format_arithmetic"),
    "dynamic_reward_weighting": ("reward_weighting/weight_change",),
    # broad groups: 16 rollouts of each of 2 prompts in chunked sampler calls; tokens with a non-zero advantage
    "brorl": ("useful_frac",),
    # the chosen prompts' expected information gain from one more outcome (Beta posterior per prompt)
    "insight": ("selection/information_gain", "selection/predicted_success"),
    # staged prefixes of depth > 0 (branches forked after some tokens), each with its own subtree baseline
    "tree_opo": ("tree/branches", "tree/branch_depth"),
    # continuations re-generated from prompt ⊕ response[:t*]: the share of tokens in re-concatenated prefixes
    "cure": ("tree/branches", "tree/shared_token_frac"),
    # leaves agreeing with their tree's majority answer (the pseudo-label), from entropy-forked trees
    "ettrl": ("pseudo_label/agreement", "tree/branches"),
    # the (random nano) verifier's P(Yes) differs between a group's completions: GRPO's advantages come from it
    "grpo_soft_verifier": ("verifier/group_std", "verifier/p_yes_mean"),
    # the (random nano) critique judge's k critiques were sampled and parsed; its garbage ones are counted (they vote
    # the minimum score: tests/test_critique_verifier.py has a trained judge whose scores vary)
    "grpo_critique_verifier": ("verifier/parse_failures", "verifier/score_mean"),
    # the second step's tokens were drawn at different temperatures (the first step's entropy statistics), and the
    # entropy-adaptive clip ranges clipped some tokens
    "hapo": ("temperature/std", "clip_frac"),
    # half of the rollouts (those of least advantage variance) left the loss, and tokens of low |A|·H with them
    "d3s": ("downsample/rollouts_dropped_frac", "token_selection_frac"),
    # pairs were formed and trained on, and a round ended: the reference became the current policy
    "iterative_dpo": ("dpo/valid_pair_frac", "ref_reset"),
    # the judge found right answers (the parity reward's) from flawed steps (the nano policy's) and FAPO lowered them
    "fapo": ("judge/flawed_positive_frac", "judge/penalty_mean"),
    # 8 rollouts per prompt, the 4 kept moved the groups toward half right (the parity reward is ~75 % right)
    "prof": ("selection/prof_balance_gain", "selection/prof_generated_accuracy"),
    # the judge labelled the nano policy's steps and their rewards entered the advantages (thoughts: ±1, never 0)
    "tp_grpo": ("process/reward_abs", "process/thoughts_per_response"),
    # a flawed step costs η = 0.5 (the nano policy's steps are mostly flawed)
    "prm_clip": ("process/reward_abs", "process/steps_per_response"),
    # the (random nano) PRM scored the steps the judge segments, and Clip turned its scores below η into rewards
    "prm_learned": ("prm/step_score_mean", "prm/score_sum", "process/reward_abs"),
    # the verifier split groups (the parity reward) and the RM took Bradley-Terry steps on their pairs
    "cooper": ("reward_model/pairs", "reward_model/grad_norm"),
    # groups the parity reward does not always reward got a hint (h_max (1 - acc)), trained off-policy in the
    # completion, and some hint tokens were masked (a negative advantage, or pi below the threshold)
    "adhint": ("selection/hinted_frac", "off_policy_frac", "off_masked_frac"),
    # referee groups judged right candidates among wrong ones, and some of the nano policy's
    # verdicts parsed ("1" / "0" first: it writes digits after the referee prompt's "=")
    "urpo": ("urpo/referee_share", "urpo/referee_label_mean", "urpo/referee_valid_frac"),
}


# Thresholds set for a 7B-32B model's statistics, scaled to the nano policy of these tests (a 20-token vocabulary at
# entropy ~2 after SFT_STEPS, ~200 valid tokens per minibatch), so that the mechanism acts in two steps on any
# machine: Clip-Cov's covariance window (1, 5) may hold no token of the nano model, and Lp-Reg's 1% quantile of
# ~100 negative tokens is the single least likely one, often below the min-p proxy's cut (so never regularised).
# PPO's value clip needs a critic that moves within one rollout batch: it gets the actor's test learning rate.
TINY_SCALE = {
    "clip_cov": {"rl.loss_kwargs.clip_cov_lb": 0.0},
    "lp_reg": {"rl.loss_kwargs.rho_neg": 0.2},
    "ppo_arithmetic": {"critic.learning_rate": MECHANISM_LR},
    # RLVE checks after 8 groups at 90 %: with 4 groups a step and the parity reward (~75 % right), a check per step
    # at 50 % lets the level rise within the two steps.
    "rlve": {"selection.difficulty_min_prompts": 4, "selection.difficulty_threshold": 0.5},
    # TreeRL's (6, 2, 1, 2) tree is 30 rows; the tiny job's groups of 4 are trees (2, 1, 1, 1): 2 paths, 1 fork each
    "treerl": {"tree.initial_paths": 2, "tree.branch_points": 1, "tree.branches": 1, "tree.iterations": 1},
    # the weight step is scaled by the policy's current learning rate, 0 at the first update of a warm-up: without
    # one, both steps can move the weights (a step whose groups all have uniform rewards cannot)
    "dynamic_reward_weighting": {"rl.warmup_steps": 0},
    # the tiny job's 4 x 4 rows as 2 prompts x 16 rollouts, 16 rows per sampler call and per micro-batch
    "brorl": {"rl.num_prompts": 2, "rl.num_generations": 16, "rl.micro_batch_size": 16, "sampling.rows_per_call": 16},
    # the tiny job's groups of 4: one tree, one fork point with 3 branches (Tree-OPO's stages; CURE's n1 = 1, n2 = 3)
    "tree_opo": {"tree.initial_paths": 1, "tree.branch_points": 1, "tree.branches": 3, "tree.iterations": 1},
    "cure": {"tree.initial_paths": 1, "tree.branch_points": 1, "tree.branches": 3, "tree.iterations": 1},
    "iterative_dpo": {"rl.ref_reset_every": 1},
    # 3 of the tiny job's 4 groups are referee groups (the recipe's quarter would be one): 24 verdicts in two steps,
    # of which the nano policy parses ~1 in 5; 4 held-out referee pairs
    "urpo": {"urpo.referee_share": 0.75, "urpo.eval_pairs": 4},
    # the tiny job's groups of 4: 2 expansions of 2 one-step children; steps of 6 of its 12 tokens (depth 2 terminal)
    "deepsearch": {"deepsearch.candidates": 2, "deepsearch.expansions": 2, "deepsearch.step_tokens": 6},  # a round per RL step: the reset happens within the two steps
    "prof": {"selection.prof_rollouts": 8},  # the tiny job's groups of 4, from 8
    # ETMR's (4, N=3, B=2) is 28 leaves: here 2 trees forked once; `shrink` replaces the task section, so the
    # pseudo-labels are set again, on a reward with an answer extractor (majority votes need one)
    "ettrl": {"tree.initial_paths": 2, "tree.branch_points": 1, "tree.branches": 1, "tree.iterations": 1,
              "task.reward": "exact_answer", "task.pseudo_labels": "majority_vote"},
}


def _tiny_verifier(tmp_path) -> dict:
    from tests.test_generative_verifier import write_tiny_verifier

    write_tiny_verifier(str(tmp_path / "verifier"))
    return {"generative_verifier.checkpoint": str(tmp_path / "verifier")}


def _tiny_reward_model(tmp_path) -> dict:
    from tests.test_reward_model_rl import write_tiny_rm

    write_tiny_rm(str(tmp_path / "rm"))
    return {"reward_model.checkpoint": str(tmp_path / "rm")}


def _tiny_process_reward_model(tmp_path) -> dict:
    from tests.test_process_reward_model import write_tiny_prm

    write_tiny_prm(str(tmp_path / "prm"))
    return {"task.step_reward_model": str(tmp_path / "prm")}


# recipe -> (tmp_path -> overrides): what a recipe reads from disk, written for its run
PREPARE = {"grpo_soft_verifier": _tiny_verifier, "grpo_critique_verifier": _tiny_verifier, "cooper": _tiny_reward_model,
           "prm_learned": _tiny_process_reward_model}


def _parity_reward(completion: str, answer: str) -> float:
    """All-correct groups for even answers, about half right (by completion length) for odd ones."""
    return 1.0 if int(answer) % 2 == 0 else float(len(completion) % 2 == 0)


def shrink(config):
    """The recipe's method on the tiny job of tests/test_train.py (same task, model and SFT stage)."""
    tiny = tiny_config()
    task = config.task  # the recipe's reward shaping, extra reward components and process judge stay
    shaping = (task.length_shaping, task.length_shaping_kwargs, task.extra_rewards, task.extra_rewards_mode,
               task.flaw_judge, task.flaw_penalty, task.step_reward, task.step_reward_eta, task.step_reward_model)
    adaptive_temperature = (config.sampling.temperature_tau, config.sampling.temperature_pivot)  # HAPO's stays
    for section in ("task", "model", "sampling", "sft", "eval", "checkpoint"):
        config[section] = tiny[section]
    config.sft.steps = SFT_STEPS
    (config.task.length_shaping, config.task.length_shaping_kwargs, config.task.extra_rewards,
     config.task.extra_rewards_mode, config.task.flaw_judge, config.task.flaw_penalty, config.task.step_reward,
     config.task.step_reward_eta, config.task.step_reward_model) = shaping
    config.sampling.temperature_tau, config.sampling.temperature_pivot = adaptive_temperature
    config.log_every = tiny.log_every
    config.rl.steps = RL_STEPS
    config.rl.num_prompts = tiny.rl.num_prompts
    config.rl.num_generations = tiny.rl.num_generations
    config.critic.warmup_steps = min(config.critic.warmup_steps, RL_STEPS - 1)  # the actor updates at least once
    config.selection.pool_size = min(config.selection.pool_size, 32)  # the tiny task has ~80 training prompts
    config.selection.replay_capacity = min(config.selection.replay_capacity, 8)
    # accuracy_band (PRIME): the tiny model solves almost nothing, so keep all-fail groups (a step whose groups
    # were all masked out would train on no token and log NaN token statistics)
    config.selection.acc_low = 0.0
    return config


@pytest.fixture(scope="module")
def sft_workdir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("sft"))
    config = shrink(default.get_config())
    config.rl.steps = 0
    job.run(config, workdir)
    return workdir


def _run_from_sft(config, sft_workdir, workdir):
    shutil.copytree(sft_workdir, workdir)
    job.run(config, workdir)
    records = {r["step"]: r for r in metrics_lib.read_metrics(workdir, "rl")}
    assert sorted(records) == list(range(1, RL_STEPS + 1))
    for step, record in records.items():
        # The metrics writer stores non-finite floats as null.
        bad = [k for k, v in record.items() if v is None or (isinstance(v, float) and not math.isfinite(v))]
        assert not bad, (step, bad)
    return records


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_without_nans_and_its_mechanism_acts(name, sft_workdir, tmp_path, monkeypatch):
    from rl4llm import rewards

    monkeypatch.setitem(rewards.REWARDS, "parity", _parity_reward)
    recipe = importlib.import_module(f"configs.{name}")
    assert f"--config=configs/{name}.py" in recipe.get_config.__doc__
    config = shrink(recipe.get_config())
    config.task.reward = "parity"
    config.rl.learning_rate = MECHANISM_LR
    config.update_from_flattened_dict({**TINY_SCALE.get(name, {}), **PREPARE.get(name, lambda _: {})(tmp_path)})
    config_lib.parse(config)
    records = _run_from_sft(config, sft_workdir, str(tmp_path / name))
    for record in records.values():
        if record.get("critic/warmup"):  # a critic warm-up step (PPO): no actor update
            assert "loss/pg" not in record and "critic/vf_loss" in record
            continue
        for key in ("loss/pg", "entropy", "entropy_p50", "cov_logp_adv", "grad_norm"):
            assert key in record, key
    for key in MECHANISMS[name]:
        values = [r[key] for r in records.values() if key in r]
        assert values and max(values) > 0, f"{name}: its mechanism metric {key} is {values or 'never logged'}"
    if recipe.get_config().rl.num_minibatches * recipe.get_config().rl.ppo_epochs > 1:
        # off-policy minibatch updates: the ratio moved (either way), so ratio-based losses differ from plain REINFORCE
        prefix = "" if config.preference.loss == "none" else f"{config.preference.loss}/"  # a pair loss's ratios
        assert any(max(abs(r.get(f"{prefix}ratio_max", 1.0) - 1.0), abs(r.get(f"{prefix}ratio_min", 1.0) - 1.0)) > 1e-3
                   for r in records.values()), name


def test_every_recipe_names_its_mechanism():
    assert set(MECHANISMS) == set(RECIPES)


# recipe -> loss_kwargs that switch its mechanism off (the rest of the loss unchanged)
MECHANISM_OFF = {
    "dapo": dict(clip_high=0.2),  # clip-higher -> symmetric clip
    "cispo": dict(clip_high=1e9),  # truncated IS weight -> untruncated
    "gspo": dict(clip_low=0.99, clip_high=1e9),  # sequence-ratio clip -> none
    "clip_cov": dict(clip_cov_lb=1e8, clip_cov_ub=1e9),  # no token's covariance is in the band: nothing detached
    "kl_cov": dict(ppo_kl_coef=0.0),  # no |log-ratio| penalty
}


@pytest.mark.parametrize("name", sorted(MECHANISM_OFF))
def test_mechanism_changes_the_gradient_off_policy(name):
    """Off-policy (ratios spread around 1, as after a few minibatch updates) the recipe's loss has a gradient that
    differs both from plain REINFORCE's and from the same loss with its mechanism off; on-policy (ratio 1) it equals
    REINFORCE's where the paper's mechanism only acts through the ratio."""
    import jax
    import jax.numpy as jnp

    from rl4llm.rl import registry

    config = importlib.import_module(f"configs.{name}").get_config()
    kwargs = config_lib.parse(config).rl.loss_kwargs
    agg = registry.agg_mode_for(config.rl.loss, config.rl.agg_mode)
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    n, t = 32, 12
    logp = -jnp.abs(jax.random.normal(k1, (n, t)))
    mask = (jnp.arange(t)[None, :] < jax.random.randint(k2, (n, 1), 4, t + 1)).astype(jnp.float32)
    adv = jnp.tile(jnp.array([2.0, -1.5, 1.0, -0.5]), n // 4)
    old_logp = logp + 0.4 * jax.random.normal(k3, (n, t))  # ratios e^{±0.4}: beyond 1 ± 0.28

    def grad(loss_name, old, **loss_kwargs):
        loss_fn = registry.get_policy_loss(loss_name)
        fn = lambda lp: loss_fn(lp, old, adv, mask, agg_mode=agg, key=jax.random.PRNGKey(1), **loss_kwargs)[0]  # noqa: E731
        return np.asarray(jax.grad(fn)(logp))

    recipe = grad(config.rl.loss, old_logp, **kwargs)
    assert not np.allclose(recipe, grad("reinforce", old_logp), atol=1e-6)
    assert not np.allclose(recipe, grad(config.rl.loss, old_logp, **{**kwargs, **MECHANISM_OFF[name]}), atol=1e-6)
    if name in ("dapo", "cispo", "gspo"):  # on-policy these mechanisms are inert: REINFORCE's gradient exactly
        np.testing.assert_allclose(grad(config.rl.loss, logp, **kwargs), grad("reinforce", logp), atol=1e-6)


def test_every_recipe_file_is_tested():
    import pathlib

    from tests.test_hf_train import HF_RECIPES  # recipes on a Hugging Face checkpoint are run there
    from tests.test_multi_turn import AGENT_RECIPES  # multi-turn agent recipes are run there
    from tests.test_multi_turn_preference import AGENT_PREFERENCE_RECIPES  # DMPO / SDPO agent recipes: run there
    from tests.test_relift import RELIFT_RECIPES  # ReLIFT needs groups that all fail: run there
    from tests.test_selection import HINT_RECIPES  # GHPO's hints need groups that all fail: run there
    from tests.test_tasks_train import TASK_RECIPES  # recipes with their own task are run there

    files = {p.stem for p in (pathlib.Path(__file__).parents[1] / "configs").glob("*.py")}
    elsewhere = set(TASK_RECIPES) | set(HF_RECIPES) | set(AGENT_RECIPES) | set(RELIFT_RECIPES) | set(HINT_RECIPES)
    elsewhere |= set(AGENT_PREFERENCE_RECIPES)
    elsewhere |= {"dapo_ladder"}  # rungs: tested below
    assert files - {"__init__", "default"} - elsewhere == set(RECIPES)


def test_dapo_ladder_adds_one_component_per_rung():
    from configs import dapo, dapo_ladder

    rungs = [dapo_ladder.get_config(r) for r in dapo_ladder.RUNGS]
    for rung in rungs:
        config_lib.parse(rung)
    settings = [(r.rl.loss_kwargs.clip_high, r.task.length_shaping, r.rl.agg_mode, r.selection.method) for r in rungs]
    assert settings == [
        (0.2, "none", "seq-mean-token-mean", "uniform"),
        (0.28, "none", "seq-mean-token-mean", "uniform"),
        (0.28, "dapo_overlong", "seq-mean-token-mean", "uniform"),
        (0.28, "dapo_overlong", "token-mean", "uniform"),
        (0.28, "dapo_overlong", "token-mean", "dynamic_sampling"),
    ]
    assert rungs[-1].to_json() == dapo.get_config().to_json()  # the top rung is the DAPO recipe
    assert len({(r.rl.num_minibatches, r.sampling.max_new_tokens, r.rl.learning_rate) for r in rungs}) == 1
    with pytest.raises(ValueError, match="unknown rung"):
        dapo_ladder.get_config("dual_clip")


def test_all_hooks_together_run_without_nans(sft_workdir, tmp_path):
    """ReMax greedy baseline, GBPO targets, sequence TIS, adaptive KL and entropy coefficients, and a
    reference reset every step, in one run."""
    config = shrink(default.get_config())
    config.rl.update(
        dict(
            advantage="remax",
            loss="gbpo",
            tis_cap=2.0,
            tis_level="sequence",
            kl_coef=0.01,
            kl_target=0.1,
            entropy_coef=0.01,
            entropy_target=0.5,
            ref_reset_every=1,
        )
    )
    config_lib.parse(config)
    records = _run_from_sft(config, sft_workdir, str(tmp_path / "hooks"))
    for key in ("greedy_baseline_reward", "is_weight", "kl", "kl_coef", "entropy_coef"):
        assert key in records[1], key
    assert records[1]["ref_reset"] == records[2]["ref_reset"] == 1.0
    assert records[2]["kl"] == 0.0  # the reference was reset to the policy after step 1
    assert records[2]["entropy_coef"] != records[1]["entropy_coef"]  # adapted after step 1


def test_prime_trains_its_prm_online(sft_workdir, tmp_path):
    from configs import prime

    config = shrink(prime.get_config())
    config.prime.learning_rate = 1e-2  # so that the PRM visibly moves in two steps of the tiny job
    records = _run_from_sft(config, sft_workdir, str(tmp_path / "prime"))
    for record in records.values():
        for key in ("prm/loss", "prm/accuracy", "prm/grad_norm", "loss/pg"):
            assert key in record, key
    # step 1: π_φ = π_ref, so every sequence reward is 0 and the cross-entropy is exactly log 2
    assert abs(records[1]["prm/loss"] - math.log(2)) < 1e-6
    assert abs(records[2]["prm/loss"] - math.log(2)) > 1e-4  # not log 2 any more: the PRM was updated


def _even_answers_always_right(completion: str, answer: str) -> float:
    """All-correct groups (accuracy 1, outside PRIME's band) for even answers, about half right for odd ones."""
    return 1.0 if int(answer) % 2 == 0 else float(len(completion) % 2 == 0)


def test_prime_trains_only_on_groups_in_the_accuracy_band(sft_workdir, tmp_path, monkeypatch):
    """The PRIME recipe's accuracy filter: every group the PRM and the policy train on has accuracy in [0.2, 0.8];
    the out-of-band groups completing the batch at the round bound have empty masks and zero advantages."""
    from configs import prime
    from rl4llm import rewards

    monkeypatch.setitem(rewards.REWARDS, "even_answers_always_right", _even_answers_always_right)
    recipe = prime.get_config()
    assert (recipe.selection.method, recipe.selection.acc_low, recipe.selection.acc_high) == ("accuracy_band", 0.2, 0.8)
    config = shrink(recipe)
    config.selection.acc_low = recipe.selection.acc_low  # the recipe's band (shrink widens it for the smoke runs)
    config.task.reward = "even_answers_always_right"
    config.selection.max_gen_rounds = 1  # one round: out-of-band groups must complete the batch
    collect, seen = single_turn.collect, []
    monkeypatch.setattr(single_turn, "collect", lambda *a, **k: seen.append(collect(*a, **k)) or seen[-1])
    shutil.copytree(sft_workdir, tmp_path / "prime_band")
    job.run(config, str(tmp_path / "prime_band"))  # a step with every group masked out logs NaN token stats
    assert len(seen) == RL_STEPS
    b, g = config.rl.num_prompts, config.rl.num_generations
    trained_groups = masked_groups = 0
    for batch in seen:
        mask = np.asarray(batch.batch.completion_mask)
        np.testing.assert_array_equal(batch.prm_batch.completion_mask, mask)  # the PRM sees the same rows
        accuracy = np.asarray(batch.prm_batch.labels).reshape(b, g).mean(axis=1)
        trained = mask.reshape(b, -1).any(axis=1)
        in_band = (accuracy >= 0.2) & (accuracy <= 0.8)
        np.testing.assert_array_equal(trained, in_band)
        assert not np.any(np.asarray(batch.batch.advantages).reshape(b, -1)[~trained])
        assert batch.host_metrics["selection/filled_with_dropped"] == np.sum(~trained)
        trained_groups, masked_groups = trained_groups + trained.sum(), masked_groups + (~trained).sum()
    assert trained_groups > 0 and masked_groups > 0  # both kinds of group occurred


def test_ppo_shared_trunk_with_minibatches_runs_without_nans(sft_workdir, tmp_path):
    """PPO with a value head on the policy's trunk (one joint step), critic warm-up, 2 minibatches x 2 epochs."""
    from configs import ppo_arithmetic

    config = shrink(ppo_arithmetic.get_config())
    config.critic.shared_trunk = True
    config.rl.num_minibatches = 2
    config.rl.ppo_epochs = 2
    config_lib.parse(config)
    records = _run_from_sft(config, sft_workdir, str(tmp_path / "ppo_shared"))
    assert records[1]["critic/warmup"] == 1.0 and "loss/pg" not in records[1]
    for key in ("loss/pg", "critic/vf_loss", "critic/vf_clip_frac", "critic/vf_explained_var", "critic/values_mean"):
        assert key in records[2], key


def test_every_reproduction_arm_is_a_valid_config():
    """experiments/reproduce.py: each arm x seed of every study builds a config that validation accepts."""
    from experiments import reproduce

    for name, study in reproduce.STUDIES.items():
        for arm in study.arms:
            config = reproduce.run_config(study, arm, study.seeds[-1], "/root", name)
            if study.arms[arm]().reward_model.checkpoint:  # the study's RM of this seed, not trained here
                rm_dir = reproduce.reward_model_dir("/root", name, study.arms[arm]().reward_model.checkpoint[3:], 2)
                assert config.reward_model.checkpoint == os.path.join(rm_dir, "reward_model"), (name, arm)
                config.reward_model.checkpoint = ""  # (and co-training needs one)
                config.reward_model.co_train = False
            if study.arms[arm]().task.step_reward_model:  # the study's PRM of this seed, not trained here
                prm_dir = reproduce.reward_model_dir("/root", name, study.arms[arm]().task.step_reward_model[3:], 2)
                assert config.task.step_reward_model == os.path.join(prm_dir, "reward_model"), (name, arm)
                config.task.step_reward_model = ""  # the judge's labels in its place
            config_lib.parse(config)
            assert config.rl.steps == study.rl_steps and config.seed == study.seeds[-1], (name, arm)
        for rm_name in study.reward_models:
            rm_config = reproduce.reward_model_config(study, rm_name, 1, "/root")
            assert rm_config.seed == 1, (name, rm_name)
            for field in ("sample_from", "init_from"):  # the warm start, not trained here
                assert rm_config.reward_model[field] in ("", reproduce.warm_start_dir("/root")), (name, rm_name)
            rm_config.reward_model.init_from = ""
            config_lib.parse(rm_config)


def _write_run(workdir: str, stage: str, records: dict) -> None:
    """A finished run's metrics.jsonl (`records`: step -> metrics) and summary.json, written by the run's own sinks."""
    writer = metrics_lib.MetricsWriter(workdir)
    for step, metrics in records.items():
        writer.write(stage, step, metrics, console=False)
    writer.close()
    with open(os.path.join(workdir, "summary.json"), "w", encoding="utf-8") as f:
        f.write("{}")


def test_reproduce_collect_keeps_earlier_runs_of_the_same_warm_start_and_refuses_another(tmp_path):
    """collect(): runs under --root replace their records; records of runs not under --root stay in the results
    file when their step 0 equals this root's warm start, and a different warm start is an error, not a mix."""
    from experiments import reproduce
    from rl4llm.analysis import results

    root, path = str(tmp_path / "root"), str(tmp_path / "dapo_ladder.jsonl")
    warm = {"eval/greedy_accuracy": 0.4453125, "eval/pass@1": 0.2915}
    _write_run(reproduce.warm_start_dir(root), "sft", {450: warm})
    earlier = [{"arm": "grpo", "seed": 0, "step": 0, **warm}, {"arm": "grpo", "seed": 0, "step": 5, "reward": 0.5},
               {"arm": "overlong", "seed": 0, "step": 0, **warm}, {"arm": "overlong", "seed": 0, "step": 5, "reward": 0.1}]
    results.write_results(path, earlier)
    _write_run(reproduce.run_dir(root, "dapo_ladder", "overlong", 0), "rl", {5: {"reward": 0.7, "other": 1.0}})

    assert reproduce.collect("dapo_ladder", root, path) == 4
    by_arm = {(r["arm"], r["step"]): r for r in results.read_results(path)}
    assert by_arm[("grpo", 5)]["reward"] == 0.5  # kept from the earlier file
    assert by_arm[("overlong", 5)]["reward"] == 0.7 and "other" not in by_arm[("overlong", 5)]  # replaced by the run
    assert by_arm[("overlong", 0)]["eval/greedy_accuracy"] == pytest.approx(0.4453125, rel=1e-5)

    results.write_results(path, [dict(r, **{"eval/greedy_accuracy": 0.574}) if r["step"] == 0 else r for r in earlier])
    with pytest.raises(ValueError, match="grpo seed 0 starts from another warm start"):
        reproduce.collect("dapo_ladder", root, path)
