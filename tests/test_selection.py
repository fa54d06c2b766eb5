"""Prompt selection, rollout replay, budget allocation, hints and curriculum on hand-made tables."""

import dataclasses
import itertools
import math
import os
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import bots as bots_recipe
from configs import default
from configs import dots as dots_recipe
from configs import dynamic_sampling as dynamic_sampling_recipe
from rl4llm import rewards
from rl4llm.data import allocation
from rl4llm.data import arithmetic
from rl4llm.data import curriculum
from rl4llm.data import replay
from rl4llm.data import selection
from rl4llm.rl import losses
from rl4llm.train import checkpointing
from rl4llm import config as config_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import job
from rl4llm.train import prompt_selection
from rl4llm.train.rows import Rows
from tests.test_train import tiny_config


# ------------------------------------------------------------------------ dynamic sampling / band filter


def test_dynamic_sampling_keeps_groups_with_unequal_rewards():
    scores = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [0.5, 0.5, 0.5, 0.5], [0.2, 0.2, 0.3, 0.2]])
    np.testing.assert_array_equal(selection.keep_nonuniform_groups(scores), [False, False, True, False, True])


def test_accuracy_band_is_inclusive():
    # accuracies 0, 0.2, 0.4, 0.8, 1.0 over 5 rollouts
    correct = np.array([[0] * 5, [1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1] * 5])
    np.testing.assert_array_equal(selection.keep_accuracy_band(correct, 0.2, 0.8), [False, True, True, True, False])
    np.testing.assert_array_equal(selection.keep_accuracy_band(correct, 0.3, 0.5), [False, False, True, False, False])


def test_refill_takes_kept_groups_in_round_order():
    rounds = [np.array([True, False, False, True]), np.array([False, True, True, True])]
    chosen, kept = selection.choose_groups(rounds, 3)
    assert chosen == [(0, 0), (0, 3), (1, 1)] and kept == 3


def test_refill_at_the_round_bound_completes_with_dropped_groups_of_the_latest_round():
    rounds = [np.array([False, True, False]), np.array([False, False, True])]
    chosen, kept = selection.choose_groups(rounds, 3)
    # 2 kept; one dropped group from round 1 (the latest) fills the batch
    assert chosen == [(0, 1), (1, 2), (1, 0)] and kept == 2


# -------------------------------------------------------------------------------------------- DOTS


def test_dots_prediction_and_near_zero_temperature_picks_closest_to_half():
    success = np.array([0.9, selection.UNMEASURED, 0.1, 0.55, 0.3, 1.0], np.float32)
    p_hat = selection.predicted_success(success)
    # unmeasured -> mean of measured (0.9 + 0.1 + 0.55 + 0.3 + 1.0) / 5 = 0.57
    np.testing.assert_allclose(p_hat, [0.9, 0.57, 0.1, 0.55, 0.3, 1.0], rtol=1e-6)
    scores = selection.dots_scores(p_hat)
    np.testing.assert_allclose(scores, [-0.4, -0.07, -0.4, -0.05, -0.2, -0.5], rtol=1e-5)
    for seed in range(5):
        picked = selection.softmax_sample_without_replacement(scores, 3, 1e-3, np.random.default_rng(seed))
        assert list(picked) == [3, 1, 4]  # |p - 0.5| = 0.05, 0.07, 0.2


def test_softmax_sampling_matches_its_distribution():
    # first draw ~ softmax(s / tau): probabilities e^0, e^-1, e^-2 normalised (tau = 1)
    scores = np.array([0.0, -1.0, -2.0])
    gen = np.random.default_rng(0)
    firsts = [selection.softmax_sample_without_replacement(scores, 2, 1.0, gen)[0] for _ in range(4000)]
    expected = np.exp(scores) / np.exp(scores).sum()
    np.testing.assert_allclose(np.bincount(firsts, minlength=3) / 4000, expected, atol=0.03)


def test_record_success_keeps_the_last_measurement():
    state = selection.init_state(4)
    state = selection.record_success(state, np.array([1, 3]), np.array([0.25, 1.0]))
    state = selection.record_success(state, np.array([1]), np.array([0.75]))
    np.testing.assert_array_equal(state.success, np.float32([-1, 0.75, -1, 1.0]))
    np.testing.assert_array_equal(state.visits, [0, 2, 0, 1])


# -------------------------------------------------------------------------------------------- BOTS


def test_bots_without_decay_or_implicit_evidence_is_conjugate_counting():
    state = selection.init_state(3)
    state = selection.bots_update(state, np.array([0, 2]), np.array([0.75, 0.0]), 4, decay=0.0, implicit_weight=0.0)
    # prompt 0: 3 successes, 1 failure; prompt 2: 0 / 4; prompt 1 untouched
    np.testing.assert_allclose(state.alpha, [1 + 3, 1, 1 + 0])
    np.testing.assert_allclose(state.beta, [1 + 1, 1, 1 + 4])


def test_bots_update_with_decay_and_implicit_evidence_by_hand():
    state = selection.init_state(2).replace(
        alpha=np.float32([3.0, 5.0]), beta=np.float32([2.0, 1.0]), capability=np.float32(0.5)
    )
    # lambda = 0.1, rho = 0.2, m = 4; prompt 0 rolled out with pass 0.5
    # c_hat = (0.5 - 0) / (1 - 0 + 1e-6); c = 0.9*0.5 + 0.1*c_hat = 0.5 (to 1e-7); p~_1 = c = 0.5
    # alpha_0 = 0.9*3 + 0.1*1 + 0.8*2 + 0.2*4*0.5 = 2.7 + 0.1 + 1.6 + 0.4 = 4.8; beta_0 = 1.8+0.1+1.6+0.4 = 3.9
    # alpha_1 = 0.9*5 + 0.1 + 0 + 0.2*4*0.5 = 5.0; beta_1 = 0.9*1 + 0.1 + 0.4 = 1.4
    new = selection.bots_update(state, np.array([0]), np.array([0.5]), 4, decay=0.1, implicit_weight=0.2)
    np.testing.assert_allclose(new.alpha, [4.8, 5.0], rtol=1e-5)
    np.testing.assert_allclose(new.beta, [3.9, 1.4], rtol=1e-5)
    np.testing.assert_allclose(new.capability, 0.5, rtol=1e-5)


