"""Built-in procedural tasks (countdown, sorting, modular) and the task registry: exact verifiers accept the
reference solutions, held-out splits are disjoint and seed-independent, difficulty parameters act."""

import re

import ml_collections
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm import rewards
from rl4llm.data import countdown
from rl4llm.data import modular
from rl4llm.data import procedural
from rl4llm.data import sorting
from rl4llm.data import tasks

SOURCES = {
    "countdown": countdown.source(countdown.CountdownConfig(max_number=20, test_fraction=0.2)),
    "sorting": sorting.source(sorting.SortingConfig(test_fraction=0.2)),
    "modular": modular.source(modular.ModularConfig(test_fraction=0.2)),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_reference_solutions_score_one_with_the_task_reward(name):
    source, reward = SOURCES[name], rewards.get_reward(tasks.TASKS[name][1])
    for ex in source.train_examples(0, 100) + source.test_examples(20):
        assert reward(ex.solution, ex.answer) == 1.0, ex
        assert reward(ex.solution[: len(ex.solution) // 2], ex.answer) < 1.0, ex


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_split_is_disjoint_deterministic_and_prefix_stable(name):
    source = SOURCES[name]
    test = source.test_examples(30)
    assert len({ex.prompt for ex in test}) == 30
    assert all(procedural.is_held_out(ex.prompt, 0.2) for ex in test)
    train = [ex for step in range(5) for ex in source.train_examples(step, 64)]
    assert not {ex.prompt for ex in train} & {ex.prompt for ex in test}
    assert source.train_examples(3, 64) == source.train_examples(3, 64)
    assert source.train_examples(3, 10) == source.train_examples(3, 64)[:10]
    assert source.test_examples(10) == test[:10]
    assert source.train_examples(1, 8) != source.train_examples(2, 8)
    corpus = source.corpus(5)
    assert len(corpus) == 6 and corpus[0] == source.alphabet and corpus == source.corpus(5)


def test_hand_rendered_examples():
    assert sorting.render([5, 3, 9, 3]).solution == "3|5 9 3;3|5 9;5|9;9|;#3 3 5 9"
    assert sorting.render([5, 3, 9, 3]).prompt == "sort 5 3 9 3:"
    ex = modular.render(3, 4, 7)
    assert (ex.prompt, ex.solution, ex.answer) == ("3^4%7=", "3*3=9%7=2;2*3=6%7=6;6*3=18%7=4;#4", "4")
    assert pow(3, 4, 7) == 4
    assert countdown.render([3, 7, 5], [0, 1, 2], ["+", "*"]) == ("(3+7)*5", 50)
    assert countdown.render([3, 7, 5], [2, 0, 1], ["-", "*"]) == ("(5-3)*7", 14)
    assert countdown.render([3, 7, 5], [0, 1, 2], ["*", "+"]) == ("3*7+5", 26)


def test_alphabets_cover_every_character():
    for name, source in SOURCES.items():
        texts = [ex.prompt + ex.solution for ex in source.train_examples(0, 200)]
        assert set("".join(texts)) <= set(source.alphabet), name


def test_difficulty_parameters():
    short = sorting.source(sorting.SortingConfig(min_length=2, max_length=2)).train_examples(0, 50)
    long = sorting.source(sorting.SortingConfig(min_length=6, max_length=6)).train_examples(0, 50)
    assert {ex.solution.count(";") for ex in short} == {2} and {ex.solution.count(";") for ex in long} == {6}
    few = countdown.source(countdown.CountdownConfig(min_numbers=2, max_numbers=2)).train_examples(0, 50)
    many = countdown.source(countdown.CountdownConfig(min_numbers=5, max_numbers=5)).train_examples(0, 50)
    assert {len(ex.prompt.split("->")[0].split()) for ex in few} == {2}
    assert {len(ex.prompt.split("->")[0].split()) for ex in many} == {5}
    steps = [ex.solution.count(";") for ex in modular.source(modular.ModularConfig(max_exponent=9)).train_examples(0, 200)]
    assert min(steps) == 1 and max(steps) == 8


@pytest.mark.parametrize(
    "cls, kwargs, field",
    [
        (countdown.CountdownConfig, {"min_numbers": 1}, "min_numbers"),
        (countdown.CountdownConfig, {"operators": "/"}, "operators"),
        (sorting.SortingConfig, {"max_length": 1}, "max_length"),
        (modular.ModularConfig, {"max_exponent": 1}, "max_exponent"),
        (modular.ModularConfig, {"min_modulus": 2}, "min_modulus"),
    ],
)
def test_bad_task_configs_name_the_field(cls, kwargs, field):
    with pytest.raises(ValueError, match=field):
        cls(**kwargs)


def test_too_small_split_raises_a_clear_error():
    source = sorting.source(sorting.SortingConfig(min_length=2, max_length=2, max_value=1, test_fraction=0.5))
    with pytest.raises(ValueError, match="too small"):
        source.test_examples(50)


@pytest.mark.parametrize("name", ["arithmetic", "countdown", "sorting", "modular"])
def test_registry_builds_every_task_from_the_default_config(name):
    config = default.get_config()
    config.task.name = name
    task = tasks.build(config.task, seed=0)
    assert task.name == name and task.reward in rewards.REWARDS
    examples = task.source.train_examples(0, 4)
    assert len(examples) == 4
    assert all(rewards.get_reward(task.reward)(ex.solution, ex.answer) == 1.0 for ex in examples)


def test_registry_arithmetic_is_the_arithmetic_module():
    from rl4llm.data import arithmetic

    config = default.get_config()
    cfg = arithmetic.ArithmeticConfig(
        min_operands=config.task.min_operands, max_operands=config.task.max_operands, max_value=config.task.max_value,
        operators=config.task.operators, test_fraction=config.task.test_fraction, seed=5,
    )
    task = tasks.build(config.task, seed=5)
    assert task.source.train_examples(7, 16) == arithmetic.train_examples(cfg, 7, 16)
    assert task.source.test_examples(16) == arithmetic.test_examples(cfg, 16)
    with pytest.raises(ValueError, match="unknown task"):
        tasks.build(ml_collections.ConfigDict({"name": "chess"}), seed=0)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"name": "chess"}, "config.task.name='chess'"),
        ({"name": "countdown", "countdown.min_numbers": 1}, "config.task.countdown: CountdownConfig: need 2 <= min_numbers"),
        ({"name": "local"}, "config.task.local.train_path=''"),
        ({"extra_rewards": "nonsense:0.1"}, "unknown reward 'nonsense'"),
        ({"extra_rewards": "math:x"}, "config.task.extra_rewards='math:x'"),
        ({"extra_rewards_mode": "max"}, "config.task.extra_rewards_mode='max'"),
        ({"length_shaping": "shorter"}, "config.task.length_shaping='shorter'"),
        ({"length_shaping": "laser", "length_shaping_kwargs.buffer": 4}, "config.task.length_shaping_kwargs.buffer"),
        ({"reward": "countdown", "pseudo_labels": "majority_vote"}, "has no answer extractor"),
        ({"reward_workers": -1}, "config.task.reward_workers=-1"),
        ({"reward_timeout_s": 0.0}, "config.task.reward_timeout_s=0.0"),
    ],
)
def test_task_config_errors_name_the_field(overrides, message):
    config = default.get_config()
    for path, value in overrides.items():
        node = config.task
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    with pytest.raises(config_lib.ConfigError, match=re.escape(message)):
        config_lib.parse(config)


def test_default_config_with_every_pipeline_option_is_valid():
    config = default.get_config()
    config.task.update(
        {"extra_rewards": "format_answer_tag:0.1", "extra_rewards_mode": "if_correct", "length_shaping": "laser",
         "pseudo_labels": "majority_vote", "reward_workers": 2}
    )
    config.task.length_shaping_kwargs.target = 8
    config_lib.parse(config)
