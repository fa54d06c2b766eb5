"""Process judges (rl4llm.rewards.process): the arithmetic judge on hand-built answers and on the task's own
corruptions, the flawed-positive penalty by hand and under GRPO's group normalisation (the paper's sign rule), the
reward pipeline and the evaluation with a judge, PROF's consistency filter (hand cases and its properties), and the
config errors."""

import dataclasses

import jax
import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm.data import arithmetic as arithmetic_task
from rl4llm.rewards import arithmetic
from rl4llm.rewards import pipeline
from rl4llm.rewards import process
from rl4llm.rl import advantages
from rl4llm.train import evaluate as evaluate_lib
from rl4llm.train import setup as setup_lib
from tests.test_train import tiny_config


@pytest.mark.parametrize("prompt, completion, first_flaw", [
    ("7+5-1=", "7+5=12;12-1=11;#11", -1),  # sound
    ("7+5-1=", "7+5=13;13-1=12;#12", 0),  # wrong sum, carried on consistently
    ("7+5-1=", "7+5=13;13-2=11;#11", 0),  # a flawed positive: two errors cancel
    ("7+5-1=", "7+5=12;12-1=10;#10", 1),  # the last step's result
    ("7+5-1=", "7+5=12;13-1=12;#12", 1),  # step 1 does not start from step 0's result
    ("7+5-1=", "7+5=12;12+1=13;#13", 1),  # the wrong operator
    ("7+5-1=", "7+5=12;12-2=10;#10", 1),  # the wrong operand
    ("7+5-1=", "7+5=12;#11", 1),  # a skipped step: the answer is flawed (index m = 1)
    ("7+5-1=", "#11", 0),  # no step at all
    ("7+5-1=", "7+5=12;12-1=11;#12", 2),  # the answer does not restate the last result
    ("7+5-1=", "7+5=12;12-1=11;11+0=11;#11", 2),  # a step the problem does not have
    ("7+5-1=", "7+5=12;12-1=11", 1),  # no '#answer': the last segment is not a step
    ("7+5-1=", "7+5=12;12-1=11;#11;", 2),  # something after the answer
    ("7+5-1=", "", 0),
    ("7+5-1=", "###", 0),
    ("7+5-1=", "7+5=12;12-1=11;#" + "9" * 5000, 2),  # a huge answer is read without int()
    ("7+5-1=", "9" * 5000 + "+5=12;12-1=11;#11", 0),
    ("7+5-1=7+5=12;", "7+5=12;12-1=11;#11", -1),  # a hinted prompt (GHPO): the problem is what precedes '='
    ("3*4-20=", "3*4=12;12-20=-8;#-8", -1),  # multiplication and negative running results
    ("3*4-20=", "3*4=12;12-20=-8;#-08", -1),  # the answer compared as an integer
])
def test_first_flawed_step_hand_cases(prompt, completion, first_flaw):
    assert arithmetic.first_flawed_step(prompt, completion) == first_flaw


def test_first_flawed_step_of_the_tasks_solutions_and_corruptions():
    """Every reference solution is sound, and `wrong_solution`'s corruption is found where it was made: a step's
    result off by d (then carried on) at that step, an answer off by d at the answer (index m)."""
    rng = np.random.default_rng(0)
    cfg = arithmetic_task.ArithmeticConfig(min_operands=2, max_operands=6, max_value=30, operators="+-*")
    for example in arithmetic_task.train_examples(cfg, step=0, batch_size=200):
        assert arithmetic.first_flawed_step(example.prompt, example.solution) == -1
        wrong = arithmetic_task.wrong_solution(example.solution, rng)
        steps, wrong_steps = example.solution.split(";"), wrong.split(";")
        first_difference = next(k for k, (a, b) in enumerate(zip(steps, wrong_steps)) if a != b)
        assert arithmetic.first_flawed_step(example.prompt, wrong) == first_difference


def test_judge_refuses_a_prompt_without_a_problem():
    with pytest.raises(ValueError, match="does not start with an arithmetic problem"):
        arithmetic.first_flawed_step("What is 2+2?", "2+2=4;#4")