def test_bots_full_decay_is_prior_plus_current_evidence_and_interpolation_ends():
    state = selection.init_state(2).replace(alpha=np.float32([9.0, 9.0]), beta=np.float32([9.0, 9.0]))
    new = selection.bots_update(state, np.array([1]), np.array([0.25]), 8, decay=1.0, implicit_weight=0.0)
    np.testing.assert_allclose(new.alpha, [1.0, 1.0 + 2.0])
    np.testing.assert_allclose(new.beta, [1.0, 1.0 + 6.0])
    # c -> p~ = weak (c = 0) or strong (c = 1): with momentum 0 and pass == strong of the batch, c = 1
    weak, strong = np.array([0.2, 0.1]), np.array([0.6, 0.9])
    one = selection.bots_update(state, np.array([0]), np.array([0.6]), 1, decay=1.0, implicit_weight=1.0,
                                weak=weak, strong=strong, capability_momentum=0.0)
    np.testing.assert_allclose(one.capability, 1.0, rtol=1e-5)
    np.testing.assert_allclose(one.alpha[1], 1.0 + 0.9, rtol=1e-5)  # p~_1 = strong_1
    zero = selection.bots_update(state, np.array([0]), np.array([0.2]), 1, decay=1.0, implicit_weight=1.0,
                                 weak=weak, strong=strong, capability_momentum=0.0)
    np.testing.assert_allclose(zero.alpha[1], 1.0 + 0.1, atol=1e-5)  # p~_1 = weak_1


def test_bots_thompson_selection_prefers_prompts_near_the_target():
    # Tight posteriors at means 0.02, 0.5, 0.98, 0.45 and one flat Beta(1, 1)
    alpha = np.float32([2, 500, 980, 450, 1])
    beta = np.float32([98, 500, 20, 550, 1])
    state = selection.init_state(5).replace(alpha=alpha, beta=beta)
    counts = np.zeros(5)
    for seed in range(200):
        for i in selection.bots_select(state, 2, np.random.default_rng(seed)):
            counts[i] += 1
    assert counts[1] == 200 and counts[0] == counts[2] == 0  # near 0.5 always, the extremes never
    assert counts[3] > counts[4] > 0  # 0.45 beats a flat prior, which is sometimes closest by chance


# ------------------------------------------------------------------------------------------- replay


def _groups(b, g=2, t=3, start=0):
    ids = np.arange(start, start + b)
    tokens = np.broadcast_to(ids[:, None, None], (b, g, t)).astype(np.int32)
    return dict(
        hint_chars=np.zeros(b, np.int32),
        completion_tokens=tokens,
        completion_mask=np.ones((b, g, t), np.float32),
        behaviour_logp=-np.ones((b, g, t), np.float32) * ids[:, None, None],
        scores=np.tile(np.float32([0, 1]), (b, 1)),
    )


def test_replay_is_fifo_bounded_and_keeps_one_group_per_prompt():
    buf = replay.init_replay(3, 2, 3)
    buf = replay.insert(buf, np.array([10, 11]), **_groups(2, start=10))
    assert replay.size(buf) == 2
    buf = replay.insert(buf, np.array([11]), **_groups(1, start=50))  # prompt 11 again: replaces its group
    assert replay.size(buf) == 2
    assert buf.completion_tokens[np.flatnonzero(buf.prompt_ids == 11)[0], 0, 0] == 50
    buf = replay.insert(buf, np.array([12, 13]), **_groups(2, start=12))  # full: evicts the oldest (10)
    assert replay.size(buf) == 3 and sorted(buf.prompt_ids.tolist()) == [11, 12, 13]
    assert len(set(buf.prompt_ids.tolist())) == 3
    slots = replay.sample_slots(buf, 2, np.random.default_rng(0))
    assert len(set(slots.tolist())) == 2
    with pytest.raises(ValueError, match="holds 3 groups < 4"):
        replay.sample_slots(buf, 4, np.random.default_rng(0))


def test_fresh_groups_per_step():
    assert replay.num_fresh(8, 0.5, 0) == 8  # empty buffer: all fresh
    assert replay.num_fresh(8, 0.5, 3) == 8
    assert replay.num_fresh(8, 0.5, 4) == 4


def test_replay_clip_is_the_ppo_loss_with_the_learner_is_weights():
    """DOTS loss max(-A r, -A clip(r, r_old(1-e), r_old(1+e))), r = pi/mu_b, r_old = pi_old/mu_b, equals the PPO
    clip loss weighted by the TIS weights exp(old_logp - sampler_logp) (uncapped) that replayed rows get."""
    logp = jnp.log(jnp.array([[0.5, 0.2, 0.9], [0.3, 0.6, 0.05]]))  # pi_theta
    old = jnp.log(jnp.array([[0.4, 0.3, 0.5], [0.3, 0.4, 0.1]]))  # pi_old
    behaviour = jnp.log(jnp.array([[0.2, 0.6, 0.5], [0.5, 0.2, 0.1]]))  # mu_b
    adv = jnp.array([1.0, -2.0])
    mask = jnp.ones((2, 3))
    eps = 0.2
    r, r_old = jnp.exp(logp - behaviour), jnp.exp(old - behaviour)
    a = adv[:, None]
    dots = jnp.maximum(-a * r, -a * jnp.clip(r, r_old * (1 - eps), r_old * (1 + eps)))
    # Hand value of one token: row 0, t 0: r = 2.5, r_old = 2, clip to [1.6, 2.4] -> max(-2.5, -2.4) = -2.4
    np.testing.assert_allclose(dots[0, 0], -2.4, rtol=1e-6)
    weights = losses.truncated_is_weights(old, behaviour, mask, cap=1e9)
    loss, _ = losses.ppo_clip(logp, old, adv, mask, clip_low=eps, clip_high=eps, dual_clip=None,
                              agg_mode="token-mean", is_weights=weights)
    np.testing.assert_allclose(loss, dots.mean(), rtol=1e-6)


