"""Step-level process rewards (rl4llm.rl.process, rl4llm.rewards.process.step_layout): the arithmetic judge's
segment labels by hand and against its first flaw, PRM Clip / Delta and TP-GRPO's thoughts on hand-built rows and
their properties (Delta's return telescopes to the step's score, Clip's total is never positive), the labels placed
on the real tokenizer's tokens, `process_grpo` by hand, and the recipes (their config errors are
test_process_judges.py's)."""

import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm.data import arithmetic as arithmetic_task
from rl4llm.rewards import arithmetic
from rl4llm.rewards import process as process_lib
from rl4llm.rl import advantages
from rl4llm.rl import process
from rl4llm.rl import registry
from rl4llm.train import setup as setup_lib
from tests.test_train import tiny_config


@pytest.mark.parametrize("completion, labels", [
    ("7+5=12;12-1=11;#11", [True, True, True]),
    ("7+5=13;13-1=12;#12", [False, True, True]),  # the error carried on: only its step is flawed
    ("7+5=13;13-2=11;#11", [False, False, True]),  # two errors cancel: a flawed positive with a sound answer segment
    ("7+5=12;12-1=10;#11", [True, False, False]),  # the answer does not restate the last stated result
    ("7+5=12;x;12-1=11;#11", [True, False, False, False]),  # a non-step, then a step beyond the problem's two
    ("7+5=12;x;99-1=98;#98", [True, False, False, False]),
    ("7+5=12;#12", [True, False]),  # a skipped step: the answer is flawed
    ("#11", [False]),
    ("", [False]),
    ("7+5=12;12-1=11;#11;", [True, True, False, False]),  # something after the answer
])
def test_step_labels_hand_cases(completion, labels):
    assert arithmetic.step_labels("7+5-1=", completion) == labels
    assert arithmetic.first_flawed_step("7+5-1=", completion) == (labels.index(False) if False in labels else -1)


def test_step_labels_after_a_segment_that_is_not_a_step():
    """After garbage, the next step is judged on its own operation (its lhs cannot be checked), and the answer on
    restating the last stated result."""
    assert arithmetic.step_labels("7+5-1+2=", "7+5=12;?;11+2=13;#13") == [True, False, True, True]
    assert arithmetic.step_labels("7+5-1+2=", "7+5=12;?;11-2=9;#9") == [True, False, False, True]
    assert arithmetic.step_labels("7+5-1+2=", "7+5=12;?;11+2=14;#14") == [True, False, False, True]


def test_step_labels_on_the_tasks_solutions_and_corruptions():
    """Reference solutions are sound everywhere; `wrong_solution`'s corruption flags exactly its own segment (a
    result off by d, carried on by the later steps, which stay sound) and the answer when the steps do not end at it."""
    rng = np.random.default_rng(1)
    cfg = arithmetic_task.ArithmeticConfig(min_operands=2, max_operands=6, max_value=30, operators="+-*")
    for example in arithmetic_task.train_examples(cfg, step=0, batch_size=200):
        assert all(arithmetic.step_labels(example.prompt, example.solution))
        wrong = arithmetic_task.wrong_solution(example.solution, rng)
        labels = arithmetic.step_labels(example.prompt, wrong)
        changed = [a != b for a, b in zip(example.solution.split(";"), wrong.split(";"))]
        first = changed.index(True)
        assert labels.index(False) == first
        assert all(labels[:first])


def _row(labels, ends, width=10):
    """One row [1, width] with step scores `labels` on the token positions `ends`."""
    scores, marks = np.zeros((1, width), np.float32), np.zeros((1, width), bool)
    scores[0, ends], marks[0, ends] = labels, True
    return jnp.asarray(scores), jnp.asarray(marks)


def _to_go(rewards):
    return np.cumsum(np.asarray(rewards)[:, ::-1], axis=-1)[:, ::-1]