def test_fapo_rewards_hand_case():
    rewards = np.array([1.0, 1.0, 0.0, 0.0, 1.25], np.float32)
    correct = np.array([True, True, False, False, True])
    flawed = np.array([False, True, True, False, True])
    out = process.fapo_rewards(rewards, correct, flawed, 0.5)
    np.testing.assert_array_equal(out, [1.0, 0.5, 0.0, 0.0, 0.75])  # only correct ∧ flawed loses λ
    assert out.dtype == np.float32
    np.testing.assert_array_equal(process.fapo_rewards(rewards, correct, flawed, 0.0), rewards)


@pytest.mark.parametrize("sound, flawed, wrong", [(1, 1, 3), (3, 1, 1), (2, 2, 2), (0, 2, 5), (5, 1, 0), (4, 3, 4)])
def test_a_flawed_positives_grpo_advantage_has_the_sign_of_wrong_minus_sound(sound, flawed, wrong):
    """FAPO's unit test: in a group of `sound` fully correct, `flawed` flawed-positive and `wrong` rollouts, λ = 0.5 on
    0/1 rewards (the paper's λ = 1 on ±1) gives the flawed positives a GRPO advantage of sign(wrong − sound)."""
    n = sound + flawed + wrong
    correct = np.array([True] * (sound + flawed) + [False] * wrong)
    is_flawed = np.array([False] * sound + [True] * flawed + [False] * wrong)
    rewards = process.fapo_rewards(correct.astype(np.float32), correct, is_flawed, 0.5)
    adv = np.asarray(advantages.grpo(rewards, np.zeros(n, np.int32), num_groups=1))
    flawed_adv = adv[sound:sound + flawed]
    assert np.allclose(flawed_adv, flawed_adv[0])
    assert np.sign(np.round(flawed_adv[0], 5)) == np.sign(wrong - sound)
    # the same group on the paper's ±1 scale with λ = 1: the same advantages
    paper = np.where(correct, 1.0, -1.0) - 1.0 * (correct & is_flawed)
    np.testing.assert_allclose(adv, advantages.grpo(paper, np.zeros(n, np.int32), num_groups=1), atol=1e-5)


def test_flaw_metrics_hand_case():
    correct = np.array([True, True, True, False])
    flawed = np.array([True, False, False, True])
    assert process.flaw_metrics(correct, flawed, "x/") == {
        "x/flawed_positive_frac": 1 / 3, "x/sound_accuracy": 0.5, "x/flawed_frac": 0.5}
    assert process.flaw_metrics(np.zeros(2, bool), np.ones(2, bool), "")["flawed_positive_frac"] == 0.0


def _pipeline_score(spec, texts, prompts=None):
    answers = ["11"] * len(texts)
    flaws = None if prompts is None else process.first_flaws([arithmetic.step_labels(p, t) for p, t in zip(prompts, texts)])
    with pipeline.RewardPipeline(spec) as p:
        return p.score(texts, answers, np.array([len(t) for t in texts]), np.zeros(len(texts), np.int32),
                       max_length=32, first_flaws=flaws)


def test_pipeline_penalises_flawed_positives_only():
    texts = ["7+5=12;12-1=11;#11", "7+5=13;13-2=11;#11", "7+5=13;13-1=12;#12", "junk"]
    prompts = ["7+5-1="] * 4
    monitor = pipeline.RewardSpec("exact_answer", flaw_judge="arithmetic_steps")
    scores, main, components, metrics = _pipeline_score(monitor, texts, prompts)
    np.testing.assert_array_equal(scores, [1, 1, 0, 0])  # penalty 0: the judge only logs
    assert metrics["judge/flawed_positive_frac"] == 0.5 and metrics["judge/sound_accuracy"] == 0.25
    assert metrics["judge/flawed_frac"] == 0.75 and "judge/penalty_mean" not in metrics
    fapo = pipeline.RewardSpec("exact_answer", flaw_judge="arithmetic_steps", flaw_penalty=0.5)
    scores, main, components, metrics = _pipeline_score(fapo, texts, prompts)
    np.testing.assert_array_equal(scores, [1, 0.5, 0, 0])
    np.testing.assert_array_equal(main, [1, 1, 0, 0])  # correctness is the verifier's
    np.testing.assert_array_equal(components[:, 0], [1, 1, 0, 0])
    assert metrics["judge/penalty_mean"] == 0.125 and metrics["reward/exact_answer"] == 0.5
    with pytest.raises(ValueError, match="pass its verdicts"):
        _pipeline_score(fapo, texts)
    with pytest.raises(ValueError, match="needs a flaw_judge"):
        pipeline.RewardPipeline(pipeline.RewardSpec("exact_answer", flaw_penalty=0.5))