# ---------------------------------------------------------------------------------------- knapsack


def test_knapsack_value_by_hand():
    # v(2, .5) = (1 - .25 - .25)*.5*.25 = .0625; v(3, .1) = (1 - .001 - .729)*.1*.81 = .02187
    np.testing.assert_allclose(allocation.knapsack_value(2, 0.5), 0.0625)
    np.testing.assert_allclose(allocation.knapsack_value(3, 0.1), 0.02187, rtol=1e-9)
    assert allocation.knapsack_value(10, 0.0) == allocation.knapsack_value(10, 1.0) == 0.0


def test_knapsack_hand_optimum():
    # Two prompts p = 0.5 and 2 extras: (1,1) -> 2 v(3,.5) = 2*.09375 = .1875 beats (2,0) -> v(4,.5)+v(2,.5)
    # = .109375 + .0625 = .171875
    np.testing.assert_array_equal(allocation.solve_knapsack(np.array([0.5, 0.5]), 2, min_n=2, max_extra=10), [1, 1])
    # One extra for p = 0.5 (gain v(3,.5)-v(2,.5) = .03125) or p = 0.1 (gain .02187 - .01458 = .00729): the former
    np.testing.assert_array_equal(allocation.solve_knapsack(np.array([0.1, 0.5]), 1, min_n=2, max_extra=10), [0, 1])


def test_knapsack_dp_matches_brute_force():
    gen = np.random.default_rng(0)
    for _ in range(5):
        p = gen.uniform(0.05, 0.95, size=3)
        extras, max_extra = 7, 4
        best = max(
            (ks for ks in itertools.product(range(max_extra + 1), repeat=3) if sum(ks) == extras),
            key=lambda ks: sum(allocation.knapsack_value(2 + k, pi) for k, pi in zip(ks, p)),
        )
        got = allocation.solve_knapsack(p, extras, min_n=2, max_extra=max_extra)
        value = lambda ks: sum(allocation.knapsack_value(2 + k, pi) for k, pi in zip(ks, p))  # noqa: E731
        np.testing.assert_allclose(value(got), value(best), rtol=1e-12)
        assert got.sum() == extras


def test_allocate_sums_to_budget_and_extremes_get_min_n():
    # budget 4 prompts x 8 = 32; unseen -> 8, p = 0 and p = 1 -> 2; p = 0.5 and 0.3 share 32 - 8 - 2 - 2 - 2 - 2 = 16
    # extras by the DP with max_n = 16: coverage costs int(ln .1/ln .5) = 3 and int(ln .1/ln .7) = 6 need
    # (3-2) + (6-2) = 5 < 16, so the fallback gives them 3 and 6 and the surplus 11 to the p = 0 prompt.
    p = np.array([-1.0, 0.0, 1.0, 0.5, 0.3])
    counts = allocation.allocate(p, 32, default_n=8, min_n=2, max_n=16)
    np.testing.assert_array_equal(counts, [8, 2 + 11, 2, 3, 6])
    # Tight budget 20: remaining 20 - 16 = 4 < 5 needed -> the knapsack splits 4 extras between p = .5 and .3
    counts = allocation.allocate(p, 20, default_n=8, min_n=2, max_n=16)
    assert counts.sum() == 20 and counts[1] == counts[2] == 2 and counts[0] == 8
    extras = counts[3:] - 2
    brute = max(((a, 4 - a) for a in range(5)),
                key=lambda ks: allocation.knapsack_value(2 + ks[0], 0.5) + allocation.knapsack_value(2 + ks[1], 0.3))
    np.testing.assert_array_equal(extras, brute)
    assert allocation.coverage_cost(0.5, 64) == 3 and allocation.coverage_cost(0.1, 64) == math.floor(
        math.log(0.1) / math.log(0.9))


# ------------------------------------------------------------------------------------ hints, curriculum


def test_hints_grow_and_never_reveal_the_answer():
    ex = arithmetic.render_problem([37, 48, 19], ["+", "-"])  # 37+48=85;85-19=66;#66 (21 chars)
    assert ex.solution == "37+48=85;85-19=66;#66"
    chars = [curriculum.hint_chars(ex.solution, ex.answer, f) for f in (0.25, 0.5, 0.75, 1.0)]
    assert chars == [5, 10, 16, 19]  # round(5.25), round(10.5), round(15.75); 1.0 stops before the final "66"
    # round(10.5) = 10 (round half to even); "37+48=85;" is 9 characters
    assert curriculum.hinted_prompt(ex.prompt, ex.solution, 10) == "37+48-19=37+48=85;8"
    assert ex.solution[:19] == "37+48=85;85-19=66;#"  # the longest hint ends before the answer


def _hand_rows(main, tag):
    """Rows of one generate call: every token is `tag` (which call made the row), rewards `main`."""
    n = len(main)
    main = np.asarray(main, np.float32)
    return Rows(prompt_tokens=np.full((n, 1), tag, np.int32), prompt_mask=np.ones((n, 1), bool),
                completion_tokens=np.full((n, 2), tag, np.int32), completion_mask=np.ones((n, 2), bool),
                logprobs=np.zeros((n, 2), np.float32), finished=np.ones(n, bool), scores=main, main=main,
                components=main[:, None], hint_chars=np.zeros(n, np.int32), fresh=np.ones(n, bool),
                off_policy=np.zeros(n, bool), hint_tokens=np.zeros(n, np.int32))


