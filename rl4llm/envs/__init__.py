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
from rl4llm.envs import countdown_calc
from rl4llm.envs import grid_nav
from rl4llm.envs import guess_number
from rl4llm.envs import kg_search


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """One registered env: ``config_cls(**knobs)`` validates its knobs; ``source(cfg)`` gives its task streams
    (``base.TaskSource``, whose ``env()`` builds envs); ``expert(cfg)`` / ``explore(cfg)`` its scripted policies."""

    config_cls: type
    env_cls: type
    source: Callable[[Any], base.TaskSource]
    expert: Callable[[Any], base.Policy]
    explore: Callable[[Any], base.Policy]


def _entry_of(module, config_cls: type, env_cls: type) -> EnvEntry:
    return EnvEntry(config_cls, env_cls, module.source, module.expert, module.explore)


ENVS: dict[str, EnvEntry] = {
    "guess_number": _entry_of(guess_number, guess_number.GuessNumberConfig, guess_number.GuessNumberEnv),
    "kg_search": _entry_of(kg_search, kg_search.KGSearchConfig, kg_search.KGSearchEnv),
    "countdown_calc": _entry_of(countdown_calc, countdown_calc.CountdownCalcConfig, countdown_calc.CountdownCalcEnv),
    "grid_nav": _entry_of(grid_nav, grid_nav.GridNavConfig, grid_nav.GridNavEnv),
}


def _entry(name: str) -> EnvEntry:
    if name not in ENVS:
        raise ValueError(f"unknown env {name!r}; known: {', '.join(sorted(ENVS))}")
    return ENVS[name]


def section_defaults(name: str) -> dict[str, Any]:
    """Default knob values of env ``name``'s config section (without ``seed``: the run's seed is used)."""
    return {f.name: f.default for f in dataclasses.fields(_entry(name).config_cls) if f.name != "seed"}


def _type_ok(value: Any, default: Any) -> bool:
    """Whether ``value`` has the type of the knob's ``default`` (an int is a float; a bool is no number)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    return isinstance(value, type(default))


def build_config(name: str, section: Mapping[str, Any], seed: int):
    """Env ``name``'s config from the knobs of its section ``config.agent.<name>`` (missing knobs take their
    defaults). Unknown knobs, knobs of the wrong type and values the env rejects are ValueErrors naming the field."""
    entry = _entry(name)
    defaults = section_defaults(name)
    section = dict(section)
    unknown = sorted(set(section) - set(defaults))
    if unknown:
        raise ValueError(f"config.agent.{name}: unknown field(s) {unknown}; known: {sorted(defaults)}.")
    for key, value in section.items():
        if not _type_ok(value, defaults[key]):
            raise ValueError(
                f"config.agent.{name}.{key}={value!r}: expected {type(defaults[key]).__name__} "
                f"(default {defaults[key]!r})."
            )
    try:
        return entry.config_cls(**{**defaults, **section}, seed=seed)
    except ValueError as e:
        raise ValueError(f"config.agent.{name}: {e}") from e


def source(name: str, section: Mapping[str, Any], seed: int) -> base.TaskSource:
    """Env ``name``'s task source from its config section (``build_config``)."""
    return _entry(name).source(build_config(name, section, seed))
