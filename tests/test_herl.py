"""HeRL (configs/herl.py): the arithmetic rubric, the hindsight guidance, the improvement bonus, the guided rows'
importance-weighted loss and the schedule that puts them in the groups, checked by hand; config errors name the field.
The recipe's few-step run is tests/test_selection.py's (its hints need groups that all fail)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import herl as herl_recipe
from rl4llm import config as config_lib
from rl4llm.data import arithmetic as arithmetic_task
from rl4llm.rewards import arithmetic
from rl4llm.rl import losses
from rl4llm.rl import off_policy
from rl4llm.train import hints
from rl4llm.train import prompt_selection
from rl4llm.train.rows import Rows

PROMPT, ANSWER = "37+48-19=", "66"  # items: "+48" (step 0), "-19" (step 1), "#" (the right answer)

# completion -> its rubric scores, by hand
HAND_SCORED = {
    "37+48=85;85-19=66;#66": [True, True, True],
    "37+48=85;85-19=60;#60": [True, False, False],  # a wrong step 1 and so a wrong answer
    "37+48=85;#85": [True, False, False],  # step 1 missing
    "37+48=86;86-19=67;#67": [False, True, False],  # a step built on an earlier error is sound
    "37-48=85;85-19=66;#66": [False, True, True],  # the right answer from a wrong step
    "": [False, False, False],
}


def test_rubric_items_are_the_operations_then_the_answer():
    assert arithmetic.rubric_items(PROMPT) == ["+48", "-19", "#"]
    assert arithmetic.rubric_items("5*6+2-9=3") == ["*6", "+2", "-9", "#"]  # the prompt may go on (a guidance)
    with pytest.raises(ValueError, match="does not start with an arithmetic problem"):
        arithmetic.rubric_items("=37+48")


@pytest.mark.parametrize("completion", sorted(HAND_SCORED))
def test_rubric_scores_on_hand_built_completions(completion):
    assert arithmetic.rubric_scores(PROMPT, completion, ANSWER) == HAND_SCORED[completion]


@pytest.mark.parametrize("completion", sorted(HAND_SCORED))
def test_guidance_lists_exactly_the_rubric_items_scored_0(completion):
    """The digest's unit test: the guidance is the failed attempt, then every item the attempt scored 0, in order,
    and no other."""
    items, met = arithmetic.rubric_items(PROMPT), arithmetic.rubric_scores(PROMPT, completion, ANSWER)
    guidance = hints.hindsight_guidance(completion, items, met)
    assert guidance.startswith(completion + "=") and guidance.endswith("=")
    listed = guidance[len(completion) + 1: -1]
    assert (listed.split(";") if listed else []) == [i for i, ok in zip(items, met) if not ok]


def test_guidance_template_by_hand():
    items = ["+48", "-19", "#"]
    assert hints.hindsight_guidance("37+48=85;85-19=60;#60", items, [True, False, False]) == \
        "37+48=85;85-19=60;#60=-19;#="
    assert hints.hindsight_guidance("37+48=85", items, [False, False, False]) == "37+48=85=+48;-19;#="
    assert hints.hindsight_guidance("x", items, [True, True, True]) == "x=="  # nothing unmet: nothing listed


def test_improvement_bonus_by_hand():
    bonus = hints.improvement_bonus([1.0, 0.0, 0.5], [0.0, 0.0, 1.0], 0.05)
    np.testing.assert_allclose(bonus, [0.05, 0.0, -0.025])  # λ·(r_guided − r): signed, 0 without improvement
    np.testing.assert_allclose(hints.improvement_bonus([1.0], [0.0], 0.0), [0.0])  # λ = 0: no bonus


def test_ranked_orders_by_reward_then_items_met_then_index():
    np.testing.assert_array_equal(hints.ranked(np.zeros(4), np.array([1, 3, 3, 0])), [1, 2, 0, 3])
    np.testing.assert_array_equal(hints.ranked(np.array([0.2, 0.0, 0.0, 0.0]), np.array([0, 3, 3, 3])),
                                  [0, 1, 2, 3])  # reward first: the last of the equals is the worst


# ------------------------------------------------------------------------------------------------ the loss


def _herl(logp, sampler_logp, adv, mask, off, **kwargs):
    """herl at one update per step: the learner's old log-probs are its own (ratio 1), the sampler's the behaviour's."""
    logp = jnp.asarray(logp, jnp.float32)
    return off_policy.herl(logp, jax.lax.stop_gradient(logp), jnp.asarray(adv, jnp.float32),
                           jnp.asarray(mask, jnp.float32), None if off is None else jnp.asarray(off, jnp.float32),
                           jnp.asarray(sampler_logp, jnp.float32), **kwargs)