def test_ghpo_hints_replace_only_all_fail_groups_at_the_first_level_that_solves():
    """GHPO (hkgc-1/GHPO, ghpo_trainer.py): a group with a correct rollout is never regenerated; an all-fail group is
    regenerated with 25 %, then 50 %, then 75 % of its reference solution appended to its prompt and replaced by the
    first hinted group with a correct rollout; one no level solves stays as it was."""
    c = tiny_config()
    c.rl.num_prompts, c.rl.num_generations = 3, 2
    c.selection.hints = True
    config = config_lib.parse(c)
    selector = prompt_selection.Selector(config, None, data_offset=0, pad_id=0, encode=None, tokenize=None,
                                         decode=None)
    examples = [arithmetic.render_problem([37, 48, 19], ["+", "-"]),  # solved unhinted: never touched
                arithmetic.render_problem([12, 30, 7], ["-", "+"]),  # solved once half of the solution is given
                arithmetic.render_problem([5, 6, 2], ["+", "+"])]  # never solved
    needs = {ex.prompt: f for ex, f in zip(examples, (0.0, 0.5, 2.0))}  # hint fraction each example needs
    calls = []

    def generate(prompts, answers, counts, key, prefixes, traces=None, solutions=None):
        del answers, key, traces
        tag = len(calls) + 1
        calls.append(list(zip(prompts, prefixes)))
        main = []
        for prompt, prefix, solution, count in zip(prompts, prefixes, solutions, counts):
            base = prompt[: len(prompt) - len(prefix)]
            assert prompt == curriculum.hinted_prompt(base, solution, len(prefix))  # the hint is the prefix
            solved = len(prefix) >= len(solution) * needs[base] - 0.5
            main += [0.0] * (count - 1) + [float(solved)]
        return _hand_rows(main, tag), {}

    rows, metrics = selector.generate_groups(examples, jax.random.key(0), generate)
    prefixes = [[len(p) for _, p in call] for call in calls]
    # the unhinted round, then the two failing groups at 25 % (power-of-two slots) and at 50 %: the third group
    # alone (padded to 1 slot) at 75 %, where it fails again
    third = examples[2].solution
    assert prefixes == [[0, 0, 0],
                        [curriculum.hint_chars(examples[1].solution, examples[1].answer, 0.25),
                         curriculum.hint_chars(third, examples[2].answer, 0.25)],
                        [curriculum.hint_chars(examples[1].solution, examples[1].answer, 0.5),
                         curriculum.hint_chars(third, examples[2].answer, 0.5)],
                        [curriculum.hint_chars(third, examples[2].answer, 0.75)]]
    assert [p.startswith(examples[1].prompt) for p, _ in calls[2]] == [True, False]
    # group 0 from the unhinted call, group 1 from the 50 % call (tag 3), group 2 unhinted (all fail)
    np.testing.assert_array_equal(rows.completion_tokens[:, 0], [1, 1, 3, 3, 1, 1])
    np.testing.assert_array_equal(rows.hint_chars, [0, 0] + [prefixes[2][0]] * 2 + [0, 0])
    assert metrics == {"selection/hint_candidates": 2.0, "selection/hint_solved": 1.0,
                       "selection/hint_rollouts": 2.0 * (2 + 2 + 1), "selection/hint_overflow": 0.0}


def test_irt_fit_recovers_the_difficulty_and_its_hint_reaches_the_target():
    """SEELE's item response curve: from noise-free counts of a known curve the fitted b is the curve's (to the
    grid's 1e-3) and a(h*) = the target; one round at h = 0 with s of n correct gives b = -logit(s/n)/k by hand."""
    for b, k, c in ((0.37, 10.0, 0.1), (-0.2, 4.0, 0.0), (0.8, 25.0, 0.05)):
        h = np.array([[0.0, 0.3, 0.6, 0.9]])
        n = np.full((1, 4), 1000.0)
        b_hat = curriculum.irt_difficulty(h, n * curriculum.irt_accuracy(h, b, k, c), n, k, c)
        assert abs(b_hat[0] - b) <= 1e-3
        for target in (0.5, 0.7):
            rate = curriculum.irt_hint(np.float64(b), k, c, target)
            if 0.0 < rate < 1.0:
                assert curriculum.irt_accuracy(rate, b, k, c) == pytest.approx(target)
    # 1 of 4 at h = 0 (k = 10, c = 0): sigma(-10 b) = 1/4 -> b = ln 3 / 10 = 0.10986; the 0.5 hint is b itself
    b_hat = curriculum.irt_difficulty([[0.0]], [[1]], [[4]], 10.0, 0.0)
    assert b_hat[0] == pytest.approx(math.log(3) / 10, abs=1e-3)
    assert curriculum.irt_hint(b_hat, 10.0, 0.0, 0.5)[0] == pytest.approx(math.log(3) / 10, abs=1e-3)
    # never solved -> the whole hint; always solved -> none; fewer successes at the same hints -> harder
    never, always = curriculum.irt_difficulty([[0.0], [0.0]], [[0], [4]], [[4], [4]], 10.0, 0.0)
    assert curriculum.irt_hint(np.array([never, always]), 10.0, 0.0, 0.5).tolist() == [1.0, 0.0]
    hard, easy = curriculum.irt_difficulty([[0.0, 0.5], [0.0, 0.5]], [[0, 1], [0, 3]], [[4, 4], [4, 4]], 10.0, 0.0)
    assert hard > easy
    # all-fail without a hint, all solved with the whole solution: the fit puts b between them, where a = 0.5
    (b_hat,) = curriculum.irt_difficulty([[0.0, 1.0]], [[0, 4]], [[4, 4]], 10.0, 0.0)
    assert b_hat == pytest.approx(0.5, abs=1e-3)


