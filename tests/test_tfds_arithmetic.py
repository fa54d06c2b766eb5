"""Tests for the rl4llm_arithmetic TFDS builder (array_record files read back with tfds.data_source)."""

import os
import sys

import pytest
import tensorflow_datasets as tfds

from rl4llm.data import arithmetic
from rl4llm.data import tfds_arithmetic

_TASK = arithmetic.ArithmeticConfig(min_operands=2, max_operands=4, operators="+-*", seed=3)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tfds"))


def _source(data_dir, split, **kwargs):
    return tfds_arithmetic.data_source(data_dir, _TASK, split, train_size=300, test_size=40, **kwargs)


def test_splits_round_trip_in_order_without_tensorflow(data_dir):
    test = _source(data_dir, "test")
    assert len(test) == 40
    assert list(test) == arithmetic.test_examples(_TASK, 40)
    assert test[-1] == test[39] and test[5] == arithmetic.test_examples(_TASK, 6)[5]
    with pytest.raises(IndexError):
        test[40]
    train = _source(data_dir, "train", build=False)
    assert list(train) == arithmetic.train_examples(_TASK, step=0, batch_size=300)
    assert not {ex.prompt for ex in train} & {ex.prompt for ex in test}
    assert "tensorflow" not in sys.modules


def test_files_are_array_record(data_dir):
    _source(data_dir, "test")
    config = tfds_arithmetic.builder_config(_TASK, train_size=300, test_size=40)
    version_dir = os.path.join(data_dir, tfds_arithmetic.DATASET_NAME, config.name, "1.0.0")
    files = sorted(f for f in os.listdir(version_dir) if ".array_record-" in f)
    assert [f.split(".array_record-")[0] for f in files] == ["rl4llm_arithmetic-test", "rl4llm_arithmetic-train"]


def test_plain_tfds_data_source_reads_a_config_built_by_us(data_dir):
    _source(data_dir, "test")
    config = tfds_arithmetic.builder_config(_TASK, train_size=300, test_size=40)
    records = tfds.data_source(
        tfds_arithmetic.DATASET_NAME, split="test[:3]", data_dir=data_dir, download=False,
        builder_kwargs={"config": config},
    )
    assert [r["prompt"].decode() for r in records] == [ex.prompt for ex in arithmetic.test_examples(_TASK, 3)]


def test_missing_data_is_not_built_when_build_is_false(tmp_path):
    with pytest.raises(KeyError, match="not been generated"):
        tfds_arithmetic.data_source(str(tmp_path), _TASK, "test", train_size=300, test_size=40, build=False)
    assert not os.path.exists(tmp_path / tfds_arithmetic.DATASET_NAME)


def test_config_names_are_unique_per_field_and_default_is_registered():
    names = {
        tfds_arithmetic.builder_config(task, train_size=size).name
        for task in (_TASK, arithmetic.ArithmeticConfig(), arithmetic.ArithmeticConfig(test_fraction=0.2))
        for size in (10, 20)
    }
    assert len(names) == 6
    default = tfds_arithmetic.builder_config(arithmetic.ArithmeticConfig())
    assert default.name in tfds_arithmetic.Rl4llmArithmetic.builder_configs
    with pytest.raises(ValueError, match="train_size"):
        tfds_arithmetic.builder_config(_TASK, train_size=0)


def test_default_task_reuses_the_registered_config(tmp_path):
    source = tfds_arithmetic.data_source(str(tmp_path), arithmetic.ArithmeticConfig(), "test", train_size=20_000)
    assert len(source) == 1_000
    assert [source[i] for i in range(5)] == arithmetic.test_examples(arithmetic.ArithmeticConfig(), 5)
