"""Guess the number (digest §3 T4; tinker-cookbook / RLVE ``guess_number``): find a hidden integer in
``[low, high]`` from higher / lower feedback.

Each task draws its own range: ``width = high - low + 1`` uniform in ``[min_width, max_width]``, ``low`` uniform
with ``high <= max_number``, the number uniform in the range (so the held-out split has many instances, and the
policy has to search, not memorise one search tree).

Transcript (``show_range=True``, the default: the feedback also names the interval still consistent with it,
so the state is in the last observation and the tiny model need not track it)::

    guess 0..63
    <guess>32</guess>=higher 33..63
    <guess>48</guess>=lower 33..47
    <guess>40</guess>                       (correct: the episode ends, observation "=correct")

With ``show_range=False`` the feedback is only ``higher`` / ``lower``. A guess that is not an integer in
``[low, high]`` is an invalid action (``"=Error: not a number in 0..63"``). The scripted expert is binary search
(floor midpoint of the consistent interval): it needs at most ``ceil(log2(max_width + 1))`` guesses, and
``max_turns`` must allow that.

Turn reward components (``turn_reward_keys``):

* ``valid_action``: 1.0 iff the action was a well-formed guess;
* ``consistent``: 1.0 iff the guess lay in the interval still consistent with the feedback so far;
* ``info_gain``: the fraction of the consistent candidates the answer ruled out, ``1 - |C_after| / |C_before|``
  (1.0 on the correct guess) -- the posterior-mass gain of a uniform prior, IGPO's quantity for this task.

Outcome: ``correct`` (found the number), ``format_ok``. Privileged info: the number.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from rl4llm.envs import base

_STREAMS = (0x6E55, 0x6E57, 0x6E5C)  # train, test, corpus


@dataclasses.dataclass(frozen=True)
class GuessNumberConfig:
    """Ranges of ``min_width..max_width`` numbers inside ``0..max_number``; ``max_turns`` guesses at most."""

    max_number: int = 63
    min_width: int = 8
    max_width: int = 32
    max_turns: int = 7
    show_range: bool = True
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.min_width <= self.max_width <= self.max_number + 1:
            raise ValueError(
                f"GuessNumberConfig: need 2 <= min_width <= max_width <= max_number + 1, got min_width="
                f"{self.min_width}, max_width={self.max_width}, max_number={self.max_number}."
            )
        if self.max_turns < binary_search_turns(self.max_width):
            raise ValueError(
                f"GuessNumberConfig.max_turns={self.max_turns}: binary search over {self.max_width} numbers needs "
                f"up to {binary_search_turns(self.max_width)} guesses; raise max_turns or lower max_width."
            )
        if not 0.0 <= self.test_fraction < 1.0:
            raise ValueError(f"GuessNumberConfig.test_fraction={self.test_fraction}: must be in [0, 1).")


def binary_search_turns(width: int) -> int:
    """Worst-case guesses of floor-midpoint binary search over ``width`` numbers: ``ceil(log2(width + 1))``."""
    return math.ceil(math.log2(width + 1))


def _interval(lo: int, hi: int) -> str:
    return f"{lo}..{hi}"


class GuessNumberEnv(base.AgentEnv):
    name = "guess_number"
    action_tags = ("guess",)
    turn_reward_keys = ("valid_action", "consistent", "info_gain")

    def __init__(self, cfg: GuessNumberConfig):
        super().__init__(cfg.max_turns)
        self.cfg = cfg
        self._low = self._high = self._target = 0
        self._lo = self._hi = 0  # the interval still consistent with the feedback

    def _reset(self, task: base.TaskSpec, seed: int) -> None:
        self._low, self._high, self._target = (int(task.data[k]) for k in ("low", "high", "target"))
        self._lo, self._hi = self._low, self._high

    def _act(self, action: base.Action) -> base.Turn:
        arg = action.arg
        if not (arg.isascii() and arg.isdigit() and len(arg) <= 9 and self._low <= int(arg) <= self._high):
            return base.Turn(base.error_observation(f"not a number in {_interval(self._low, self._high)}"), valid=False)
        guess = int(arg)
        consistent = self._lo <= guess <= self._hi
        before = self._hi - self._lo + 1
        if guess == self._target:
            components = {"consistent": 1.0, "info_gain": 1.0}
            return base.Turn(base.observation("correct"), done=True, solved=True, components=components)
        if guess < self._target:
            word, self._lo = "higher", max(self._lo, guess + 1)
        else:
            word, self._hi = "lower", min(self._hi, guess - 1)
        gain = 1.0 - (self._hi - self._lo + 1) / before
        text = f"{word} {_interval(self._lo, self._hi)}" if self.cfg.show_range else word
        return base.Turn(base.observation(text), components={"consistent": float(consistent), "info_gain": gain})


def _draw(rng: np.random.Generator, cfg: GuessNumberConfig, k: int) -> list[base.TaskSpec]:
    out = []
    for _ in range(k):
        width = int(rng.integers(cfg.min_width, cfg.max_width, endpoint=True))
        low = int(rng.integers(0, cfg.max_number - width + 1, endpoint=True))
        high = low + width - 1
        target = int(rng.integers(low, high, endpoint=True))
        data = {"low": low, "high": high, "target": target}
        out.append(base.TaskSpec(GuessNumberEnv.name, f"guess {_interval(low, high)}\n", str(target), data))
    return out


def _consistent_interval(task: base.TaskSpec, turns: list[tuple[str, str]]) -> tuple[int, int]:
    """The interval consistent with the feedback so far, read from the transcript (works with either feedback)."""
    lo, hi = task.data["low"], task.data["high"]
    for action, obs in turns:
        parsed = base.parse_action(action, GuessNumberEnv.action_tags)
        if isinstance(parsed, str) or not parsed.arg.isdigit():
            continue
        guess = int(parsed.arg)
        if obs.startswith("=higher"):
            lo = max(lo, guess + 1)
        elif obs.startswith("=lower"):
            hi = min(hi, guess - 1)
    return lo, hi


def expert(cfg: GuessNumberConfig) -> base.Policy:
    """Binary search: guess the floor midpoint of the consistent interval."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        lo, hi = _consistent_interval(task, turns)
        return f"<guess>{(lo + hi) // 2}</guess>"

    return policy


def explore(cfg: GuessNumberConfig) -> base.Policy:
    """A uniformly random guess in the task's range (the noisy expert's exploration, and the random baseline)."""

    def policy(task: base.TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        return f"<guess>{int(rng.integers(task.data['low'], task.data['high'], endpoint=True))}</guess>"

    return policy


def alphabet(cfg: GuessNumberConfig) -> str:
    """Every character of the env's texts."""
    return base.alphabet_of("0123456789 .\nguess higher lower correct Error: not a number in")


def source(cfg: GuessNumberConfig) -> base.TaskSource:
    """The env's task streams (``base.TaskSource``)."""
    return base.task_source(
        cfg, GuessNumberEnv, _draw, expert, alphabet(cfg), streams=_STREAMS,
        hint="raise max_number or widen [min_width, max_width]",
    )