def test_evaluation_reports_the_judges_flaw_metrics(tmp_path):
    """With a judge, the evaluation's flaw metrics are those of its greedy and sampled completions (regenerated here
    with the evaluation's keys), and the other metrics do not change."""
    config = config_lib.parse(tiny_config())
    setup = setup_lib.build_setup(config, str(tmp_path))
    params = setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))
    examples = setup.eval_examples
    key = jax.random.key(3)
    args = (setup.model_cfg, params, setup.tokenizer, examples, key)

    judged = dataclasses.replace(setup.eval_spec, flaw_judge=arithmetic.step_labels)
    plain, metrics = (evaluate_lib.evaluate(*args, spec, setup.score_fn) for spec in (setup.eval_spec, judged))
    assert {k: v for k, v in metrics.items() if k in plain} == plain
    prompts, answers = [e.prompt for e in examples], [e.answer for e in examples]
    greedy = evaluate_lib.generate_scored(*args[:3], prompts, answers, key, judged.greedy, judged, setup.score_fn)
    n = judged.pass_n
    sampled = evaluate_lib.generate_scored(*args[:3], [p for p in prompts for _ in range(n)],
                                           [a for a in answers for _ in range(n)], jax.random.fold_in(key, 1),
                                           judged.sampled, judged, setup.score_fn)
    for prefix, texts, c in (("eval/", prompts, greedy), ("eval/sampled_", [p for p in prompts for _ in range(n)],
                                                          sampled)):
        flawed = np.array([arithmetic.first_flawed_step(p, t) >= 0 for p, t in zip(texts, c.texts)])
        assert {k: metrics[k] for k in process.flaw_metrics(c.rewards == 1, flawed, prefix)} == (
            process.flaw_metrics(c.rewards == 1, flawed, prefix))
    assert metrics["eval/sampled_flawed_frac"] > 0  # a random policy's steps are flawed
    setup.rewards.close()