def test_herl_importance_weight_and_gradient_by_hand():
    """A guided token with π_θ(y|x) = 0.5 and π_b(y|x ⊕ g) = 0.25 (the sampler's): w = 2, f(w) = w/(w + γ) = 2/3
    (γ = 1), L = −A·2/3 and dL/dlogp = −A·γ·w/(w + γ)² = −A·2/9; the sampled token beside it is PPO's (ratio 1:
    dL/dlogp = −A·½, the token mean of two)."""
    logp, old = [[math.log(0.5), -1.0]], [[math.log(0.25), -1.0]]
    adv, mask, off = [1.5], [[1.0, 1.0]], [[1.0, 0.0]]
    loss, metrics = _herl(logp, old, adv, mask, off)
    np.testing.assert_allclose(loss, (-1.5 * 2 / 3 - 1.5) / 2, rtol=1e-6)
    grad = jax.grad(lambda lp: _herl(lp, old, adv, mask, off)[0])(jnp.asarray(logp, jnp.float32))
    np.testing.assert_allclose(grad, [[-1.5 * 2 / 9 / 2, -1.5 / 2]], rtol=1e-5)
    np.testing.assert_allclose([metrics[k] for k in ("off_is_weight_mean", "off_is_weight_max", "off_is_weight_min",
                                                     "off_shaped_weight_mean", "off_policy_frac", "off_is_clamp_frac")],
                               [2.0, 2.0, 2.0, 2 / 3, 0.5, 0.0], rtol=1e-6)
    # γ = 0.1 (the official medical recipe): f(2) = 2/2.1
    np.testing.assert_allclose(_herl(logp, old, adv, [[1.0, 0.0]], off, shaping_gamma=0.1)[0], -1.5 * 2 / 2.1,
                               rtol=1e-6)


def test_herl_on_policy_point_weight_is_one():
    """An empty guidance: the sampler's log-probs are the policy's own, w = 1 on every guided token, f = 1/(1 + γ)."""
    logp = -jnp.abs(jax.random.normal(jax.random.key(0), (4, 5)))
    _, metrics = _herl(logp, logp, [1.0, -1.0, 0.5, 2.0], jnp.ones((4, 5)), jnp.ones((4, 5)))
    for key, value in (("off_is_weight_mean", 1.0), ("off_is_weight_max", 1.0), ("off_is_weight_min", 1.0),
                       ("off_shaped_weight_mean", 0.5), ("off_policy_frac", 1.0)):
        np.testing.assert_allclose(metrics[key], value, rtol=1e-6, err_msg=key)


def test_herl_without_guided_tokens_is_ppo_clip_exactly():
    """No guided token (no all-fail group): the loss and its gradient are `losses.ppo_clip`'s (dual clip 3), GRPO's,
    whatever the sampler's log-probs (they enter only on guided tokens)."""
    k1, k2, k3, k4 = jax.random.split(jax.random.key(1), 4)
    logp = -jnp.abs(jax.random.normal(k1, (6, 7)))
    old = logp + 0.4 * jax.random.normal(k2, (6, 7))
    sampler = logp + jax.random.normal(k4, (6, 7))
    adv = jax.random.normal(k3, (6,))
    mask = (jnp.arange(7)[None, :] < jnp.arange(2, 8)[:, None]).astype(jnp.float32)
    for off in (None, jnp.zeros((6, 7))):
        herl_loss = lambda lp: off_policy.herl(lp, old, adv, mask, off, sampler)[0]  # noqa: E731
        ppo_loss = lambda lp: losses.ppo_clip(lp, old, adv, mask, dual_clip=3.0)[0]  # noqa: E731
        np.testing.assert_allclose(herl_loss(logp), ppo_loss(logp), rtol=1e-6)
        np.testing.assert_allclose(jax.grad(herl_loss)(logp), jax.grad(ppo_loss)(logp), rtol=1e-6, atol=1e-8)


