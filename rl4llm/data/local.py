r"""Real datasets from local files (GSM8K / MATH style): JSONL, JSON, Parquet, or a prepared TFDS directory.

Nothing is ever downloaded: the user puts the file on disk (``configs/grpo_gsm8k_local.py`` says where) and
points ``config.task.local.train_path`` / ``test_path`` at it. Each record becomes an :class:`Example`:

* ``prompt``   = ``prompt_template.format(**record)`` (default ``"{question}\n"``);
* ``solution`` = ``record[solution_field]`` (for the SFT warm start; empty if the field is unset);
* ``answer``   = ``record[answer_field]`` read per ``answer_format``:
  ``"gsm8k"``: the text after the last ``####`` with thousands commas removed (verl's GSM8K preprocessing);
  ``"boxed"``: the content of the last ``\boxed{}`` (MATH ``solution`` fields);
  ``"plain"``: the field as it is (``str()`` of non-strings, e.g. JSON test lists for code).

A prepared TFDS dataset (``format="tfds"``; ``train_path`` = its version directory, e.g.
``<data_dir>/rl4llm_tasks/<config>/1.0.0``) is read without its builder code through
``tfds.builder_from_directory(...).as_data_source`` (array_record, no TensorFlow), its ``train`` / ``test``
splits, text fields decoded from bytes. Without a test file the held-out split is the
records whose prompt hashes below ``test_fraction`` (``rl4llm.data.procedural.is_held_out``).

:class:`ExampleSet` serves them like a procedural task: ``train_examples(step, n)`` draws ``n`` training examples
with replacement from ``default_rng([stream, seed, step])`` (a pure function of the step); ``test_examples(n)``
is the first ``n`` held-out examples.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Sequence

import numpy as np

from rl4llm.data import procedural
from rl4llm.data.procedural import Example
from rl4llm.rewards import math as math_reward

FORMATS = ("jsonl", "json", "parquet", "tfds")
ANSWER_FORMATS = ("gsm8k", "boxed", "plain")
_TRAIN_STREAM = 0x10CA1


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """Where the data is and how records map to examples (module docstring). ``format=""``: from the suffix."""

    train_path: str
    test_path: str = ""
    format: str = ""
    prompt_template: str = "{question}\n"
    answer_field: str = "answer"
    answer_format: str = "gsm8k"
    solution_field: str = ""
    test_fraction: float = 0.1
    seed: int = 0


def file_format(path: str, declared: str = "") -> str:
    """``declared`` if set, else the format named by ``path``'s suffix; ValueError if neither tells."""
    if declared:
        if declared not in FORMATS:
            raise ValueError(f"data format {declared!r}; known: {', '.join(FORMATS)}")
        return declared
    for suffix, fmt in ((".jsonl", "jsonl"), (".json", "json"), (".parquet", "parquet")):
        if path.endswith(suffix):
            return fmt
    raise ValueError(f"cannot tell the format of {path!r} from its suffix; set format to one of {', '.join(FORMATS)}")


def read_records(path: str, fmt: str = "", *, split: str = "train") -> list[dict[str, Any]]:
    """The records of a local file (or of ``split`` of a prepared TFDS directory) as dicts; FileNotFoundError if
    absent."""
    fmt = file_format(path, fmt)
    if not os.path.exists(path):
        raise FileNotFoundError(f"data {path!r} does not exist (we never download: put it there)")
    if fmt == "tfds":
        import tensorflow_datasets as tfds  # only this format needs it

        source = tfds.builder_from_directory(path).as_data_source(split=split)
        return [{k: v.decode("utf-8") if isinstance(v, bytes) else v for k, v in r.items()} for r in source]
    if fmt == "parquet":
        import pyarrow.parquet as pq  # only this format needs it

        return pq.read_table(path).to_pylist()
    with open(path, encoding="utf-8") as f:
        if fmt == "json":
            records = json.load(f)
        else:
            records = [json.loads(line) for line in f if line.strip()]
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ValueError(f"{path}: expected a list of JSON objects")
    return records


def parse_answer(value: Any, answer_format: str) -> str:
    """The reference answer of a record field (module docstring); ValueError when the format finds none."""
    text = value if isinstance(value, str) else json.dumps(value)
    if answer_format == "plain":
        return text
    if answer_format == "gsm8k":
        pos = text.rfind("####")
        if pos < 0:
            raise ValueError(f"no '####' in GSM8K answer {text[:80]!r}")
        return text[pos + 4 :].strip().replace(",", "")
    if answer_format == "boxed":
        boxed = math_reward.last_boxed(text)
        if boxed is None:
            raise ValueError(f"no \\boxed{{}} in {text[:80]!r}")
        return boxed
    raise ValueError(f"answer_format {answer_format!r}; known: {', '.join(ANSWER_FORMATS)}")


def to_example(record: dict[str, Any], cfg: LocalConfig) -> Example:
    """One record as an :class:`Example`; KeyError naming the missing field."""
    try:
        prompt = cfg.prompt_template.format(**record)
    except KeyError as e:
        message = f"prompt_template {cfg.prompt_template!r} needs field {e}; record has {sorted(record)}"
        raise KeyError(message) from None
    if cfg.answer_field not in record:
        raise KeyError(f"answer_field {cfg.answer_field!r} missing; record has {sorted(record)}")
    solution = str(record[cfg.solution_field]) if cfg.solution_field else ""
    return Example(prompt=prompt, solution=solution, answer=parse_answer(record[cfg.answer_field], cfg.answer_format))


@dataclasses.dataclass(frozen=True)
class ExampleSet:
    """Fixed train / held-out example lists served like a procedural task (module docstring)."""

    train: Sequence[Example]
    test: Sequence[Example]
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.train or not self.test:
            raise ValueError(f"need training and held-out examples, got {len(self.train)} and {len(self.test)}")

    def train_examples(self, step: int, batch_size: int) -> list[Example]:
        """``batch_size`` training examples drawn with replacement, a pure function of (seed, step)."""
        indices = np.random.default_rng([_TRAIN_STREAM, self.seed, step]).integers(0, len(self.train), batch_size)
        return [self.train[i] for i in indices.tolist()]

    def test_examples(self, n: int) -> list[Example]:
        """The first ``n`` held-out examples (ValueError if there are fewer)."""
        if n > len(self.test):
            raise ValueError(f"asked for {n} held-out examples, only {len(self.test)} exist; lower eval.num_examples")
        return list(self.test[:n])

    def corpus(self, n: int) -> list[str]:
        """Tokenizer-training text: one line with every character of every example, then ``n`` training texts."""
        chars = sorted({c for ex in (*self.train, *self.test) for c in ex.prompt + ex.solution + ex.answer})
        texts = [ex.prompt + ex.solution for ex in self.train[:n]]
        return ["".join(chars)] + texts


def load(cfg: LocalConfig) -> ExampleSet:
    """The train / held-out examples of a local dataset (module docstring)."""
    fmt = file_format(cfg.train_path, cfg.format)
    train = [to_example(r, cfg) for r in read_records(cfg.train_path, fmt)]
    if fmt == "tfds":
        test = [to_example(r, cfg) for r in read_records(cfg.train_path, fmt, split="test")]
    elif cfg.test_path:
        test = [to_example(r, cfg) for r in read_records(cfg.test_path, file_format(cfg.test_path, cfg.format))]
    else:
        test = [ex for ex in train if procedural.is_held_out(ex.prompt, cfg.test_fraction)]
        train = [ex for ex in train if not procedural.is_held_out(ex.prompt, cfg.test_fraction)]
    return ExampleSet(train=train, test=test, seed=cfg.seed)
