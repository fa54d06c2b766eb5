"""TFDS builder rl4llm_tasks (countdown, sorting, modular as array_record, read back without TensorFlow), and a
prepared dataset read by the local-data task."""

import os
import sys

import pytest

from rl4llm.data import countdown
from rl4llm.data import local
from rl4llm.data import modular
from rl4llm.data import sorting
from rl4llm.data import tfds_tasks

CASES = {
    "countdown": countdown.CountdownConfig(max_number=9, seed=2),
    "sorting": sorting.SortingConfig(max_length=4),
    "modular": modular.ModularConfig(max_exponent=3),
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds_tasks"))


@pytest.mark.parametrize("task", sorted(CASES))
def test_splits_round_trip_in_order(data_dir, task):
    cfg = CASES[task]
    source = tfds_tasks.TASK_MODULES[task].source(cfg)
    test = tfds_tasks.data_source(data_dir, task, cfg, "test", train_size=50, test_size=10)
    assert list(test) == source.test_examples(10)
    train = tfds_tasks.data_source(data_dir, task, cfg, "train", train_size=50, test_size=10, build=False)
    assert list(train) == source.train_examples(0, 50)
    assert test[-1] == test[9]
    with pytest.raises(IndexError):
        test[10]
    config = tfds_tasks.builder_config(task, cfg, train_size=50, test_size=10)
    files = os.listdir(os.path.join(data_dir, tfds_tasks.DATASET_NAME, config.name, "1.0.0"))
    assert any(".array_record-" in f for f in files)
    assert "tensorflow" not in sys.modules


def test_config_names_are_unique_and_valid():
    names = {
        tfds_tasks.builder_config("countdown", countdown.CountdownConfig(operators=ops, test_fraction=f)).name
        for ops in ("+-*", "+-", "+*")
        for f in (0.1, 0.2)
    }
    assert len(names) == 6 and all(set(n) <= set("abcdefghijklmnopqrstuvwxyz0123456789_") for n in map(str.lower, names))
    with pytest.raises(ValueError, match="unknown task"):
        tfds_tasks.builder_config("chess", countdown.CountdownConfig())


def test_a_run_can_read_a_prepared_dataset_as_local_data(data_dir):
    cfg = CASES["sorting"]
    tfds_tasks.data_source(data_dir, "sorting", cfg, "test", train_size=50, test_size=10)
    config = tfds_tasks.builder_config("sorting", cfg, train_size=50, test_size=10)
    version_dir = os.path.join(data_dir, tfds_tasks.DATASET_NAME, config.name, "1.0.0")
    examples = local.load(
        local.LocalConfig(
            train_path=version_dir, format="tfds", prompt_template="{prompt}", answer_format="plain",
            solution_field="solution",
        )
    )
    source = sorting.source(cfg)
    assert list(examples.test) == source.test_examples(10)
    assert list(examples.train) == source.train_examples(0, 50)
