"""Local GSM8K / MATH-style data (rl4llm.data.local): JSONL, JSON and Parquet files the tests write."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rl4llm import rewards
from rl4llm.data import local
from rl4llm.data import procedural

GSM8K = [
    {"question": f"Q{i}: {i} + {i}?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i:,}"} for i in range(1, 60)
]
MATH = [{"problem": r"Compute $\frac{1}{2}+\frac{1}{4}$.", "solution": r"It is $\boxed{\frac{3}{4}}$.", "level": 2}]


def _write_jsonl(path, records):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_gsm8k_jsonl_with_a_test_file(tmp_path):
    _write_jsonl(tmp_path / "train.jsonl", GSM8K[:50])
    _write_jsonl(tmp_path / "test.jsonl", GSM8K[50:])
    data = local.load(
        local.LocalConfig(train_path=str(tmp_path / "train.jsonl"), test_path=str(tmp_path / "test.jsonl"),
                          solution_field="answer")
    )
    assert len(data.train) == 50 and len(data.test) == 9
    ex = data.train[0]
    assert (ex.prompt, ex.answer, ex.solution) == ("Q1: 1 + 1?\n", "2", "1+1=2\n#### 2")
    assert data.test[-1].answer == "118"
    big = local.parse_answer("so 1,234 in total\n#### 1,234", "gsm8k")
    assert big == "1234"
    for ex in data.train:  # the reference solutions score 1 with the math reward
        assert rewards.get_reward("math")(ex.solution, ex.answer) == 1.0
    assert data.train_examples(3, 8) == data.train_examples(3, 8) and len(data.train_examples(3, 8)) == 8
    assert data.train_examples(3, 8) != data.train_examples(4, 8)
    assert data.test_examples(5) == list(data.test[:5])
    with pytest.raises(ValueError, match="only 9"):
        data.test_examples(10)
    assert set("".join(data.corpus(3)[1:])) <= set(data.corpus(3)[0])


def test_hash_split_without_a_test_file(tmp_path):
    path = tmp_path / "all.json"
    path.write_text(json.dumps(GSM8K))
    data = local.load(local.LocalConfig(train_path=str(path), test_fraction=0.3))
    assert len(data.train) + len(data.test) == len(GSM8K)
    assert all(procedural.is_held_out(ex.prompt, 0.3) for ex in data.test)
    assert not {ex.prompt for ex in data.train} & {ex.prompt for ex in data.test}


def test_math_parquet_with_boxed_answers(tmp_path):
    path = str(tmp_path / "math.parquet")
    pq.write_table(pa.Table.from_pylist(MATH * 3), path)
    cfg = local.LocalConfig(train_path=path, test_path=path, prompt_template="{problem}\n",
                            answer_field="solution", answer_format="boxed", solution_field="solution")
    data = local.load(cfg)
    assert data.train[0].answer == r"\frac{3}{4}"
    assert rewards.get_reward("math")(r"so \boxed{0.75}", data.train[0].answer) == 1.0


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="never download"):
        local.load(local.LocalConfig(train_path=str(tmp_path / "missing.jsonl")))
    with pytest.raises(ValueError, match="suffix"):
        local.file_format("data.csv")
    _write_jsonl(tmp_path / "t.jsonl", [{"question": "q", "answer": "no marker"}])
    with pytest.raises(ValueError, match="####"):
        local.load(local.LocalConfig(train_path=str(tmp_path / "t.jsonl"), test_path=str(tmp_path / "t.jsonl")))
    with pytest.raises(KeyError, match="problem"):
        local.to_example({"question": "q", "answer": "#### 1"}, local.LocalConfig(train_path="", prompt_template="{problem}"))
    with pytest.raises(KeyError, match="answer_field"):
        local.to_example({"question": "q"}, local.LocalConfig(train_path=""))