def test_prm_clip_and_delta_hand_case():
    scores, ends = _row([1.0, 0.0, 1.0, 0.0], [1, 4, 6, 8])
    np.testing.assert_allclose(process.prm(scores, ends)[0], [0, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    np.testing.assert_allclose(process.prm_clip(scores, ends, eta=0.5)[0], [0, 0, 0, 0, -0.5, 0, 0, 0, -0.5, 0])
    delta = process.prm_delta(scores, ends)
    np.testing.assert_allclose(delta[0], [0, 1, 0, 0, -1, 0, 1, 0, 0, 0])
    # the return-to-go of any token is the score of the step holding it (tokens after the last end: 0)
    np.testing.assert_allclose(_to_go(delta)[0], [1, 1, 0, 0, 0, 1, 1, 0, 0, 0])


def test_tp_grpo_thought_units():
    """The digest's case: labels [✓, ✓, ✗, ✗, ✓] are three thoughts with rewards (+, −, +), one per thought, and every
    token's return-to-go is its thought's value."""
    scores, ends = _row([1.0, 1.0, 0.0, 0.0, 1.0], [0, 2, 4, 6, 8])
    rewards = process.thought(scores, ends)
    np.testing.assert_allclose(rewards[0], [0, 0, 2, 0, 0, 0, -2, 0, 1, 0])
    assert int(process.count_thoughts(scores, ends)[0]) == 3
    np.testing.assert_allclose(_to_go(rewards)[0], [1, 1, 1, -1, -1, -1, -1, 1, 1, 0])
    np.testing.assert_allclose(process.thought_values(scores, ends)[0], [1, 0, 1, 0, -1, 0, -1, 0, 1, 0])


def test_step_reward_properties_on_random_rows():
    rng = np.random.default_rng(0)
    n, width = 64, 24
    scores = jnp.asarray(rng.uniform(size=(n, width)).astype(np.float32))
    ends = jnp.asarray(rng.uniform(size=(n, width)) < 0.3)
    to_go = _to_go(process.prm_delta(scores, ends))
    # Delta telescopes: at each step end, the return-to-go is that step's own score
    np.testing.assert_allclose(to_go[np.asarray(ends)], np.asarray(scores)[np.asarray(ends)], atol=1e-5)
    eta = 0.3
    clip = np.asarray(process.prm_clip(scores, ends, eta=eta))
    assert (clip <= 0).all() and (clip[~np.asarray(ends)] == 0).all()
    np.testing.assert_allclose(clip.sum(-1), np.minimum(np.asarray(scores) - eta, 0).sum(-1, where=np.asarray(ends)),
                               atol=1e-5)
    # thoughts: one non-zero reward per run of equal labels; no step end, no reward
    labels = np.asarray(scores) >= 0.5
    runs = [1 + int(np.sum(row[1:] != row[:-1])) if row.size else 0
            for row in (labels[i][np.asarray(ends)[i]] for i in range(n))]
    np.testing.assert_array_equal(np.asarray(process.count_thoughts(scores, ends)), runs)


def test_step_layout_on_the_tasks_tokenizer(tmp_path):
    """Each segment's label lands on the token that holds its last character (its ';', or the last token), for the
    sentencepiece tokenizer the task trains; a prefix's segments (a hint scored before the completion) are left out."""
    setup = setup_lib.build_setup(config_lib.parse(tiny_config()), str(tmp_path))
    tok = setup.tokenizer
    texts = ["7+5=12;12-1=11;#11", "7+5=13;13-1=12;#12", "#11"]
    rows = [tok.encode(t) for t in texts]
    width = max(map(len, rows)) + 2
    tokens = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        tokens[i, : len(r)], mask[i, : len(r)] = r, True
    labels = [arithmetic.step_labels("7+5-1=", t) for t in texts]
    scores, ends = process_lib.step_layout(tok.decode, labels, texts, [0, 0, 0], tokens, mask)
    for i, (r, text) in enumerate(zip(rows, texts)):
        positions = np.flatnonzero(ends[i])
        assert len(positions) == len(labels[i]) and positions[-1] == len(r) - 1
        for t in positions[:-1]:  # the token holding a step's ';'
            assert ";" in tok.decode(r[t : t + 1]) or tok.decode(r[: t + 1]).endswith(";")
        np.testing.assert_array_equal(scores[i, positions], np.asarray(labels[i], np.float32))
    # a hint of one step before the completion: its segment has no token
    hint = "7+5=12;"
    completion = tok.encode("12-1=11;#11")
    hinted_tokens, hinted_mask = np.array([completion]), np.ones((1, len(completion)), bool)
    hinted_labels = [arithmetic.step_labels("7+5-1=", hint + "12-1=11;#11")]
    scores, ends = process_lib.step_layout(tok.decode, hinted_labels, [hint + "12-1=11;#11"], [len(hint)],
                                           hinted_tokens, hinted_mask)
    assert ends.sum() == 2 and ends[0, -1] and scores[0, ends[0]].tolist() == [1.0, 1.0]


def test_process_grpo_by_hand():
    """Two groups of two: A = (R − μ)/(σ + ε) + c·w·(return-to-go), w = 1 − group accuracy when adaptive."""
    scores = jnp.array([1.0, 0.0, 1.0, 1.0])
    group_ids = jnp.array([0, 0, 1, 1])
    mask = jnp.array([[1, 1, 1, 0]] * 4, jnp.float32)
    rewards = jnp.array([[0.0, -0.5, 0.0, 0.0], [0.0, 0.0, -0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [-0.5, 0.0, 0.0, 9.0]])
    a = process.process_grpo(scores, group_ids, mask, rewards, num_groups=2, process_coef=0.5)
    outcome = 0.5 / (np.sqrt(0.5) + 1e-6)  # ±0.5 / the unbiased std of {1, 0}
    np.testing.assert_allclose(a, [[outcome - 0.25, outcome - 0.25, outcome, 0],
                                   [-outcome - 0.25, -outcome - 0.25, -outcome - 0.25, 0],
                                   [0, 0, 0, 0], [-0.25, 0, 0, 0]], atol=1e-5)
    adaptive = process.process_grpo(scores, group_ids, mask, rewards, num_groups=2, process_coef=0.5,
                                    capability_adaptive=True)
    # group 0 is half right (w = 0.5), group 1 all right (w = 0: only the outcome, here 0)
    np.testing.assert_allclose(adaptive[:2], [[outcome - 0.125, outcome - 0.125, outcome, 0],
                                              [-outcome - 0.125, -outcome - 0.125, -outcome - 0.125, 0]], atol=1e-5)
    np.testing.assert_allclose(adaptive[2:], 0.0, atol=1e-6)
    # no step rewards: GRPO's advantage on every valid token, through the registry's adapter
    plain = registry.get_advantage("process_grpo")(scores, group_ids, mask, num_groups=2,
                                                   process_rewards=jnp.zeros((4, 4)))
    np.testing.assert_allclose(plain, advantages.grpo(scores, group_ids, num_groups=2)[:, None] * mask, atol=1e-6)


def test_the_recipes_are_the_default_run_with_step_rewards():
    from configs import prm_clip
    from configs import tp_grpo

    base = config_lib.parse(default.get_config())
    for recipe, step_reward in ((tp_grpo, "thought"), (prm_clip, "prm_clip")):
        parsed = config_lib.parse(recipe.get_config())
        assert (parsed.task.step_reward, parsed.rl.advantage) == (step_reward, "process_grpo")
        assert parsed.replace(task={"flaw_judge": "none", "step_reward": "none"},
                              rl={"advantage": "grpo", "advantage_kwargs": base.rl.advantage_kwargs}) == base