def test_seele_rounds_hint_each_problem_at_its_fitted_rate_and_group_every_round():
    """SEELE: round 1 without a hint; round 2 appends the prefix at the hint rate irt_hint(irt_difficulty(round 1))
    of each problem; each group holds its problem's rollouts of both rounds, each row with its own hint."""
    c = tiny_config()
    c.rl.num_prompts, c.rl.num_generations = 2, 4
    c.selection.update(hints=True, hint_schedule="irt", hint_rounds=2, irt_discrimination=10.0, irt_guess=0.0)
    config = config_lib.parse(c)
    selector = prompt_selection.Selector(config, None, data_offset=0, pad_id=0, encode=None, tokenize=None,
                                         decode=None)
    examples = [arithmetic.render_problem([37, 48, 19], ["+", "-"]),  # solved 1 of 2 times unhinted
                arithmetic.render_problem([5, 6, 2], ["+", "+"])]  # never unhinted
    calls = []

    def generate(prompts, answers, counts, key, prefixes, traces=None, solutions=None):
        del answers, key, traces, solutions
        assert list(counts) == [2, 2]
        calls.append([len(p) for p in prefixes])
        tag = len(calls)
        # round 1: problem 0 one of two, problem 1 none; round 2 (hinted): every rollout right
        main = [0.0, 1.0, 0.0, 0.0] if tag == 1 else [1.0] * 4
        for prompt, prefix, ex in zip(prompts, prefixes, examples):
            assert prompt == curriculum.hinted_prompt(ex.prompt, ex.solution, len(prefix))
        return _hand_rows(main, tag), {"reward/extra": float(tag)}

    rows, metrics = selector.generate_groups(examples, jax.random.key(0), generate)
    # by hand: problem 0, 1 of 2 at h = 0 -> sigma(-10 b) = 1/2 -> b = 0 -> h* = 0 (no hint); problem 1, 0 of 2 ->
    # b = 3 (the grid's top) -> h* = 1 -> the whole solution but its answer
    second = [0, curriculum.hint_chars(examples[1].solution, examples[1].answer, 1.0)]
    assert calls == [[0, 0], second]
    np.testing.assert_array_equal(rows.completion_tokens[:, 0], [1, 1, 2, 2, 1, 1, 2, 2])
    np.testing.assert_array_equal(rows.hint_chars, [0, 0, 0, 0, 0, 0, second[1], second[1]])
    np.testing.assert_array_equal(rows.main, [0, 1, 1, 1, 0, 0, 1, 1])
    assert metrics == {"reward/extra": 1.5, "selection/hint_rate": 0.5, "selection/hinted_frac": 0.5,
                       "selection/unhinted_accuracy": 0.25, "selection/hinted_accuracy": 1.0,
                       "selection/hint_overflow": 0.0}


def _char_encode(prompts):
    """Left-padded character codes of `prompts` (pad 0) and their mask: a tokenizer one can check by hand."""
    width = max(len(p) for p in prompts)
    tokens = np.array([[0] * (width - len(p)) + [ord(ch) for ch in p] for p in prompts], np.int32)
    return tokens, tokens != 0


