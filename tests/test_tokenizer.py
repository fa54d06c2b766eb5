"""Tests for the deterministic SentencePiece tokenizer (rl4llm.tokenizers.sentencepiece_tokenizer)."""

import os

import numpy as np
import pytest

from rl4llm.data import arithmetic
from rl4llm.tokenizers import sentencepiece_tokenizer as spt

_CFG = arithmetic.ArithmeticConfig()
_MUL_CFG = arithmetic.ArithmeticConfig(min_operands=2, max_operands=5, max_value=999, operators="+-*")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return spt.get_or_train_task_tokenizer(str(tmp_path_factory.mktemp("workdir")), _CFG)


def test_special_ids_are_fixed(tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2, 3)
    assert tokenizer.vocab_size == 4 + len(arithmetic.ALPHABET)


@pytest.mark.parametrize("cfg", [_CFG, _MUL_CFG])
def test_round_trip_and_no_unk_on_task_text(tokenizer, cfg):
    examples = arithmetic.train_examples(cfg, 0, 2000) + arithmetic.test_examples(cfg, 100)
    if "*" in cfg.operators:
        assert any("*" in ex.prompt for ex in examples)
    for ex in examples:
        for text in (ex.prompt, ex.solution, ex.answer, ex.prompt + ex.solution):
            ids = tokenizer.encode(text)
            assert tokenizer.unk_id not in ids
            assert not {tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id} & set(ids)
            assert tokenizer.decode(ids) == text


def test_decode_skips_specials_and_tolerates_out_of_range_ids(tokenizer):
    ids = tokenizer.encode("#66")
    specials = [tokenizer.bos_id, *ids, tokenizer.eos_id, tokenizer.pad_id, tokenizer.pad_id]
    assert tokenizer.decode(specials) == "#66"
    assert tokenizer.decode(np.asarray(ids + [tokenizer.eos_id] + ids)) == "#66#66"  # does not stop at eos
    assert tokenizer.decode([tokenizer.vocab_size + 5, -1]) == tokenizer.decode([tokenizer.unk_id] * 2)
    assert tokenizer.unknown_chars("x1 ") == {"x", " "}


def test_training_is_byte_identical(tmp_path):
    lines = list(arithmetic.corpus(_CFG, 300))
    first = spt.train_tokenizer(lines, str(tmp_path / "a" / "tok"))
    second = spt.train_tokenizer(iter(lines), str(tmp_path / "b" / "other"))
    assert first.endswith(".model") and os.path.exists(first)
    with open(first, "rb") as f1, open(second, "rb") as f2:
        assert f1.read() == f2.read()
    assert sorted(os.listdir(tmp_path / "a")) == ["tok.model"]  # no temporary files left behind


def test_unigram_model_needs_vocab_size(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        spt.train_tokenizer(["abc"], str(tmp_path / "tok"), model_type="unigram")


def test_get_or_train_caches_and_refuses_foreign_models(tmp_path):
    workdir = str(tmp_path)
    path = os.path.join(workdir, "tokenizer", "arith.model")
    spt.get_or_train_task_tokenizer(workdir, _CFG)
    with open(path, "rb") as f:
        trained = f.read()
    spt.get_or_train_task_tokenizer(workdir, _MUL_CFG)  # one vocabulary covers every arithmetic config
    with open(path, "rb") as f:
        assert f.read() == trained
    spt.train_tokenizer(["0123456789+-=;#"], path[: -len(".model")])  # lacks '*'
    with pytest.raises(ValueError, match=r"\*"):
        spt.get_or_train_task_tokenizer(workdir, _CFG)
