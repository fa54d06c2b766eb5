"""URPO (rl4llm/train/urpo.py, rl4llm/verifiers/referee.py): the referee prompt and verdict parser by hand (garbage
verdict = 0 reward), the candidates and their labels, an exact mix of player and referee groups in a real step of
the nano policy whose referee rewards equal agreement with the labels, the held-out referee evaluation, and the
validation of config.urpo."""

import functools
import re

import jax
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm.data import arithmetic
from rl4llm.train import batches
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib
from rl4llm.train import single_turn
from rl4llm.train import urpo
from rl4llm.verifiers import referee
from tests.test_train import tiny_config


def test_referee_prompt_fills_the_template():
    assert referee.referee_prompt("{question}{completion}=", "3+4=", "3+4=7;#7") == "3+4=3+4=7;#7="
    assert referee.referee_prompt("#{completion};{question}", "1+1=", "1+1=2;#2") == "#1+1=2;#2;1+1="
    with pytest.raises(ValueError):
        referee.template_pieces("{question}{reference}{completion}")  # the referee sees no reference
    with pytest.raises(ValueError):
        referee.template_pieces("{question}=")  # no {completion}


@pytest.mark.parametrize("text, verdict", [
    ("1", 1), ("0", 0), ("1;#2", 1), ("01", 0),  # the first character decides, the rest is ignored
    ("", None), ("7", None), (" 1", None), ("#1", None), ("=0", None),  # garbage
])
def test_verdict_parser(text, verdict):
    assert referee.parse_verdict(text, "1", "0") == verdict


def test_referee_reward_is_label_agreement_and_garbage_scores_zero():
    assert referee.referee_reward("1", 1, "1", "0") == 1.0
    assert referee.referee_reward("0", 0, "1", "0") == 1.0
    assert referee.referee_reward("1", 0, "1", "0") == 0.0
    assert referee.referee_reward("0;3", 1, "1", "0") == 0.0
    for label in (0, 1):
        assert referee.referee_reward("", label, "1", "0") == 0.0
        assert referee.referee_reward("5+3=8", label, "1", "0") == 0.0
    assert referee.referee_reward("Yes.", 1, "Yes", "No") == 1.0  # multi-character tokens


@pytest.mark.parametrize("share, groups, expected", [(0.5, 4, 2), (0.5, 1, 1), (0.0, 4, 0), (1.0, 3, 3),
                                                     (0.25, 7, 2)])
def test_candidate_plan_draws_exactly_the_share(share, groups, expected):
    for seed in range(5):
        assert referee.candidate_plan(groups, share, np.random.default_rng(seed)).sum() == expected


def test_pick_rollout_balances_labels_when_it_can():
    rng = np.random.default_rng(0)
    labels = np.array([1, 1, 1, 0])
    picked = [labels[referee.pick_rollout(labels, rng)] for _ in range(400)]
    assert 0.4 < np.mean(picked) < 0.6  # the lone wrong rollout is drawn half the time, not a quarter
    assert {referee.pick_rollout(np.ones(4, int), rng) for _ in range(50)} == {0, 1, 2, 3}  # all right: any of them


def test_corrupted_candidates_are_the_reference_or_a_wrong_final_answer():
    example = arithmetic.render_problem([3, 7, 5], ["+", "-"])
    rng = np.random.default_rng(0)
    labels = []
    for _ in range(40):
        text, label = referee.corrupted_candidate(example.solution, rng, "final_answer")
        labels.append(label)
        assert (text == example.solution) == (label == 1)
        assert (text.rsplit("#", 1)[1] == example.answer) == (label == 1)
    assert 0 < np.mean(labels) < 1


def _urpo_config(**urpo_fields):
    c = tiny_config()
    c.rl.num_prompts, c.rl.num_generations = 4, 4
    c.urpo.update({"referee_share": 0.5, "rollout_candidates": 0.5, **urpo_fields})
    return c


@pytest.fixture(scope="module")
def nano(tmp_path_factory):
    """The tiny job's setup and a random nano policy."""
    config = config_lib.parse(_urpo_config())
    setup = single_turn.build_setup(config, str(tmp_path_factory.mktemp("urpo")))
    return setup, setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))


def _step(config, setup, params, step=3):
    key = jax.random.key(1)
    generate = functools.partial(rollouts.generate_rows, config, setup, params)
    collected, _ = setup.selector.collect(None, step, key, generate)
    return collected, urpo.mix(config, setup, params, collected.rows, dict(collected.metrics), step, key)