def test_guide_trains_a_hinted_rollout_as_the_unhinted_prompts_response():
    """Guide (`hints.hint_in_completion`): a row sampled after prompt + hint becomes prompt -> hint + its sampled
    tokens; the hint's tokens are off-policy with behaviour log-prob 0, the sampled ones keep theirs; a row whose
    hint + sampled tokens exceed the budget keeps no trained token."""
    from rl4llm.train import hints
    from rl4llm.train import rows as rows_lib

    t = 6
    sampled = np.array([[11, 12, 0, 0, 0, 0], [21, 22, 23, 0, 0, 0], [31, 0, 0, 0, 0, 0], [41, 42, 43, 44, 0, 0]])
    lengths = np.array([2, 3, 1, 4])
    logprobs = -np.arange(1, 25, dtype=np.float32).reshape(4, t) / 10
    rows = dataclasses.replace(_hand_rows([1.0, 0.0, 1.0, 1.0], 9), completion_tokens=sampled.astype(np.int32),
                               completion_mask=np.arange(t) < lengths[:, None], logprobs=logprobs,
                               hint_chars=np.array([2, 2, 3, 3], np.int32))
    placed, overflow = hints.hint_in_completion(rows, ["1+2=", "7-3="], ["ab", "xyz"], encode=_char_encode,
                                                tokenize=lambda text: [ord(ch) for ch in text], pad_id=0)
    a, b, x, y, z = (ord(ch) for ch in "abxyz")
    np.testing.assert_array_equal(placed.completion_tokens, [[a, b, 11, 12, 0, 0], [a, b, 21, 22, 23, 0],
                                                             [x, y, z, 31, 0, 0], [0] * 6])
    np.testing.assert_array_equal(placed.completion_mask.sum(1), [4, 5, 4, 0])  # 3 + 4 > 6: no trained token
    assert overflow == 1
    np.testing.assert_array_equal(placed.hint_tokens, [2, 2, 3, 0])
    np.testing.assert_array_equal(placed.logprobs[0], [0, 0, logprobs[0, 0], logprobs[0, 1], 0, 0])
    np.testing.assert_array_equal(placed.logprobs[2], [0, 0, 0, logprobs[2, 0], 0, 0])
    np.testing.assert_array_equal(placed.prompt_tokens, np.repeat(_char_encode(["1+2=", "7-3="])[0], 2, axis=0))
    np.testing.assert_array_equal(rows_lib.off_policy_tokens(placed),
                                  [[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [0] * 6])
    # rewards, hints and the rest are the rows' own
    np.testing.assert_array_equal(placed.main, rows.main)
    np.testing.assert_array_equal(placed.hint_chars, rows.hint_chars)
    # an off-policy trace row is off-policy at every valid token
    trace = dataclasses.replace(rows, off_policy=np.array([False, True, False, False]))
    assert rows_lib.off_policy_tokens(trace)[1].tolist() == [1, 1, 1, 0, 0, 0]


def test_ghpo_hinted_groups_replace_their_group_unhinted_under_guide():
    """With selection.hint_placement='completion' a solved hinted group replaces the all-fail one as the unhinted
    prompt's rows, the hint first in each completion; the group left unsolved keeps its unhinted rows."""
    c = tiny_config()
    c.rl.num_prompts, c.rl.num_generations = 2, 2
    c.rl.loss = "luffy"
    c.selection.update(hints=True, hint_fractions=(0.5,), hint_placement="completion")
    config = config_lib.parse(c)
    selector = prompt_selection.Selector(config, None, data_offset=0, pad_id=0, encode=_char_encode,
                                         tokenize=lambda text: [ord(ch) for ch in text], decode=None)
    examples = [arithmetic.render_problem([12, 30, 7], ["-", "+"]), arithmetic.render_problem([5, 6, 2], ["+", "+"])]

    def generate(prompts, answers, counts, key, prefixes, traces=None, solutions=None):
        del answers, key, traces, solutions
        main = [float(bool(p) and i == 0) for i, p in enumerate(prefixes) for _ in range(int(counts[i]))]
        n = len(main)  # two sampled tokens (5) in a budget of 16
        rows = dataclasses.replace(_hand_rows(main, 5), completion_tokens=np.pad(np.full((n, 2), 5, np.int32),
                                                                                  ((0, 0), (0, 14))),
                                   completion_mask=np.arange(16)[None, :].repeat(n, 0) < 2,
                                   logprobs=np.zeros((n, 16), np.float32))
        rows.prompt_tokens, rows.prompt_mask = (np.repeat(x, 2, axis=0) for x in _char_encode(prompts))
        return rows, {}

    rows, metrics = selector.generate_groups(examples, jax.random.key(0), generate)
    hint = examples[0].solution[:curriculum.hint_chars(examples[0].solution, examples[0].answer, 0.5)]
    assert metrics["selection/hint_solved"] == 1.0 and metrics["selection/hint_overflow"] == 0.0
    prompts = ["".join(chr(v) for v in row if v) for row in rows.prompt_tokens]
    assert prompts == [examples[0].prompt] * 2 + [examples[1].prompt] * 2  # no hint in any trained prompt
    for r in (0, 1):
        k = len(hint)
        assert rows.hint_tokens[r] == k and "".join(chr(v) for v in rows.completion_tokens[r, :k]) == hint
        np.testing.assert_array_equal(rows.completion_tokens[r, k:k + 2], [5, 5])  # then the sampled tokens
    np.testing.assert_array_equal(rows.hint_tokens[2:], [0, 0])


def test_arithmetic_curriculum_schedule():
    cfg = arithmetic.ArithmeticConfig(min_operands=4, max_operands=4, max_value=9)
    first = curriculum.arithmetic_at_step(cfg, 0, start_operands=2, start_max_value=3, steps=10)
    assert (first.min_operands, first.max_operands, first.max_value) == (2, 2, 3)
    mid = curriculum.arithmetic_at_step(cfg, 5, start_operands=2, start_max_value=3, steps=10)
    assert (mid.min_operands, mid.max_operands, mid.max_value) == (3, 3, 6)
    last = curriculum.arithmetic_at_step(cfg, 12, start_operands=2, start_max_value=3, steps=10)
    assert last == cfg
    examples = arithmetic.source(first).train_examples(0, 16)
    assert all(e.prompt.count("+") + e.prompt.count("-") == 1 for e in examples)
    assert all(max(int(x) for x in e.prompt[:-1].replace("-", "+").split("+")) <= 3 for e in examples)


# ------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "updates, message",
    [
        ({"selection.method": "dotz"},
         "config.selection.method='dotz': unknown; allowed: accuracy_band, adaptive_difficulty, bots, dots"),
        ({"selection.acc_low": 0.9}, "config.selection.acc_low=0.9: must be <= config.selection.acc_high=0.8"),
        ({"selection.max_gen_rounds": 0}, "config.selection.max_gen_rounds=0: must be an integer >= 1"),
        ({"selection.method": "dots", "selection.replay_capacity": 64}, "config.rl.tis_cap=0: replayed rollouts"),
        ({"selection.method": "uniform", "selection.replay_capacity": 64, "rl.tis_cap": 2.0},
         "rollout replay needs method 'dots', 'bots' or 'insight'"),
        ({"selection.method": "bots", "selection.pool_size": 8}, "config.selection.pool_size=8: must be >= "),
        ({"selection.method": "knapsack", "selection.knapsack_min_n": 32}, "knapsack_min_n=32: must be <= "),
        ({"selection.curriculum_steps": 10, "task.name": "countdown"}, "the curriculum schedules the arithmetic"),
        ({"selection.hint_fractions": (0.5, 0.25)}, "hint_fractions=(0.5, 0.25): must be increasing"),
        ({"selection.bots_decay": 1.5}, "config.selection.bots_decay=1.5: must lie in [0.0, 1.0]"),
        ({"selection.hints": True, "selection.hint_schedule": "irt", "selection.hint_rounds": 3},
         "config.selection.hint_rounds=3: must divide config.rl.num_generations=16"),
        ({"selection.hints": True, "selection.hint_schedule": "irt", "selection.irt_guess": 0.6},
         "config.selection.target=0.5: SEELE's hint needs irt_guess=0.6 < target < 1"),
        ({"selection.hints": True, "selection.hint_schedule": "irt", "selection.method": "dots"},
         "config.selection.hint_schedule='irt': needs config.selection.method='uniform'"),
        ({"selection.hint_schedule": "adaptive"}, "config.selection.hint_schedule='adaptive': unknown"),
        ({"selection.hint_placement": "completion", "rl.loss": "luffy"},
         "config.selection.hint_placement='completion': places hints, and config.selection.hints=False gives none"),
        ({"selection.hints": True, "selection.hint_placement": "completion"},
         "config.selection.hint_placement='completion': config.rl.loss='ppo_clip' does not take off_policy_mask"),
        ({"selection.hint_max": 0.0}, "config.selection.hint_max=0.0: must lie in (0.0, 1.0]"),
        ({"selection.hints": True, "selection.hint_schedule": "adhint", "selection.hint_rounds": 3},
         "config.selection.hint_rounds=3: must divide config.rl.num_generations=16"),
        ({"selection.hints": True, "selection.hint_schedule": "adhint", "selection.method": "dots"},
         "config.selection.hint_schedule='adhint': needs config.selection.method='uniform'"),
        ({"rl.advantage": "adhint", "selection.hints": True},
         "config.rl.advantage='adhint': compares each group's hinted and unhinted rollouts, and "
         "config.selection.hint_schedule='staged' makes groups all hinted or all unhinted; use adhint | irt"),
        ({"rl.loss": "adhint", "rl.loss_kwargs.mask_threshold": 1.5},
         "config.rl.loss_kwargs.mask_threshold=1.5: must lie in [0, 1]"),
    ],
)
def test_selection_config_errors_name_the_field(updates, message):
    config = default.get_config()
    for path, value in updates.items():
        *parents, last = path.split(".")
        node = config
        for part in parents:
            node = node[part]
        node[last] = value
    with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
        config_lib.parse(config)


