"""The multi-turn environment protocol (host-side Python, never jitted); digest ``multi_turn_agents.md`` §2.1.

An episode alternates policy **actions** and environment **observations**::

    obs0, info = env.reset(task, seed)        # obs0 = the task statement (the prompt), ends with "\\n"
    while True:
        action_text = policy(...)             # generation stops at one of env.action_stop_strings
        res = env.step(action_text)           # StepResult(obs_text, reward, done, info)
        if res.done: break
        context += action_text + res.obs_text # observation tokens get loss mask 0
    env.outcome()                             # terminal verifiable scores, fixed keys

Transcript format (compact, for a tiny char-level tokenizer): an action is exactly one ``<tag>arg</tag>``; an
observation is ``"=" + text + "\\n"`` (:func:`observation`), so a turn reads ``<search>kavo</search>=kavo: ...\\n``.

**Action parsing is strict** (:func:`parse_action`): after stripping surrounding whitespace the action text must
be exactly ``<tag>arg</tag>`` with ``tag`` one of the env's tags, ``arg`` non-empty, without ``<`` or ``>`` and at
most :data:`MAX_ARG_CHARS` characters. Anything else is NOT an exception: ``step`` returns the observation
``"=Error: could not parse action\\n"`` (or a more specific error), ``info['valid_action'] = False``, and the
episode goes on (it counts as a turn). Model output never raises; only caller bugs do (``step`` before
``reset`` or after ``done``).

``info`` of every ``step`` has these keys:

* ``valid_action`` (bool): the action parsed and was legal in the current state;
* ``tool_name`` (str): the tool the action called, ``""`` when it called none (an answer, a move, a parse error);
* ``tool_success`` (bool): the tool ran and returned a result (False on a tool error / timeout, or no tool call);
* ``reward_components`` (dict[str, float]): this turn's reward components, keys exactly ``env.turn_reward_keys``
  (fixed per env and documented in its module; the first is always ``valid_action``, 1.0 iff the action was
  valid, and where present ``tool_success`` mirrors the flag above); MT-GRPO / G-RA / IGPO combine them, the env
  does not;
* ``truncated`` (bool): the episode ended because it reached ``max_turns`` without finishing;
* ``turn`` (int): the index of the turn just taken (0-based).

``StepResult.reward`` is the env's own scalar immediate reward: 1.0 on the turn that solves the task, else 0.0,
so an episode's rewards sum to ``outcome()['correct']``. ``outcome()`` has exactly the keys
``env.outcome_keys``; every env here has ``correct`` (0/1, exact verification) and ``format_ok`` (1 iff every
turn's action was valid; DeepDive's strict reward is ``correct * format_ok``).

``privileged_info()`` is the ground-truth answer text (IGPO teacher-forces it; asymmetric critics read it). It is
never in the prompt; observations reveal it only as the task's own feedback does (kg_search's last search result
names the answer entity).

Determinism: an episode is a pure function of ``(task, seed, actions)``. ``task`` (:class:`TaskSpec`) is one
problem instance, drawn by the env's task source from a seed; ``seed`` drives the env's own randomness during the
episode (e.g. slippery moves), so a GRPO group shares ``(task, seed)`` (digest §5.4). ``clone()`` is a deep copy:
stepping the clone never changes the original (tree / branching rollouts, ARPO).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import re
from typing import Any, Callable, ClassVar, NamedTuple, Sequence

import numpy as np

from rl4llm.data import procedural

# Longest accepted action argument (characters); longer ones are parse errors, which keeps tool inputs bounded.
MAX_ARG_CHARS = 200
PARSE_ERROR = "could not parse action"
_ACTION = re.compile(r"<([a-z_]+)>([^<>]*)</([a-z_]+)>")


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """One problem instance of env ``env``.

    ``prompt`` is the initial observation (the task statement, ending in ``"\\n"``); ``answer`` the ground-truth
    answer text (what ``privileged_info()`` returns); ``data`` the instance's details (JSON-able; read-only by
    convention), which ``reset`` reads. The train / held-out split goes by prompt and answer (:func:`split_key`).
    """

    env: str
    prompt: str
    answer: str
    data: dict[str, Any]


class StepResult(NamedTuple):
    """What ``step`` returns; ``obs_text`` is appended to the context with loss mask 0 (unless ``done``)."""

    obs_text: str
    reward: float
    done: bool
    info: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Action:
    """A parsed action ``<tag>arg</tag>``."""

    tag: str
    arg: str


def observation(text: str) -> str:
    """The observation text of ``text`` in the transcript format: ``"=" + text + "\\n"``."""
    return f"={text}\n"


def error_observation(reason: str) -> str:
    """The observation of an invalid action: ``"=Error: <reason>\\n"``."""
    return observation(f"Error: {reason}")


def alphabet_of(*texts: str) -> str:
    """The sorted distinct characters of ``texts`` plus every character the base class's own texts use (parse
    errors, the observation marker, tags): an env's tokenizer alphabet line."""
    base = error_observation(PARSE_ERROR) + "unknown action bad argument<>/_" + "abcdefghijklmnopqrstuvwxyz"
    return "".join(sorted(set("".join(texts) + base)))


