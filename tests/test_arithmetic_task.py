"""Tests for the built-in arithmetic task (rl4llm.data.arithmetic)."""

import itertools
import re

import pytest

from rl4llm.data import arithmetic
from rl4llm.data.arithmetic import ArithmeticConfig, Example


def _left_to_right(prompt: str) -> int:
    """Independent reference evaluator: left to right, no precedence."""
    tokens = re.findall(r"\d+|[-+*]", prompt.rstrip("="))
    value = int(tokens[0])
    for op, operand in zip(tokens[1::2], tokens[2::2]):
        value = {"+": value + int(operand), "-": value - int(operand), "*": value * int(operand)}[op]
    return value


def _check_solution(ex: Example) -> None:
    """Each step is 'lhs op rhs=result;', lhs restates the running result, '#answer' closes it."""
    *steps, final = ex.solution.split(";")
    operands = re.findall(r"\d+", ex.prompt)
    ops = re.findall(r"[-+*]", ex.prompt)
    assert len(steps) == len(ops) == len(operands) - 1
    running = int(operands[0])
    for step, op, operand in zip(steps, ops, operands[1:]):
        result = {"+": running + int(operand), "-": running - int(operand), "*": running * int(operand)}[op]
        assert step == f"{running}{op}{operand}={result}"
        running = result
    assert final == f"#{running}" and ex.answer == str(running) == str(_left_to_right(ex.prompt))


def test_render_hand_cases():
    assert arithmetic.render_problem([37, 48, 19], "+-") == Example("37+48-19=", "37+48=85;85-19=66;#66", "66")
    assert arithmetic.render_problem([5, 9, 3], "-+") == Example("5-9+3=", "5-9=-4;-4+3=-1;#-1", "-1")
    # '*' is evaluated left to right too: (2+3)*4, not 2+(3*4).
    assert arithmetic.render_problem([2, 3, 4], "+*") == Example("2+3*4=", "2+3=5;5*4=20;#20", "20")
    assert arithmetic.render_problem([0, 7], "*").solution == "0*7=0;#0"


@pytest.mark.parametrize("operands, ops", [([1], ""), ([1, 2], "+-"), ([1, -2], "+"), ([1, 2], "/")])
def test_render_rejects_bad_input(operands, ops):
    with pytest.raises(ValueError):
        arithmetic.render_problem(operands, ops)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(min_operands=1), "min_operands"),
        (dict(min_operands=4, max_operands=3), "max_operands"),
        (dict(max_value=0), "max_value"),
        (dict(operators="+/"), "operators"),
        (dict(operators="++"), "operators"),
        (dict(operators=""), "operators"),
        (dict(test_fraction=1.0), "test_fraction"),
        (dict(seed=-1), "seed"),
    ],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        ArithmeticConfig(**kwargs)


@pytest.mark.parametrize(
    "cfg",
    [ArithmeticConfig(), ArithmeticConfig(min_operands=2, max_operands=5, max_value=999, operators="+-*", seed=3)],
)
def test_train_examples_are_correct_deterministic_and_never_held_out(cfg):
    batch = arithmetic.train_examples(cfg, step=5, batch_size=300)
    assert len(batch) == 300
    assert batch == arithmetic.train_examples(cfg, step=5, batch_size=300)
    assert batch[:17] == arithmetic.train_examples(cfg, step=5, batch_size=17)
    assert batch != arithmetic.train_examples(cfg, step=6, batch_size=300)
    for ex in batch:
        _check_solution(ex)
        assert not arithmetic.is_test_problem(ex.prompt, cfg)
        n = len(re.findall(r"\d+", ex.prompt))
        assert cfg.min_operands <= n <= cfg.max_operands
        assert all(0 <= int(v) <= cfg.max_value for v in re.findall(r"\d+", ex.prompt))
        assert set(re.findall(r"[-+*]", ex.prompt)) <= set(cfg.operators)


def test_train_examples_depend_on_seed_and_cover_the_distribution():
    a = arithmetic.train_examples(ArithmeticConfig(seed=0), 0, 200)
    b = arithmetic.train_examples(ArithmeticConfig(seed=1), 0, 200)
    assert a != b
    cfg = ArithmeticConfig(min_operands=2, max_operands=4, operators="+-*")
    batch = arithmetic.train_examples(cfg, 0, 2000)
    assert {len(re.findall(r"[-+*]", ex.prompt)) for ex in batch} == {1, 2, 3}
    assert set("".join(ex.prompt for ex in batch)) == set("0123456789+-*=")
    assert any(ex.answer.startswith("-") for ex in batch)


def test_test_examples_fixed_distinct_held_out_and_disjoint_from_train():
    cfg = ArithmeticConfig()
    held_out = arithmetic.test_examples(cfg, 500)
    assert held_out == arithmetic.test_examples(ArithmeticConfig(seed=7), 500)  # independent of seed
    assert held_out[:50] == arithmetic.test_examples(cfg, 50)
    prompts = {ex.prompt for ex in held_out}
    assert len(prompts) == 500
    assert all(arithmetic.is_test_problem(p, cfg) for p in prompts)
    for ex in held_out:
        _check_solution(ex)
    train_prompts = {ex.prompt for step in range(10) for ex in arithmetic.train_examples(cfg, step, 500)}
    assert not train_prompts & prompts


def test_split_fraction_and_nesting():
    cfg = ArithmeticConfig(min_operands=2, max_operands=2, max_value=99)
    prompts = [arithmetic.render_problem([a, b], op).prompt for a in range(100) for b in range(100) for op in "+-"]
    held = [p for p in prompts if arithmetic.is_test_problem(p, cfg)]
    assert 0.08 < len(held) / len(prompts) < 0.12
    larger = ArithmeticConfig(min_operands=2, max_operands=2, test_fraction=0.3)
    assert all(arithmetic.is_test_problem(p, larger) for p in held)
    assert not any(arithmetic.is_test_problem(p, ArithmeticConfig(test_fraction=0.0)) for p in prompts)


def test_problem_space_size_matches_enumeration():
    cfg = ArithmeticConfig(min_operands=2, max_operands=3, max_value=4, operators="+*")
    prompts = {
        arithmetic.render_problem(vals, ops).prompt
        for n in (2, 3)
        for vals in itertools.product(range(5), repeat=n)
        for ops in itertools.product("+*", repeat=n - 1)
    }
    assert arithmetic.problem_space_size(cfg) == len(prompts) == 25 * 2 + 125 * 4
    assert arithmetic.problem_space_size(ArithmeticConfig()) == 100**3 * 4


def test_tiny_space_fails_loudly():
    cfg = ArithmeticConfig(min_operands=2, max_operands=2, max_value=1, operators="+")  # 4 problems
    with pytest.raises(ValueError, match="too small"):
        arithmetic.test_examples(cfg, 10)
    with pytest.raises(ValueError, match="test_fraction"):
        arithmetic.test_examples(ArithmeticConfig(test_fraction=0.0), 1)


def test_corpus_covers_alphabet_and_is_deterministic():
    cfg = ArithmeticConfig()
    lines = list(arithmetic.corpus(cfg, 100))
    assert len(lines) == 101 and lines == list(arithmetic.corpus(cfg, 100))
    assert set("".join(lines)) == set(arithmetic.ALPHABET)
    assert not any(arithmetic.is_test_problem(line[: line.index("=") + 1], cfg) for line in lines[1:])
