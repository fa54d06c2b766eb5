"""TFDS builder ``rl4llm_arithmetic``: the arithmetic task's fixed train and test splits as array_record files.

The splits are exactly the task's own draws, so a TFDS-fed run sees the same problems as a procedural one:

* ``train`` = ``arithmetic.train_examples(task, step=0, batch_size=train_size)`` (may repeat problems,
  never holds a held-out one),
* ``test``  = ``arithmetic.test_examples(task, test_size)``,

stored in generation order (shuffling disabled), so record ``i`` of ``test`` is ``test_examples(...)[i]``.
Reading goes through ``tfds.data_source`` (random access over array_record, no TensorFlow needed)::

    source = data_source(data_dir, ArithmeticConfig(), "test")   # builds on first use
    source[3]  # -> Example(prompt=..., solution=..., answer=...)
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import tensorflow_datasets as tfds

from rl4llm.data import arithmetic
from rl4llm.data import tfds_tasks
from rl4llm.data.tfds_tasks import ExampleSource

DATASET_NAME = "rl4llm_arithmetic"
_VERSION = tfds.core.Version("1.0.0")
_OPERATOR_NAMES = {"+": "add", "-": "sub", "*": "mul"}


@dataclasses.dataclass(eq=False)
class ArithmeticBuilderConfig(tfds.core.BuilderConfig):
    """A task config plus split sizes; build it with :func:`builder_config` so the name encodes every field."""

    task: arithmetic.ArithmeticConfig = arithmetic.ArithmeticConfig()
    train_size: int = 20_000
    test_size: int = 1_000


def builder_config(
    task: arithmetic.ArithmeticConfig, *, train_size: int = 20_000, test_size: int = 1_000
) -> ArithmeticBuilderConfig:
    """The builder config for ``task``; its name (the on-disk directory) is unique per field combination."""
    if train_size < 1 or test_size < 1:
        raise ValueError(f"train_size={train_size}, test_size={test_size}: both must be >= 1.")
    ops = "".join(_OPERATOR_NAMES[op] for op in task.operators)
    fraction = repr(task.test_fraction).replace(".", "p")
    name = (
        f"n{task.min_operands}to{task.max_operands}_max{task.max_value}_{ops}_heldout{fraction}_seed{task.seed}"
        f"_train{train_size}_test{test_size}"
    )
    return ArithmeticBuilderConfig(
        name=name,
        version=_VERSION,
        description=f"{task}, {train_size} train / {test_size} test examples.",
        task=task,
        train_size=train_size,
        test_size=test_size,
    )


class Rl4llmArithmetic(tfds.core.GeneratorBasedBuilder):
    """Multi-step left-to-right arithmetic with worked solutions (see ``rl4llm.data.arithmetic``)."""

    name = DATASET_NAME
    VERSION = _VERSION
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    # The default task, so plain `tfds.data_source("rl4llm_arithmetic", ...)` works; other tasks are custom configs.
    BUILDER_CONFIGS = [builder_config(arithmetic.ArithmeticConfig())]

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict({field: tfds.features.Text() for field in tfds_tasks.FIELDS}),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator]:
        del dl_manager  # procedurally generated: nothing to download
        cfg = self.builder_config
        return {
            "train": self._generate_examples(arithmetic.train_examples(cfg.task, step=0, batch_size=cfg.train_size)),
            "test": self._generate_examples(arithmetic.test_examples(cfg.task, cfg.test_size)),
        }

    def _generate_examples(self, examples: list[arithmetic.Example]) -> Iterator[tuple[int, dict[str, str]]]:
        for i, ex in enumerate(examples):
            yield i, dataclasses.asdict(ex)


def data_source(
    data_dir: str,
    task: arithmetic.ArithmeticConfig,
    split: str,
    *,
    train_size: int = 20_000,
    test_size: int = 1_000,
    build: bool = True,
) -> ExampleSource:
    """Random-access ``split`` ("train", "test", or any TFDS split slice) of the task's dataset under
    ``data_dir``, read with ``tfds.data_source`` from array_record files; built first if absent and ``build``."""
    config = builder_config(task, train_size=train_size, test_size=test_size)
    return tfds_tasks.read(Rl4llmArithmetic, config, split, data_dir, build=build)