def test_herl_takes_the_behaviour_log_probs_from_the_sampler_through_the_registry():
    """The learner passes `sampler_logp` to the losses that declare it (herl): the adapter forwards it; without it a
    guided token is weighted as a trace's (π_b := 1, w = π_θ)."""
    from rl4llm.rl import registry

    assert "sampler_logp" in registry.policy_loss_inputs("herl")
    assert "sampler_logp" not in registry.policy_loss_inputs("luffy")
    logp, sampler = jnp.array([[math.log(0.5)]]), jnp.array([[math.log(0.25)]])
    call = registry.get_policy_loss("herl")
    _, metrics = call(logp, logp, jnp.ones(1), jnp.ones((1, 1)), off_policy_mask=jnp.ones((1, 1)), sampler_logp=sampler)
    np.testing.assert_allclose(metrics["off_is_weight_mean"], 2.0, rtol=1e-6)
    _, metrics = call(logp, logp, jnp.ones(1), jnp.ones((1, 1)), off_policy_mask=jnp.ones((1, 1)))
    np.testing.assert_allclose(metrics["off_is_weight_mean"], 0.5, rtol=1e-6)


def test_herl_clamps_the_log_ratio_and_survives_zero_probability():
    """|log w| is clamped at 20 (logged as off_is_clamp_frac); a guided token the policy gives probability 0 keeps a
    finite loss and gradient; a token with no behaviour log-prob (sampler 0: π_b := 1) gets w = π_θ, LUFFY's."""
    logp = jnp.array([[5.0, -jnp.inf, math.log(0.3)]])
    sampler = jnp.array([[-20.0, -1.0, 0.0]])
    loss_fn = lambda lp: _herl(lp, sampler, [1.0], [[1.0, 1.0, 1.0]], [[1.0, 1.0, 1.0]])  # noqa: E731
    loss, metrics = loss_fn(logp)
    grad = jax.grad(lambda lp: loss_fn(lp)[0])(logp)
    assert np.isfinite(loss) and np.isfinite(grad).all()
    np.testing.assert_allclose(metrics["off_is_clamp_frac"], 2 / 3, rtol=1e-6)
    np.testing.assert_allclose(metrics["off_is_weight_max"], math.exp(20.0), rtol=1e-5)
    np.testing.assert_allclose(metrics["off_is_weight_min"], math.exp(-20.0), rtol=1e-5)
    np.testing.assert_allclose(grad[0, :2], 0.0)  # clamped: no gradient, as the official code's clamp
    np.testing.assert_allclose(grad[0, 2], -0.3 / 1.3 ** 2 / 3, rtol=1e-5)  # w = π_θ = 0.3


# ------------------------------------------------------------------------------------------- the schedule


def _char_encode(prompts):
    width = max(len(p) for p in prompts)
    tokens = np.array([[0] * (width - len(p)) + [ord(ch) for ch in p] for p in prompts], np.int32)
    return tokens, tokens != 0


def _char_decode(tokens, mask):
    return ["".join(chr(t) for t, m in zip(row, ms) if m) for row, ms in zip(tokens, mask)]


def _text_rows(prompts, texts, answers, logprob):
    """Rows of completions `texts` after `prompts` (character tokens, behaviour log-prob `logprob` each), rewarded
    by the arithmetic verifier."""
    n, t = len(texts), 24
    tokens, mask = np.zeros((n, t), np.int32), np.zeros((n, t), bool)
    for r, text in enumerate(texts):
        tokens[r, :len(text)], mask[r, :len(text)] = [ord(ch) for ch in text], True
    main = np.array([arithmetic.score(x, a) for x, a in zip(texts, answers)], np.float32)
    prompt_tokens, prompt_mask = _char_encode(prompts)
    return Rows(prompt_tokens=prompt_tokens, prompt_mask=prompt_mask, completion_tokens=tokens, completion_mask=mask,
                logprobs=np.where(mask, logprob, 0.0).astype(np.float32), finished=np.ones(n, bool), scores=main,
                main=main, components=main[:, None], hint_chars=np.zeros(n, np.int32), fresh=np.ones(n, bool),
                off_policy=np.zeros(n, bool), hint_tokens=np.zeros(n, np.int32))


