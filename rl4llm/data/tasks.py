"""Tasks by name: ``config.task.name`` picks one from :data:`TASKS`.

A task supplies training examples per step, a fixed held-out set, and the text its char tokenizer is trained on
(``Task.source``: ``train_examples(step, n)``, ``test_examples(n)``, ``corpus(n)``), plus the reward that fits its
answers (``Task.reward``; ``config.task.reward`` says which one a run uses, so it can be swapped).

Config: the arithmetic fields live directly in ``config.task`` (``min_operands`` ...); every other task reads its
own sub-section, ``config.task.<name>`` (``config.task.countdown.max_numbers`` ...), whose fields are the task
config's (``rl4llm.data.<name>``). ``local`` reads files (``rl4llm.data.local``). Adding a task is a module with a
``source(cfg)`` and one entry here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from rl4llm.data import arithmetic
from rl4llm.data import countdown
from rl4llm.data import local
from rl4llm.data import modular
from rl4llm.data import sorting


@dataclasses.dataclass(frozen=True)
class Task:
    """A built task: ``source`` serves examples (see the module docstring); ``reward`` is its fitting reward."""

    name: str
    source: Any
    reward: str


def _arithmetic(task_config, seed: int):
    return arithmetic.source(
        arithmetic.ArithmeticConfig(
            min_operands=task_config.min_operands,
            max_operands=task_config.max_operands,
            max_value=task_config.max_value,
            operators=task_config.operators,
            test_fraction=task_config.test_fraction,
            seed=seed,
        )
    )


def _from_section(module, config_cls) -> Callable:
    def build(task_config, seed: int):
        fields = dict(getattr(task_config, module.__name__.rsplit(".", 1)[-1]))
        return module.source(config_cls(**fields, seed=seed))

    return build


def _local(task_config, seed: int):
    return local.load(local.LocalConfig(**dict(task_config.local), seed=seed))


# name -> (builder of the source from (config.task, seed), the task's fitting reward)
TASKS: dict[str, tuple[Callable, str]] = {
    "arithmetic": (_arithmetic, "exact_answer"),
    "countdown": (_from_section(countdown, countdown.CountdownConfig), "countdown"),
    "sorting": (_from_section(sorting, sorting.SortingConfig), "final_text"),
    "modular": (_from_section(modular, modular.ModularConfig), "exact_answer"),
    "local": (_local, "math"),
}
# Config sections (config.task.<name>) and their task config classes, for defaults and validation.
SECTIONS = {
    "countdown": countdown.CountdownConfig,
    "sorting": sorting.SortingConfig,
    "modular": modular.ModularConfig,
    "local": local.LocalConfig,
}


def section_defaults(name: str) -> dict[str, Any]:
    """Default field values of task section ``name`` (without ``seed``: the run's seed is used)."""
    fields = dataclasses.fields(SECTIONS[name])
    return {
        f.name: ("" if f.default is dataclasses.MISSING else f.default) for f in fields if f.name != "seed"
    }


def build(task_config, seed: int) -> Task:
    """The task named ``task_config.name``, built from its config fields; ValueError for unknown names."""
    if task_config.name not in TASKS:
        raise ValueError(f"unknown task {task_config.name!r}; known: {', '.join(sorted(TASKS))}")
    builder, reward = TASKS[task_config.name]
    return Task(name=task_config.name, source=builder(task_config, seed), reward=reward)