@pytest.mark.parametrize("overrides, message", [
    ({"task.flaw_penalty": 0.5}, "config.task.flaw_penalty=0.5: penalises the flawed positives a process judge"),
    ({"task.flaw_judge": "arithmetic_steps", "task.name": "countdown"},
     "config.task.flaw_judge='arithmetic_steps' reads the prompts of task 'arithmetic'"),
    ({"task.flaw_judge": "arithmetic_steps", "task.flaw_penalty": 0.5, "rl.advantage": "gdpo",
      "task.extra_rewards": "format_arithmetic:0.5"}, "FAPO's penalty enters the combined reward only"),
    ({"task.flaw_judge": "steps"}, "config.task.flaw_judge='steps'"),
    # step rewards (tests/test_step_rewards.py)
    ({"task.step_reward": "prm_clip", "rl.advantage": "process_grpo"}, "set config.task.flaw_judge"),
    ({"task.step_reward": "thought", "task.flaw_judge": "arithmetic_steps"}, "use rl.advantage='process_grpo'"),
    ({"task.step_reward": "thought", "task.flaw_judge": "arithmetic_steps", "rl.advantage": "prime"},
     "rl.advantage='prime' does not train on a judge's step rewards"),
    ({"rl.advantage": "process_grpo", "task.flaw_judge": "arithmetic_steps"}, "set config.task.step_reward"),
    ({"task.step_reward": "steps"}, "config.task.step_reward='steps'"),
])
def test_config_errors(overrides, message):
    config = default.get_config()
    config.update_from_flattened_dict(overrides)
    with pytest.raises(config_lib.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_lib.parse(config)


def test_the_recipe_is_fapo_on_the_default_run():
    from configs import fapo

    parsed = config_lib.parse(fapo.get_config())
    assert (parsed.task.flaw_judge, parsed.task.flaw_penalty) == ("arithmetic_steps", 0.5)
    assert parsed.replace(task={"flaw_judge": "none", "flaw_penalty": 0.0}) == config_lib.parse(default.get_config())


# ------------------------------------------------------------------------------------------------ PROF


def test_sound_prefix_hand_cases():
    first_flaws = np.array([-1, 0, 2, 3, 5])
    steps = np.array([4, 4, 4, 4, 3])
    np.testing.assert_allclose(process.sound_prefix(first_flaws, steps), [1.0, 0.0, 0.5, 0.75, 1.0])


@pytest.mark.parametrize("correct, scores, keep, kept", [
    # 3 right, 5 wrong, keep 4: the 2 right of highest score, the 2 wrong of lowest
    ([1, 1, 1, 0, 0, 0, 0, 0], [0.2, 1.0, 0.6, 0.9, 0.1, 0.5, 0.0, 0.3], 4, [1, 2, 4, 6]),
    ([1, 1, 1, 1], [0.5, 1.0, 0.5, 0.2], 2, [0, 1]),  # all right: the best two, the tie to the earlier
    ([0, 0, 1, 0, 0], [0.9, 0.1, 0.0, 0.4, 0.4], 3, [1, 2, 3]),  # one right: kept whatever its score
    ([1, 0, 1], [0.3, 0.3, 0.7], 1, [2]),  # keep 1: the odd one goes to the right side
])
def test_prof_kept_hand_cases(correct, scores, keep, kept):
    np.testing.assert_array_equal(process.prof_kept(np.array(correct, bool), np.array(scores), keep), kept)


def test_prof_kept_properties():
    """PROF's unit test: `keep` rows, as balanced as the counts allow, and no kept right answer scores below a removed
    right one, no kept wrong answer above a removed wrong one."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 17))
        keep = int(rng.integers(1, n))
        correct = rng.random(n) < rng.random()
        scores = np.round(rng.random(n), 1)  # ties
        kept = process.prof_kept(correct, scores, keep)
        assert kept.size == keep == np.unique(kept).size
        k_right = int(correct[kept].sum())
        best = min(abs(2 * k - keep) for k in range(max(0, keep - (~correct).sum()), min(correct.sum(), keep) + 1))
        assert abs(2 * k_right - keep) == best
        removed = np.setdiff1d(np.arange(n), kept)
        for side, worse in ((correct, np.less), (~correct, np.greater)):
            kept_side, removed_side = scores[kept[side[kept]]], scores[removed[side[removed]]]
            if kept_side.size and removed_side.size:
                assert not worse(kept_side.min() if worse is np.less else kept_side.max(),
                                 removed_side.max() if worse is np.less else removed_side.min())


def test_prof_balance_only_keeps_the_counts_in_sampled_order():
    """The ablation's choice is `prof_kept` with equal scores: the same balanced counts, each side's first rows."""
    correct = np.array([1, 1, 1, 0, 0, 0, 0, 0], bool)
    np.testing.assert_array_equal(process.prof_kept(correct, np.zeros(8), 4), [0, 1, 3, 4])


def test_prof_config_errors():
    config = default.get_config()
    config.selection.method = "prof"
    config.selection.prof_rollouts = 16
    config.rl.off_policy_traces = 2
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(config)
    for expected in ("config.selection.prof_rollouts=16: PROF keeps config.rl.num_generations=16",
                     "config.selection.method='prof': filters by a process judge's scores",
                     "config.rl.off_policy_traces=2: PROF filters sampled groups"):
        assert expected in str(e.value), (expected, str(e.value))
    from configs import prof

    parsed = config_lib.parse(prof.get_config())
    assert (parsed.selection.method, parsed.selection.prof_rollouts, parsed.task.flaw_judge) == (
        "prof", 32, "arithmetic_steps")