def test_recipe_configs_are_valid():
    for recipe in (dots_recipe, bots_recipe, dynamic_sampling_recipe):
        config_lib.parse(recipe.get_config())


# ------------------------------------------------------------------------------------- in the trainer


def _length_is_even(completion: str, answer: str) -> float:
    """A reward the barely warm-started tiny model earns about half the time, so groups have unequal rewards to
    select, keep and replay."""
    del answer
    return float(len(completion) % 2 == 0)


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory):
    """A finished tiny SFT stage (tokenizer + checkpoint), copied into each run so SFT is trained once."""
    workdir = str(tmp_path_factory.mktemp("sft"))
    config = tiny_config(steps=0)
    job.run(config, workdir)
    return workdir


def _run(config, warm_start, workdir, **kwargs):
    if not os.path.exists(workdir):
        for part in ("tokenizer", os.path.join("checkpoints", "sft")):
            shutil.copytree(os.path.join(warm_start, part), os.path.join(workdir, part))
    job.run(config, workdir, **kwargs)
    return {r["step"]: r for r in metrics_lib.read_metrics(workdir, "rl")}


HINT_RECIPES = ("ghpo", "seele", "guide", "herl")  # run here: their hints need groups that fail and a hint that helps


def _starts_like_the_solution(completion: str, answer: str) -> float:
    """Right iff the scored text opens as the tiny task's solutions do ('3+4=7;#7'): the nano warm start rarely
    writes that, the 25 % hint ('3+') always does."""
    del answer
    return float(len(completion) >= 2 and completion[0].isdigit() and completion[1] == "+")


def _hint_recipe_records(name, tmp_path, monkeypatch, warm_start, overrides=None, **selection):
    """Two steps of configs/<name>.py on the tiny job, rewarded by `_starts_like_the_solution`, with `selection`'s
    fields and the flattened `overrides` set."""
    import importlib

    from tests.test_recipes import shrink

    recipe = importlib.import_module(f"configs.{name}")
    assert f"--config=configs/{name}.py" in recipe.get_config.__doc__
    monkeypatch.setitem(rewards.REWARDS, "starts_like_the_solution", _starts_like_the_solution)
    config = shrink(recipe.get_config())
    config.task.reward = "starts_like_the_solution"
    config.rl.steps = 2
    config.selection.update(selection)
    config.update_from_flattened_dict(overrides or {})
    return _run(config, warm_start, str(tmp_path / name))


def test_ghpo_recipe_regenerates_all_fail_groups_with_hints(tmp_path, monkeypatch, warm_start):
    records = _hint_recipe_records("ghpo", tmp_path, monkeypatch, warm_start)
    assert sum(r["selection/hint_candidates"] for r in records.values()) > 0
    for r in records.values():  # the first level solves every all-fail group under this reward
        assert r["selection/hint_solved"] == r["selection/hint_candidates"], r
        assert r["selection/hint_rollouts"] >= 4 * r["selection/hint_candidates"]
        assert np.isfinite(r["loss/pg"])


def test_seele_recipe_hints_the_problems_it_fails_toward_the_target_accuracy(tmp_path, monkeypatch, warm_start):
    records = _hint_recipe_records("seele", tmp_path, monkeypatch, warm_start, hint_rounds=2)
    for r in records.values():  # the warm start rarely opens like a solution; a hinted prompt always does
        assert r["selection/hinted_frac"] > 0 and r["selection/hinted_accuracy"] > r["selection/unhinted_accuracy"], r
        assert np.isfinite(r["loss/pg"])


def test_guide_recipe_trains_the_hint_tokens_off_policy(tmp_path, monkeypatch, warm_start):
    records = _hint_recipe_records("guide", tmp_path, monkeypatch, warm_start)
    assert sum(r["selection/hint_candidates"] for r in records.values()) > 0
    for r in records.values():  # the 25 % hint solves every all-fail group; its tokens reach the loss off-policy
        assert r["selection/hint_solved"] == r["selection/hint_candidates"], r
        assert (r["off_policy_frac"] > 0) == (r["selection/hint_solved"] > 0), r
        assert 0 < r["off_is_weight_mean"] <= 1 or r["selection/hint_solved"] == 0, r
        assert np.isfinite(r["loss/pg"])


def test_herl_recipe_trains_guided_responses_off_policy(tmp_path, monkeypatch, warm_start):
    """configs/herl.py for two steps on the tiny job: all-fail groups get hindsight guidance, guided responses are
    sampled and the best replaces a rollout of its group, trained off-policy with logged importance weights."""
    records = _hint_recipe_records("herl", tmp_path, monkeypatch, warm_start)
    assert sum(r["selection/hint_candidates"] for r in records.values()) > 0
    for r in records.values():
        assert r["selection/hint_rollouts"] >= 4 * r["selection/hint_candidates"], r
        # rewards >= 0: a guided response always reaches an all-fail group's best (0) and replaces its worst rollout
        assert r["selection/hindsight_replaced"] == r["selection/hint_candidates"], r
        assert (r["off_policy_frac"] > 0) == (r["selection/hindsight_replaced"] > 0), r
        if r["selection/hindsight_replaced"]:  # π_θ(y|x) / π_b(y|x ⊕ g) of tokens sampled after the guidance
            assert 0 < r["off_is_weight_min"] <= r["off_is_weight_mean"] <= r["off_is_weight_max"], r
            assert r["off_is_weight_min"] < r["off_is_weight_max"], r  # the guidance moved the behaviour: w != 1
            assert 0 < r["off_shaped_weight_mean"] < 1 and 0 <= r["off_is_clamp_frac"] <= 1, r
        assert np.isfinite(r["loss/pg"])


