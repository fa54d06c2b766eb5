"""TFDS builder ``rl4llm_tasks``: the countdown, sorting and modular tasks' fixed splits as array_record files.

One builder config per (task, task config, split sizes); its name encodes every field. The splits are exactly the
task's own draws, stored in generation order (shuffling disabled):

* ``train`` = ``source(cfg).train_examples(step=0, batch_size=train_size)`` (may repeat problems, never a
  held-out one),
* ``test``  = ``source(cfg).test_examples(test_size)``.

Read them with :func:`data_source` (``tfds.data_source``, random access, no TensorFlow), or point a run at the
prepared version directory with ``--config.task.name=local --config.task.local.format=tfds
--config.task.local.train_path=<data_dir>/rl4llm_tasks/<config name>/1.0.0 --config.task.local.answer_format=plain
--config.task.local.prompt_template={prompt} --config.task.local.solution_field=solution``.
(The arithmetic task has its own builder, ``rl4llm.data.tfds_arithmetic``.)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Sequence

import tensorflow_datasets as tfds

from rl4llm.data import countdown
from rl4llm.data import modular
from rl4llm.data import sorting
from rl4llm.data.procedural import Example

DATASET_NAME = "rl4llm_tasks"
_VERSION = tfds.core.Version("1.0.0")
FIELDS = ("prompt", "solution", "answer")
TASK_MODULES = {"countdown": countdown, "sorting": sorting, "modular": modular}
_CONFIG_CLASSES = {
    "countdown": countdown.CountdownConfig,
    "sorting": sorting.SortingConfig,
    "modular": modular.ModularConfig,
}
_NAME_SUBSTITUTIONS = {"+": "add", "-": "sub", "*": "mul", ".": "p"}


@dataclasses.dataclass(eq=False)
class TaskBuilderConfig(tfds.core.BuilderConfig):
    """A task name, its config and split sizes; build it with :func:`builder_config` (the name encodes them)."""

    task: str = "countdown"
    task_config: Any = None
    train_size: int = 20_000
    test_size: int = 1_000


def _name_part(value: object) -> str:
    return "".join(_NAME_SUBSTITUTIONS.get(c, c) for c in str(value))


def builder_config(task: str, task_config, *, train_size: int = 20_000, test_size: int = 1_000) -> TaskBuilderConfig:
    """The builder config of ``task`` with ``task_config``; its name (on-disk directory) is unique per field."""
    if task not in TASK_MODULES:
        raise ValueError(f"unknown task {task!r}; this builder holds {', '.join(TASK_MODULES)}")
    if train_size < 1 or test_size < 1:
        raise ValueError(f"train_size={train_size}, test_size={test_size}: both must be >= 1.")
    fields = "_".join(f"{f.name}{_name_part(getattr(task_config, f.name))}" for f in dataclasses.fields(task_config))
    return TaskBuilderConfig(
        name=f"{task}_{fields}_train{train_size}_test{test_size}",
        version=_VERSION,
        description=f"{task_config}, {train_size} train / {test_size} test examples.",
        task=task,
        task_config=task_config,
        train_size=train_size,
        test_size=test_size,
    )


class Rl4llmTasks(tfds.core.GeneratorBasedBuilder):
    """Countdown, sorting and modular exponentiation with worked solutions (``rl4llm.data.<task>``)."""

    name = DATASET_NAME
    VERSION = _VERSION
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = [builder_config(task, cls()) for task, cls in _CONFIG_CLASSES.items()]

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict({field: tfds.features.Text() for field in FIELDS}),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator]:
        del dl_manager  # procedurally generated: nothing to download
        cfg = self.builder_config
        source = TASK_MODULES[cfg.task].source(cfg.task_config)
        return {
            "train": self._generate_examples(source.train_examples(0, cfg.train_size)),
            "test": self._generate_examples(source.test_examples(cfg.test_size)),
        }

    def _generate_examples(self, examples: list[Example]) -> Iterator[tuple[int, dict[str, str]]]:
        for i, ex in enumerate(examples):
            yield i, dataclasses.asdict(ex)


class ExampleSource(Sequence[Example]):
    """Random-access view of a TFDS data source as :class:`Example` records."""

    def __init__(self, records: Sequence[dict[str, bytes]]):
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: int) -> Example:  # type: ignore[override]
        """Record ``index`` (negative indices count from the end; out of range raises IndexError)."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} records")
        record = self._records[index % len(self)]
        return Example(**{field: record[field].decode("utf-8") for field in FIELDS})


def read(builder_cls, config: tfds.core.BuilderConfig, split: str, data_dir: str, *, build: bool) -> ExampleSource:
    """``split`` of ``builder_cls``'s dataset in ``config`` under ``data_dir`` via ``tfds.data_source`` (array_record
    files), built first if absent and ``build``. A registered config of the same name is reused (TFDS refuses a
    second object with a registered config's name; names encode every field, so they are the same config)."""
    config = builder_cls.builder_configs.get(config.name, config)
    records = tfds.data_source(
        builder_cls.name,
        split=split,
        data_dir=data_dir,
        download=build,
        builder_kwargs={"config": config, "file_format": "array_record"},
    )
    return ExampleSource(records)


def data_source(
    data_dir: str,
    task: str,
    task_config,
    split: str,
    *,
    train_size: int = 20_000,
    test_size: int = 1_000,
    build: bool = True,
) -> ExampleSource:
    """Random-access ``split`` ("train", "test", or a TFDS split slice) of the task's dataset under ``data_dir``."""
    config = builder_config(task, task_config, train_size=train_size, test_size=test_size)
    return read(Rl4llmTasks, config, split, data_dir, build=build)