def parse_action(text: str, tags: Sequence[str]) -> Action | str:
    """The :class:`Action` in ``text``, or a short error reason (a str) when ``text`` is not exactly one
    ``<tag>arg</tag>`` with ``tag`` in ``tags`` (module docstring). Never raises on any text."""
    match = _ACTION.fullmatch(text.strip())
    if match is None or match.group(1) != match.group(3):
        return PARSE_ERROR
    tag, arg = match.group(1), match.group(2).strip()
    if tag not in tags:
        return f"unknown action {tag}"
    if not arg or len(arg) > MAX_ARG_CHARS:
        return f"bad {tag} argument"
    return Action(tag, arg)


class AgentEnv(abc.ABC):
    """Base class of the multi-turn environments (module docstring has the contract).

    Subclasses set the class attributes and implement :meth:`_reset` and :meth:`_act` (one parsed action -> a
    :class:`Turn`); this class does the parsing, the turn cap, and the bookkeeping of ``info`` and ``outcome()``.
    ``turn_reward_keys`` starts with ``"valid_action"`` (filled here, 1.0 iff the action was valid); where it has
    ``"tool_success"`` that is filled here too (1.0 iff a tool ran successfully); ``_act`` supplies the others.
    """

    name: ClassVar[str]
    action_tags: ClassVar[tuple[str, ...]]
    turn_reward_keys: ClassVar[tuple[str, ...]]
    outcome_keys: ClassVar[tuple[str, ...]] = ("correct", "format_ok")

    def __init__(self, max_turns: int):
        if self.turn_reward_keys[:1] != ("valid_action",):
            raise TypeError(f"{type(self).__name__}.turn_reward_keys must start with 'valid_action'.")
        if max_turns < 1:
            raise ValueError(f"{type(self).__name__}: max_turns={max_turns} must be >= 1.")
        self.max_turns = max_turns
        self._task: TaskSpec | None = None
        self._turn = 0
        self._done = False
        self._all_valid = True
        self._solved = False

    @property
    def action_stop_strings(self) -> tuple[str, ...]:
        """Generation of an action stops after any of these (the closing tags)."""
        return tuple(f"</{tag}>" for tag in self.action_tags)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def turn(self) -> int:
        """Number of turns taken so far."""
        return self._turn

    def reset(self, task: TaskSpec, seed: int) -> tuple[str, dict[str, Any]]:
        """Starts an episode of ``task`` (with env randomness from ``seed``); returns (task.prompt, info)."""
        if task.env != self.name:
            raise ValueError(f"{type(self).__name__}.reset: task is for env {task.env!r}, not {self.name!r}.")
        self._task = task
        self._turn, self._done, self._all_valid, self._solved = 0, False, True, False
        self._reset(task, seed)
        return task.prompt, {"max_turns": self.max_turns}

    def step(self, action_text: str) -> StepResult:
        """One turn (module docstring). Invalid actions are observations, never exceptions."""
        if self._task is None:
            raise RuntimeError(f"{type(self).__name__}.step called before reset.")
        if self._done:
            raise RuntimeError(f"{type(self).__name__}.step called after the episode ended.")
        parsed = parse_action(action_text, self.action_tags)
        if isinstance(parsed, str):
            turn = Turn(error_observation(parsed), valid=False)
        else:
            turn = self._act(parsed)
        components = {key: 0.0 for key in self.turn_reward_keys}
        unknown = set(turn.components) - set(components)
        if unknown:
            raise KeyError(f"{type(self).__name__}: reward components {sorted(unknown)} not in turn_reward_keys.")
        components.update(turn.components)
        components["valid_action"] = float(turn.valid)
        if "tool_success" in components:
            components["tool_success"] = float(turn.tool_success)
        self._all_valid &= turn.valid
        self._solved |= turn.solved
        index = self._turn
        self._turn += 1
        truncated = not turn.done and self._turn >= self.max_turns
        self._done = turn.done or truncated
        info = {
            "valid_action": turn.valid,
            "tool_name": turn.tool_name,
            "tool_success": turn.tool_success,
            "reward_components": components,
            "truncated": truncated,
            "turn": index,
        }
        return StepResult(turn.obs_text, 1.0 if turn.solved else 0.0, self._done, info)

    def clone(self) -> "AgentEnv":
        """An independent deep copy (stepping it never changes ``self``)."""
        return copy.deepcopy(self)

    def outcome(self) -> dict[str, float]:
        """Terminal verifiable scores, keys ``outcome_keys``: ``correct`` (the task was solved) and ``format_ok``
        (every action so far was valid). Meaningful at any time; final once ``done``."""
        return {"correct": float(self._solved), "format_ok": float(self._all_valid)}

    def privileged_info(self) -> str | None:
        """The ground-truth answer text of the current task (never shown to the policy); None before reset."""
        return None if self._task is None else self._task.answer

    @abc.abstractmethod
    def _reset(self, task: TaskSpec, seed: int) -> None:
        """Sets the episode state from ``task`` (and ``seed`` for env randomness)."""

    @abc.abstractmethod
    def _act(self, action: Action) -> "Turn":
        """Applies one parsed action."""