def _selector(num_prompts=2, num_generations=3, samples=2, placement="completion"):
    c = herl_recipe.get_config()
    c.rl.num_prompts, c.rl.num_generations = num_prompts, num_generations
    c.selection.hindsight_samples = samples
    c.selection.hint_placement = placement
    return prompt_selection.Selector(config_lib.parse(c), None, data_offset=0, pad_id=0, encode=_char_encode,
                                     tokenize=lambda text: [ord(ch) for ch in text], decode=_char_decode)


def _generate(calls, unguided, guided):
    """generate() of the trainer on hand-written completions: the first call gets `unguided` (per prompt), the second
    `guided` (per guided prompt); each call's arguments are recorded in `calls`."""
    def generate(prompts, answers, counts, key, prefixes, traces=None, solutions=None):
        del key, traces, solutions
        calls.append(dict(prompts=list(prompts), counts=list(counts), prefixes=list(prefixes)))
        texts = (unguided, guided)[len(calls) - 1]
        rows_prompts = [p for p, c in zip(prompts, counts) for _ in range(c)]
        rows_answers = [a for a, c in zip(answers, counts) for _ in range(c)]
        flat = [x for group in texts for x in group]
        return _text_rows(rows_prompts, flat, rows_answers, -0.5 if len(calls) == 2 else -1.0), {}
    return generate