def test_a_step_mixes_exactly_and_rewards_the_referee_by_agreement(nano):
    setup, params = nano
    config = config_lib.parse(_urpo_config())
    collected, (rows, metrics) = _step(config, setup, params)
    b, g, r = 4, 4, 2
    assert rows.scores.shape == (b * g,) and rows.completion_tokens.shape[0] == b * g
    player, judged = slice(0, (b - r) * g), slice((b - r) * g, b * g)
    np.testing.assert_array_equal(rows.scores[player], collected.rows.scores[player])  # the verifier's rewards
    prompts = batches.decode_completions(setup.tokenizer, rows.prompt_tokens, rows.prompt_mask)
    texts = batches.decode_completions(setup.tokenizer, collected.rows.completion_tokens,
                                       collected.rows.completion_mask)
    questions, candidates, labels, _ = urpo.candidates(config, setup, collected.rows, texts, 3)
    expected_prompts = [referee.referee_prompt(config.urpo.template, q, c) for q, c in zip(questions, candidates)]
    assert prompts[judged] == [p for p in expected_prompts for _ in range(g)]  # G verdicts of each referee prompt
    assert prompts[player] == [e.prompt for e in setup.selector.stream_examples(3, b - r) for _ in range(g)]
    verdicts = batches.decode_completions(setup.tokenizer, rows.completion_tokens[judged], rows.completion_mask[judged])
    agreement = [referee.referee_reward(v, label, "1", "0") for v, label in zip(verdicts, np.repeat(labels, g))]
    np.testing.assert_array_equal(rows.scores[judged], agreement)
    np.testing.assert_array_equal(rows.main[judged], agreement)
    assert metrics["urpo/referee_share"] == r / b
    assert metrics["urpo/referee_accuracy"] == pytest.approx(np.mean(agreement))
    assert metrics["urpo/player_accuracy"] == pytest.approx(np.mean(collected.rows.main[player] >= 1))
    assert metrics["urpo/rollout_candidate_frac"] == 0.5
    groups = np.reshape(agreement, (r, g))
    assert metrics["urpo/referee_signal_frac"] == np.mean(groups.min(-1) < groups.max(-1))


def test_self_reward_replaces_the_player_reward_and_keeps_the_verifier_label(nano):
    setup, params = nano
    config = config_lib.parse(_urpo_config(self_reward=True))
    collected, (rows, metrics) = _step(config, setup, params)
    player = slice(0, 8)
    assert set(np.unique(rows.scores[player])) <= {0.0, 1.0}
    np.testing.assert_array_equal(rows.main[player], collected.rows.main[player])
    label = collected.rows.main[player] >= 1
    assert metrics["urpo/self_reward_agreement"] == pytest.approx(np.mean((rows.scores[player] > 0) == label))


def test_held_out_referee_evaluation(nano):
    setup, params = nano
    config = config_lib.parse(_urpo_config(eval_pairs=3))
    found = urpo.evaluate_referee(config, setup, params, jax.random.key(0))
    assert set(found) == {"eval/referee_accuracy", "eval/referee_valid_frac", "eval/referee_yes_frac"}
    assert 0 <= found["eval/referee_accuracy"] <= found["eval/referee_valid_frac"] <= 1
    questions, candidates, labels = referee.held_out_pairs(setup.eval_examples, 3, "final_answer", 0)
    assert labels == [1, 0] * 3 and questions[0] == questions[1] and candidates[0] != candidates[1]


@pytest.mark.parametrize("fields, message", [
    ({"urpo.referee_share": 0.3}, "whole number"),
    ({"urpo.referee_share": 1.0}, "whole number"),
    ({"urpo.eval_pairs": 4, "urpo.template": "{question}{completion}?"}, "no token for ['?']"),
    ({"urpo.eval_pairs": 4, "urpo.yes_token": "1", "urpo.no_token": "10"}, "neither may start"),
    ({"urpo.self_reward": True}, "referee_share > 0"),
    ({"urpo.referee_share": 0.25, "selection.method": "dots"}, "selection.method"),
    ({"urpo.referee_share": 0.25, "task.flaw_judge": "arithmetic_steps"}, "task.flaw_judge"),
    ({"urpo.eval_pairs": 4, "task.name": "countdown"}, "arithmetic"),
])
def test_validation_names_the_field(fields, message):
    c = tiny_config()
    c.update_from_flattened_dict(fields)
    with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
        config_lib.parse(c)