@dataclasses.dataclass(frozen=True)
class Turn:
    """What a subclass's ``_act`` reports about one turn: its observation, whether the action was valid, whether
    it ends the episode (``done``) and solved the task (``solved``), the tool it called and whether that tool
    succeeded, and the env-specific reward components (see ``AgentEnv``)."""

    obs_text: str
    valid: bool = True
    done: bool = False
    solved: bool = False
    tool_name: str = ""
    tool_success: bool = False
    components: dict[str, float] = dataclasses.field(default_factory=dict)



# A policy for scripted rollouts: (task, turns so far as (action, observation) pairs, rng) -> the next action text.
Policy = Callable[[TaskSpec, list[tuple[str, str]], np.random.Generator], str]


def play(env: AgentEnv, task: TaskSpec, seed: int, policy: Policy, rng: np.random.Generator) -> list[tuple[str, str]]:
    """Runs ``policy`` on ``env`` from ``reset(task, seed)`` until done; returns the turns as (action, observation)
    pairs (the last observation is the one ``step`` returned on the final turn, which a rollout does not append)."""
    env.reset(task, seed)
    turns: list[tuple[str, str]] = []
    while not env.done:
        action = policy(task, turns, rng)
        turns.append((action, env.step(action).obs_text))
    return turns


def transcript(task: TaskSpec, turns: Sequence[tuple[str, str]]) -> str:
    """The text a rollout of ``turns`` produces: the prompt, then each action followed by its observation, except
    the final turn's observation (the episode is over)."""
    body = "".join(action + obs for action, obs in turns[:-1])
    return task.prompt + body + (turns[-1][0] if turns else "")


def noisy(expert: Policy, explore: Policy, p: float) -> Policy:
    """A noisy expert: each turn, ``explore``'s action with probability ``p``, else ``expert``'s (the expert then
    recovers from wherever the episode is)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"noisy: p={p} must be in [0, 1].")

    def policy(task: TaskSpec, turns: list[tuple[str, str]], rng: np.random.Generator) -> str:
        return explore(task, turns, rng) if rng.random() < p else expert(task, turns, rng)

    return policy


@dataclasses.dataclass(frozen=True)
class TaskSource:
    """An env's train / held-out task streams and tokenizer corpus: a ``rl4llm.data.procedural.ProblemSource``
    whose problems are :class:`TaskSpec` (same determinism and split rules as the single-turn tasks, the split going
    by :func:`split_key`, since a prompt may not show the hidden instance), plus ``env()`` (a fresh env) and the
    scripted ``expert`` whose transcripts make the corpus."""

    problems: procedural.ProblemSource
    env: Callable[[], AgentEnv]
    expert: Policy

    @property
    def alphabet(self) -> str:
        """Every character the env's texts use (the corpus's first line)."""
        return self.problems.alphabet

    def train_tasks(self, step: int, n: int) -> list[TaskSpec]:
        """The ``n`` training tasks of ``step`` (never held-out ones); a smaller ``n`` is a prefix of a larger."""
        return self.problems.train_examples(step, n)

    def test_tasks(self, n: int) -> list[TaskSpec]:
        """The fixed held-out set: ``n`` distinct tasks, independent of the seed; a prefix of any larger set."""
        return self.problems.test_examples(n)

    def corpus(self, n: int) -> list[str]:
        """Tokenizer-training text: the alphabet line, then ``n`` expert transcripts of training-split tasks."""
        env, rng = self.env(), np.random.default_rng(0)  # the expert is deterministic; rng only fills the signature
        tasks = self.problems.corpus_examples(n)
        return [self.alphabet] + [transcript(t, play(env, t, 0, self.expert, rng)) for t in tasks]


def split_key(task: TaskSpec) -> str:
    """The text a task's train / held-out split and distinctness go by: its prompt and its answer."""
    return task.prompt + "\x00" + task.answer


def task_source(
    cfg, env_cls: Callable[[Any], AgentEnv], draw: Callable, expert: Callable[[Any], Policy], alphabet: str, *,
    streams: tuple[int, int, int], hint: str,
) -> TaskSource:
    """The :class:`TaskSource` of env config ``cfg`` (its ``test_fraction`` and ``seed``): tasks ``draw(rng, cfg,
    k)``, envs ``env_cls(cfg)``, expert ``expert(cfg)``; ``streams`` (train, test, corpus) seed prefixes distinct
    per env, ``hint`` how to enlarge the task space (for the error raised when a split is too small)."""
    problems = procedural.ProblemSource.of(cfg, draw, streams=streams, alphabet=alphabet, hint=hint, key=split_key)
    return TaskSource(problems, lambda: env_cls(cfg), expert(cfg))
