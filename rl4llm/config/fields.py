"""A config field: its default, a one-line doc and its bound, declared together (`param`), and the bounds
(`AtLeast`, `Between`, `OneOf`, `Boolean`, `Satisfies`), each a requirement on the value alone. Checks that read
several fields or sections are in `rl4llm.config.validation`."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection


@dataclasses.dataclass(frozen=True)
class AtLeast:
    """An integer (not a bool) >= minimum."""

    minimum: int = 1

    def __str__(self) -> str:
        return f"integer >= {self.minimum}"

    def error(self, value) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < self.minimum:
            return f"must be an integer >= {self.minimum}"
        return None


@dataclasses.dataclass(frozen=True)
class Between:
    """A number in [low, high] ((low, high] when low_open)."""

    low: float
    high: float
    low_open: bool = False

    def __str__(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low}, {self.high}]"

    def error(self, value) -> str | None:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if number and (self.low < value if self.low_open else self.low <= value) and value <= self.high:
            return None
        return f"must lie in {self}"


@dataclasses.dataclass(frozen=True)
class OneOf:
    """A member of `choices` (a registry table's names, a tuple of modes)."""

    choices: Collection

    def __str__(self) -> str:
        return "one of " + ", ".join(sorted(self.choices))

    def error(self, value) -> str | None:
        if value in self.choices:
            return None
        return f"unknown; allowed: {', '.join(sorted(self.choices))}"


@dataclasses.dataclass(frozen=True)
class Boolean:
    """True or False (not 0 / 1)."""

    def __str__(self) -> str:
        return "True or False"

    def error(self, value) -> str | None:
        return None if isinstance(value, bool) else "must be True or False"


@dataclasses.dataclass(frozen=True)
class Satisfies:
    """`predicate(value)` holds; else `requirement` is the message."""

    predicate: Callable[[Any], bool]
    requirement: str

    def __str__(self) -> str:
        return self.requirement.removeprefix("must be ")

    def error(self, value) -> str | None:
        try:
            ok = self.predicate(value)
        except (AttributeError, TypeError, ValueError):
            ok = False
        return None if ok else self.requirement


def param(default, doc: str, check=None, **metadata):
    """A config field: `default` (a section class, dict or list is built fresh per instance), its one-line `doc`
    and its bound (`check.error(value)` -> None or the requirement). Extra `metadata`: `placeholders` (a callable
    giving the command-line placeholders of a `*_kwargs` field, `rl4llm.config.hyperparameter_fields`)."""
    meta = {"doc": doc, "check": check, **metadata}
    if isinstance(default, type):
        return dataclasses.field(default_factory=default, metadata=meta)
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
