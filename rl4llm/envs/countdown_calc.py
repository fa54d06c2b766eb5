"""Countdown with a calculator tool (digest §3 T7; RAGEN Countdown): reach the target with the given numbers, each
used exactly once, ``+ - * /`` and parentheses, computing intermediate values with a ``calc`` tool.

Problems are the single-turn task's (``rl4llm.data.countdown.draw``: a random left fold of the numbers with
random operators, kept when the target lies in ``[0, max_target]``). Transcript::

    3 7 5 -> 50
    <calc>3+7</calc>=10
    <calc>10*5</calc>=50
    <answer>(3+7)*5</answer>                  (ends the episode)

``<calc>expr</calc>`` returns the exact value of ``expr`` (the ``calculator`` tool of ``rl4llm.envs.tools``: an
``ast`` walk over fractions, never ``eval``; ``"=Error: bad expression"`` for anything else, a valid action whose
tool failed). ``<answer>equation</answer>`` ends the episode; it is correct iff ``rl4llm.rewards.countdown``
scores it 1.0 (every number used once, value equal to the target, exactly). The scripted expert computes the
reference equation one operation per ``calc`` turn, then answers it (``n`` turns for ``n`` numbers).

Turn reward components (``turn_reward_keys``):

* ``valid_action``: the action parsed;
* ``tool_success``: the calculator evaluated the expression;
* ``hit_target``: the calculated value equals the target.

Outcome: ``correct``, ``format_ok``. Privileged info: the reference equation (one correct answer).
"""

from __future__ import annotations

import ast
import dataclasses
import json

import numpy as np

from rl4llm.data import countdown as countdown_data
from rl4llm.envs import base
from rl4llm.envs import tools as tools_lib
from rl4llm.rewards import countdown as countdown_reward

_STREAMS = (0xCA1C, 0xCA1D, 0xCA1E)  # train, test, corpus
_OPERATORS = "+-*"
_OP_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


@dataclasses.dataclass(frozen=True)
class CountdownCalcConfig:
    """The single-turn task's problem knobs (validated by ``rl4llm.data.countdown.CountdownConfig``; operators
    ``+ - *``), ``max_turns`` turns at most (the expert needs one per number), and the calculator's timeout and
    retries."""

    min_numbers: int = 3
    max_numbers: int = 4
    max_number: int = 20
    max_target: int = 100
    max_turns: int = 6
    tool_timeout_s: float = 5.0
    tool_retries: int = 1
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        self.problems()  # validates the problem knobs
        if self.max_turns < self.max_numbers:
            raise ValueError(
                f"CountdownCalcConfig.max_turns={self.max_turns}: {self.max_numbers} numbers need "
                f"{self.max_numbers - 1} calc turns and an answer; set max_turns >= {self.max_numbers}."
            )
        tools_lib.check_call_limits(self.tool_timeout_s, self.tool_retries, "CountdownCalcConfig.tool_*")

    def problems(self) -> countdown_data.CountdownConfig:
        """The single-turn task config that draws this env's problems."""
        return countdown_data.CountdownConfig(
            min_numbers=self.min_numbers, max_numbers=self.max_numbers, max_number=self.max_number,
            max_target=self.max_target, test_fraction=self.test_fraction, seed=self.seed,
        )


class CountdownCalcEnv(base.AgentEnv):
    name = "countdown_calc"
    action_tags = ("calc", "answer")
    turn_reward_keys = ("valid_action", "tool_success", "hit_target")

    def __init__(self, cfg: CountdownCalcConfig):
        super().__init__(cfg.max_turns)
        self.cfg = cfg
        self._tools = tools_lib.Tools(
            {"calc": tools_lib.calculator}, timeout_s=cfg.tool_timeout_s, retries=cfg.tool_retries
        )
        self._reference = ""  # {"numbers": [...], "target": t}, what rewards.countdown checks against
        self._target = 0

    def _reset(self, task: base.TaskSpec, seed: int) -> None:
        self._reference, self._target = json.dumps(task.data), task.data["target"]

    def _act(self, action: base.Action) -> base.Turn:
        if action.tag == "answer":
            solved = countdown_reward.score(f"<answer>{action.arg}</answer>", self._reference) == 1.0
            return base.Turn(base.observation("correct" if solved else "wrong"), done=True, solved=solved)
        result = self._tools.call("calc", action.arg)
        hit = result.success and result.text == str(self._target)
        return base.Turn(
            base.observation(result.text), tool_name="calc", tool_success=result.success,
            components={"hit_target": float(hit)},
        )


def _draw(rng: np.random.Generator, cfg: CountdownCalcConfig, k: int) -> list[base.TaskSpec]:
    out = []
    for example in countdown_data.draw(rng, cfg.problems(), k):
        reference = json.loads(example.answer)
        equation = countdown_reward.extract_equation(example.solution)
        out.append(base.TaskSpec(CountdownCalcEnv.name, example.prompt, equation, reference))
    return out


def _steps(node: ast.expr) -> tuple[int, list[str]]:
    """(value, calculator inputs) of a parsed equation: each binary operation as ``"<left value><op><right
    value>"``, operands before the operation that uses them."""
    if isinstance(node, ast.Constant):
        return node.value, []
    left, left_steps = _steps(node.left)
    right, right_steps = _steps(node.right)
    step = f"{left}{_OP_SYMBOLS[type(node.op)]}{right}"
    return int(tools_lib.calculator(step)), left_steps + right_steps + [step]


def reference_steps(task: base.TaskSpec) -> list[str]:
    """The reference equation as calculator inputs, one operation each: ``(3+7)*5`` -> ``["3+7", "10*5"]``."""
    return _steps(ast.parse(task.answer, mode="eval").body)[1]


def expert(cfg: CountdownCalcConfig) -> base.Policy:
    """One ``calc`` turn per reference step not yet computed, in order; then the reference equation."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        done = {action for action, obs in turns if not obs.startswith("=Error")}
        for step in reference_steps(task):
            if f"<calc>{step}</calc>" not in done:
                return f"<calc>{step}</calc>"
        return f"<answer>{task.answer}</answer>"

    return policy


def explore(cfg: CountdownCalcConfig) -> base.Policy:
    """A random action: ``calc`` of two of the numbers with a random operator, or (1 in 4) an answer folding all
    numbers in a random order with random operators."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        numbers = task.data["numbers"]
        order = rng.permutation(len(numbers)).tolist()
        ops = [_OPERATORS[i] for i in rng.integers(0, len(_OPERATORS), size=len(numbers) - 1)]
        if rng.random() < 0.25:
            return f"<answer>{countdown_data.render(numbers, order, ops)[0]}</answer>"
        return f"<calc>{numbers[order[0]]}{ops[0]}{numbers[order[1]]}</calc>"

    return policy


def alphabet(cfg: CountdownCalcConfig) -> str:
    """Every character of the env's texts."""
    return base.alphabet_of("0123456789 ->\n+*/()", "Error: bad expression calc failed timed out correct wrong")


def source(cfg: CountdownCalcConfig) -> base.TaskSource:
    """The env's task streams (``base.TaskSource``)."""
    return base.task_source(
        cfg, CountdownCalcEnv, _draw, expert, alphabet(cfg), streams=_STREAMS, hint="raise max_number/max_numbers"
    )
