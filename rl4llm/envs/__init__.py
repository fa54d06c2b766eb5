"""Multi-turn environments and tools (``rl4llm.envs.base`` has the protocol).

``ENVS`` maps an env name to its :class:`EnvEntry`: the config dataclass (its fields are the env's knobs,
validated on construction), the env class, and functions of the config giving the task source, the scripted
expert policy and the exploration (random) policy. Recipes select an env by name (``config.agent.env``) and set
its knobs in the section ``config.agent.<name>`` (:func:`section_defaults` gives the defaults;
:func:`build_config` validates a section and names the bad field).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

from rl4llm.envs import base
from rl4llm.envs import guess_number


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """One registered env: ``config_cls(**knobs)`` validates its knobs; ``source(cfg)`` gives its task streams
    (``base.TaskSource``, whose ``env()`` builds envs); ``expert(cfg)`` / ``explore(cfg)`` its scripted policies."""

    config_cls: type
    env_cls: type
    source: Callable[[Any], base.TaskSource]
    expert: Callable[[Any], base.Policy]
    explore: Callable[[Any], base.Policy]


ENVS: dict[str, EnvEntry] = {
    "guess_number": EnvEntry(
        guess_number.GuessNumberConfig, guess_number.GuessNumberEnv, guess_number.source, guess_number.expert,
        guess_number.explore,
    ),
}


def _entry(name: str) -> EnvEntry:
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; known: {', '.join(sorted(ENVS))}")
    return ENVS[name]


def section_defaults(name: str) -> dict[str, Any]:
    """Default knob values of env ``name``'s config section (without ``seed``: the run's seed is used)."""
    return {f.name: f.default for f in dataclasses.fields(_entry(name).config_cls) if f.name != "seed"}


def build_config(name: str, section: Mapping[str, Any], seed: int):
    """Env ``name``'s config from its section's knobs (unknown or missing knobs and bad values are ValueErrors
    that name the field)."""
    entry = _entry(name)
    known = set(section_defaults(name))
    unknown = set(section) - known
    if unknown:
        raise ValueError(
            f"config.agent.{name}: unknown field(s) {sorted(unknown)}; known: {sorted(known)}."
        )
    return entry.config_cls(**dict(section), seed=seed)


def source(name: str, section: Mapping[str, Any], seed: int) -> base.TaskSource:
    """Env ``name``'s task source from its config section (``build_config``)."""
    return _entry(name).source(build_config(name, section, seed))