def test_dots_with_replay_resumes_exactly(tmp_path, monkeypatch, warm_start):
    """An interrupted DOTS run (replay buffer, per-prompt statistics) resumes to the same prompts, rollouts and
    metrics as the uninterrupted run; the selection state is in the checkpoint."""
    monkeypatch.setitem(rewards.REWARDS, "length_is_even", _length_is_even)
    config = tiny_config(steps=3, tis_cap=1e9)
    config.task.reward = "length_is_even"
    config.selection.update(method="dots", pool_size=16, replay_capacity=8)
    config.eval.every = 3
    full, resumed = str(tmp_path / "full"), str(tmp_path / "resumed")
    records = _run(config, warm_start, full)
    _run(config, warm_start, resumed, stop_after_rl_step=2)  # checkpoint at 2 (tiny_config: every 2)
    resumed_records = _run(config, warm_start, resumed)
    assert sorted(records) == sorted(resumed_records) == [1, 2, 3]
    for step in (3,):
        a, b = ({k: v for k, v in r[step].items() if not k.startswith(("time/", "tokens_per_s"))}
                for r in (records, resumed_records))
        assert a == b, step
    # Replay was exercised: the buffer filled and half of a later step's groups were replayed.
    assert records[3]["selection/replayed_groups"] == 2 and records[3]["selection/buffer_size"] >= 2
    assert records[3]["selection/generated_rollouts"] == 2 * 4  # only the fresh groups were generated
    # The selection state is its own checkpoint item beside the TrainState, and the resumed run's (restored from
    # checkpoint 2, then one step on) is bit for bit the uninterrupted run's, as is its TrainState.
    saved = {w: {item: ocp.StandardCheckpointer().restore(os.path.join(w, "checkpoints", "rl", "3", item))
                 for item in ("state", "selection")} for w in (full, resumed)}
    assert set(saved[full]["state"]) == {"params", "opt_state", "ref_params", "key", "extras"}
    assert saved[full]["selection"]["success"].shape == (16,)
    assert saved[full]["selection"]["replay"]["behaviour_logp"].shape == (8, 4, 12)
    assert (saved[full]["selection"]["visits"] > 0).sum() >= 4  # statistics were recorded
    _assert_trees_equal(saved[full], saved[resumed])


def _assert_trees_equal(a, b):
    """Same structure, and every leaf the same dtype and bits."""
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _selection_state(pool_size: int = 16, capacity: int = 8) -> selection.SelectionState:
    """A selection state with recorded statistics, BOTS evidence and a partly filled replay buffer."""
    rng = np.random.default_rng(0)
    state = selection.init_state(pool_size, prior_alpha=0.5, prior_beta=0.5, replay=replay.init_replay(capacity, 4, 6))
    state = selection.record_success(state, np.array([1, 5, 7]), np.array([0.25, 1.0, 0.5]))
    state = selection.bots_update(state, np.array([1, 5]), np.array([0.25, 1.0]), 4, decay=0.1, implicit_weight=0.2)
    buf = replay.insert(state.replay, np.array([1, 5]), np.zeros(2, np.int32), rng.integers(0, 9, (2, 4, 6)),
                        np.ones((2, 4, 6), np.float32), rng.standard_normal((2, 4, 6)).astype(np.float32),
                        rng.random((2, 4)).astype(np.float32))
    return state.replace(replay=buf)


def test_selection_state_round_trips_through_its_checkpoint_item(tmp_path):
    """The selection state is saved as the checkpoint's `selection` item and restored exactly (host numpy, same
    dtypes); a checkpoint and a run that disagree on having one are a mismatch, not corruption (nothing moved)."""
    sel = _selection_state()
    ckpt = checkpointing.Checkpointer(str(tmp_path / "rl"))
    ckpt.save(1, {"w": np.arange(3, dtype=np.float32)}, {"data_step": 1}, sel)
    restored = ckpt.restore_latest({"w": np.zeros(3, np.float32)}, _selection_state())
    assert restored.step == 1 and isinstance(restored.selection, selection.SelectionState)
    _assert_trees_equal(restored.selection, sel)
    assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(restored.selection))
    with pytest.raises(checkpointing.CheckpointMismatchError, match=r"selection\.alpha: only in the checkpoint"):
        ckpt.restore_latest({"w": np.zeros(3, np.float32)})
    ckpt.save(2, {"w": np.arange(3, dtype=np.float32)}, {"data_step": 2})
    with pytest.raises(checkpointing.CheckpointMismatchError, match=r"selection\.alpha: missing from the"):
        ckpt.restore_latest({"w": np.zeros(3, np.float32)}, sel)
    assert ckpt.all_steps() == [1, 2]
    ckpt.close()


def test_knapsack_and_hinted_dynamic_sampling_steps_run(tmp_path, monkeypatch, warm_start):
    """Unequal groups (Knapsack) and refill rounds with hinted regeneration (dynamic sampling + hints) go through
    the learner without NaNs."""
    monkeypatch.setitem(rewards.REWARDS, "length_is_even", _length_is_even)
    for method in ("knapsack", "dynamic_sampling"):
        config = tiny_config(steps=1)
        config.task.reward = "length_is_even"
        config.selection.update(method=method, pool_size=16, max_gen_rounds=2, hints=method == "dynamic_sampling")
        for record in _run(config, warm_start, str(tmp_path / method)).values():
            assert np.isfinite(record["loss/pg"]) and record["selection/generated_rollouts"] >= 16