def test_hindsight_guides_the_best_failed_rollout_replaces_the_worst_and_pays_the_bonus():
    """Group 0 has a correct rollout: untouched. Group 1 all fail: its best failed rollout (most items met: the
    second) and its unmet items are the guidance; of the 2 guided responses the correct one replaces the group's
    worst rollout (fewest items met, the last of equals), trained after the original prompt, off-policy, with its
    behaviour log-probs; the guided rollout's reward gains λ·(1 − 0)."""
    solved, failing = arithmetic_task.render_problem([5, 6, 2], ["+", "+"]), arithmetic_task.render_problem(
        [37, 48, 19], ["+", "-"])
    unguided = [["5+6=11;11+2=13;#13", "5+6=11;#11", "5+6=12;#12"],
                ["37+48=86;#86", "37+48=85;85-19=60;#60", ""]]  # items met: 0, 1, 0 -> best 1, worst 2
    guided = [["37+48=85;#85", "37+48=85;85-19=66;#66"]]
    calls = []
    rows, metrics = _selector().generate_groups([solved, failing], jax.random.key(0),
                                                _generate(calls, unguided, guided))
    assert calls[1] == dict(prompts=["37+48-19=37+48=85;85-19=60;#60=-19;#="], counts=[2], prefixes=[""])
    texts = _char_decode(rows.completion_tokens, rows.completion_mask)
    assert texts == unguided[0] + ["37+48=86;#86", "37+48=85;85-19=60;#60", "37+48=85;85-19=66;#66"]
    np.testing.assert_allclose(rows.scores, [1, 0, 0, 0, 0.05, 1])
    np.testing.assert_array_equal(rows.main, [1, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(rows.off_policy, [False] * 5 + [True])
    np.testing.assert_array_equal(_char_decode(rows.prompt_tokens, rows.prompt_mask),
                                  [solved.prompt] * 3 + [failing.prompt] * 3)  # trained after the original prompt
    np.testing.assert_allclose(rows.logprobs[5][rows.completion_mask[5]], -0.5)  # the guided behaviour's
    np.testing.assert_allclose(rows.logprobs[4][rows.completion_mask[4]], -1.0)
    assert metrics["selection/hint_candidates"] == 1 and metrics["selection/hint_rollouts"] == 2
    assert metrics["selection/hint_solved"] == 1 and metrics["selection/hindsight_replaced"] == 1
    assert metrics["selection/hindsight_guided_reward"] == 0.5 and metrics["selection/hindsight_unmet_items"] == 2
    np.testing.assert_allclose(metrics["selection/hindsight_bonus"], 0.05)


def test_hindsight_in_prompt_placement_trains_in_the_guided_context():
    """hint_placement='prompt' (the official script's train_use_rewrite_prompt=True): the guided row keeps its guided
    prompt."""
    failing = arithmetic_task.render_problem([37, 48, 19], ["+", "-"])
    unguided = [["37+48=86;#86", "37+48=85;85-19=60;#60"]]
    guided = [["37+48=85;85-19=66;#66"]]
    rows, _ = _selector(num_prompts=1, num_generations=2, samples=1, placement="prompt").generate_groups(
        [failing], jax.random.key(0), _generate([], unguided, guided))
    # the worst rollout (no item met) is the first: the guided row takes its place
    assert _char_decode(rows.prompt_tokens, rows.prompt_mask) == ["37+48-19=37+48=85;85-19=60;#60=-19;#=",
                                                                  failing.prompt]
    np.testing.assert_array_equal(rows.off_policy, [True, False])


def test_hindsight_replaces_on_a_tie_keeps_a_group_its_guidance_made_worse_and_skips_solved_groups():
    failing = arithmetic_task.render_problem([37, 48, 19], ["+", "-"])
    unguided = [["37+48=86;#86", "37+48=85;85-19=60;#60"]]
    selector = _selector(num_prompts=1, num_generations=2, samples=1)
    rows, _ = selector.generate_groups([failing], jax.random.key(0), _generate([], unguided, [["37+48=85;#85"]]))
    # a guided response that fails ties the group's best (0): it replaces the worst rollout (official: >=), no bonus
    assert _char_decode(rows.completion_tokens, rows.completion_mask) == ["37+48=85;#85", "37+48=85;85-19=60;#60"]
    np.testing.assert_allclose(rows.scores, [0, 0])
    calls = []
    worse = _generate(calls, unguided, [["37+48=85;#85"]])

    def penalised(*args, **kwargs):  # the guided responses' rewards 1 below: under the group's best
        rows, metrics = worse(*args, **kwargs)
        return (dataclasses.replace(rows, scores=rows.scores - 1) if len(calls) == 2 else rows), metrics

    rows, metrics = selector.generate_groups([failing], jax.random.key(0), penalised)
    assert _char_decode(rows.completion_tokens, rows.completion_mask) == unguided[0]  # the group as it was
    np.testing.assert_allclose(rows.scores, [0, -0.05])  # the guided rollout pays λ·(−1 − 0)
    assert metrics["selection/hindsight_replaced"] == 0 and not rows.off_policy.any()
    calls = []
    solved = [["37+48=85;85-19=66;#66", "37+48=86;#86"]]
    rows, metrics = selector.generate_groups([failing], jax.random.key(0), _generate(calls, solved, None))
    assert len(calls) == 1 and not rows.off_policy.any()  # nothing to guide: GRPO's rows exactly
    np.testing.assert_allclose(rows.scores, [1, 0])
    assert metrics["selection/hint_candidates"] == 0 and metrics["selection/hindsight_replaced"] == 0


# ------------------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    "updates, message",
    [
        ({"rl.loss": "luffy"}, "config.selection.hint_schedule='hindsight': config.rl.loss='luffy'; the guided "
                               "responses need 'herl'"),
        ({"rl.num_generations": 1}, "config.rl.num_generations=1"),
        ({"task.name": "countdown"}, "config.task.name='countdown' has none; use arithmetic"),
        ({"selection.method": "dots", "selection.replay_capacity": 8}, "config.selection.replay_capacity=8"),
        ({"selection.hindsight_samples": 0}, "config.selection.hindsight_samples=0"),
        ({"selection.hindsight_bonus": -0.1}, "config.selection.hindsight_bonus=-0.1"),
        ({"rl.loss_kwargs.shaping_gamma": 0.0}, "config.rl.loss_kwargs.shaping_gamma=0.0: must be > 0"),
    ],
)
def test_herl_config_errors_name_the_field(updates, message):
    config = herl_recipe.get_config()
    config.update_from_flattened_dict(updates)
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(config)
    assert message in str(e.value)


def test_herl_recipe_is_valid():
    config = config_lib.parse(herl_recipe.get_config())
    assert (config.rl.loss, config.selection.hint_schedule, config.selection.hint_placement) == \
        ("herl", "hindsight", "completion")
