"""Tools an env's actions call: a registry ``name -> fn(args: str) -> str`` with a timeout and retries.

:class:`Tools` calls a tool by name and ALWAYS returns a :class:`ToolResult` (text, success): the tool's output,
or an error text (``"Error: ..."``) that the env shows as the observation. Nothing a tool does with the model's
arguments raises into the rollout loop:

* a tool raises :class:`ToolError` for bad arguments (its message becomes the error text; not retried: the same
  arguments fail the same way);
* a tool that raises anything else, or runs past ``timeout_s``, is retried ``retries`` times (default 1, as ARPO /
  VerlTool), then reported as ``"Error: <name> failed"`` / ``"Error: <name> timed out"``.

The timeout runs the call in a daemon thread and stops waiting for it; a Python thread cannot be killed, so a
timed-out call keeps running in the background until it returns (documented limitation). Tools that run
untrusted code must therefore bound themselves: :func:`python` runs the program in the namespace sandbox
(``rl4llm.rewards.sandbox``), whose own wall clock kills it; generated code never runs in this process.

Built-in tools: :func:`calculator` (exact arithmetic of ``+ - * /`` and parentheses over integers, parsed with
``ast``, never ``eval``), :func:`python` (the sandbox; stdout of the program), :func:`search` (lookup in a local
corpus ``key -> text``, e.g. the facts of a knowledge graph's entities).
"""

from __future__ import annotations

import dataclasses
import fractions
import threading
from typing import Callable, Mapping

from rl4llm.rewards import countdown
from rl4llm.rewards import sandbox

# Longest tool output shown in an observation (characters); longer output is cut with a marker.
MAX_OUTPUT_CHARS = 200
TRUNCATED = "...(cut)"


class ToolError(Exception):
    """A tool's expected failure on bad arguments; the message is shown to the policy as ``Error: <message>``."""


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """``text``: the tool's output, or ``"Error: ..."``; ``success``: the tool ran and returned an output."""

    text: str
    success: bool


def _call_with_timeout(fn: Callable[[str], str], args: str, timeout_s: float) -> tuple[str, object]:
    """Runs ``fn(args)`` in a daemon thread; ("ok", output) / ("raised", exception) / ("timeout", None)."""
    box: list[tuple[str, object]] = []

    def target() -> None:
        try:
            box.append(("ok", fn(args)))
        except BaseException as e:  # reported to the caller, never propagated
            box.append(("raised", e))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return box[0] if box else ("timeout", None)


def cut(text: str, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """``text`` cut to ``max_chars`` characters, ending in :data:`TRUNCATED` when it was longer."""
    return text if len(text) <= max_chars else text[: max_chars - len(TRUNCATED)] + TRUNCATED


def check_call_limits(timeout_s: float, retries: int, owner: str) -> None:
    """ValueError naming ``owner``'s fields unless ``timeout_s > 0`` and ``retries >= 0``."""
    if timeout_s <= 0 or retries < 0:
        raise ValueError(f"{owner}: timeout_s={timeout_s} must be > 0 and retries={retries} >= 0.")


class Tools:
    """A registry of tools ``name -> fn(args) -> str``, called with a timeout and retries (module docstring)."""

    def __init__(self, tools: Mapping[str, Callable[[str], str]], *, timeout_s: float = 5.0, retries: int = 1):
        check_call_limits(timeout_s, retries, "Tools")
        self._tools = dict(tools)
        self.timeout_s = timeout_s
        self.retries = retries

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def call(self, name: str, args: str) -> ToolResult:
        """Calls tool ``name`` on ``args``; never raises (module docstring). Output is cut to MAX_OUTPUT_CHARS."""
        if name not in self._tools:
            return ToolResult(f"Error: unknown tool {name}", False)
        failure = "failed"
        for _ in range(self.retries + 1):
            status, value = _call_with_timeout(self._tools[name], args, self.timeout_s)
            if status == "ok" and isinstance(value, str):
                return ToolResult(cut(value), True)
            if isinstance(value, ToolError):
                return ToolResult(cut(f"Error: {value}"), False)
            failure = "timed out" if status == "timeout" else "failed"
        return ToolResult(f"Error: {name} {failure}", False)


def format_number(value: fractions.Fraction) -> str:
    """An exact value as text: ``"12"``, ``"-3"``, or ``"7/2"``."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def calculator(expression: str) -> str:
    """The exact value of ``expression`` (integers, ``+ - * /``, parentheses, spaces; at most 200 characters):
    ``rl4llm.rewards.countdown.evaluate_equation``, an ``ast`` walk over fractions, so nothing is executed.
    Raises ToolError("bad expression") for anything else, including division by zero."""
    value = countdown.evaluate_equation(expression)
    if value is None:
        raise ToolError("bad expression")
    return format_number(value)


# Limits of the python tool's sandbox runs: a tool call is a short computation. A registry holding the python
# tool needs timeout_s > wall_s, so the sandbox's own clock ends a run before the registry stops waiting.
PYTHON_LIMITS = sandbox.Limits(wall_s=5.0, cpu_s=3, memory_mb=256, nproc=8, max_output_bytes=1 << 14)


def python(program: str, limits: sandbox.Limits = PYTHON_LIMITS) -> str:
    """The stdout of ``program`` run in the sandbox (``sandbox.run_program``; stdin empty). ToolError when it does
    not compile, raises or exits non-zero, runs out of time, or is killed by a limit."""
    status, output = sandbox.run_program(program, "", limits)
    if status == "error":
        raise ToolError("python could not run the program")
    if status == "timeout":
        raise ToolError("python program timed out")
    if output is None:
        raise ToolError("python program failed")
    return output


def search(corpus: Mapping[str, str]) -> Callable[[str], str]:
    """A search tool over ``corpus`` (key -> text): the text of the key equal to the query (stripped);
    ToolError("not found") otherwise."""

    def lookup(query: str) -> str:
        key = query.strip()
        if key not in corpus:
            raise ToolError("not found")
        return corpus[key]

    return lookup


# The built-in tools that need no per-task state, by name (search is built per task from its corpus).
BUILTIN: dict[str, Callable[[str], str]] = {"calc": calculator, "python": python}
