"""SentencePiece tokenizers trained by our own code (deterministically) or loaded from a ``.model`` file.

Special ids are fixed: pad=0, unk=1, bos=2, eos=3. Training is byte-for-byte reproducible: one thread, every
input line used in order (no sentence sampling or shuffling), identity normalisation, no dummy whitespace
prefix, and the model proto is written by us, so it does not even record the output path.
"""

from __future__ import annotations

import io
import os
import tempfile
from typing import Iterable, Sequence

import sentencepiece as spm

from rl4llm.data import arithmetic

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
_NUM_SPECIAL = 4
# Training lines for the arithmetic task tokenizer (a char vocabulary converges on far fewer).
_TASK_CORPUS_LINES = 2000


def _write_atomically(path: str, data: bytes) -> None:
    """Writes ``data`` to a temporary file next to ``path``, then renames it over ``path``."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=os.path.basename(path) + ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def train_tokenizer(
    lines: Iterable[str], model_path_prefix: str, *, vocab_size: int | None = None, model_type: str = "char"
) -> str:
    """Trains a SentencePiece model on ``lines`` and writes ``<model_path_prefix>.model``; returns that path.

    Same ``lines`` and arguments -> byte-identical file. ``vocab_size=None`` is allowed only for
    ``model_type="char"``, where it means "every distinct character plus the 4 specials". The limit is soft
    (``hard_vocab_limit=False``) and every character is kept (``character_coverage=1``).
    """
    lines = list(lines)
    if vocab_size is None:
        if model_type != "char":
            raise ValueError(f"train_tokenizer: vocab_size is required for model_type={model_type!r}.")
        vocab_size = len(set("".join(lines))) + _NUM_SPECIAL
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=proto,
        model_type=model_type,
        vocab_size=vocab_size,
        hard_vocab_limit=False,
        character_coverage=1.0,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        add_dummy_prefix=False,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        num_threads=1,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        minloglevel=2,
    )
    path = model_path_prefix + ".model"
    _write_atomically(path, proto.getvalue())
    return path


class Tokenizer:
    """Thin wrapper on ``sentencepiece.SentencePieceProcessor`` with the fixed special ids."""

    def __init__(self, processor: spm.SentencePieceProcessor):
        self._sp = processor
        self.vocab_size: int = processor.vocab_size()
        self.pad_id: int = processor.pad_id()
        self.unk_id: int = processor.unk_id()
        self.bos_id: int = processor.bos_id()
        self.eos_id: int = processor.eos_id()
        self.stop_token_ids: tuple[int, ...] = (self.eos_id,)  # ids that end a generation

    @classmethod
    def load(cls, path: str) -> "Tokenizer":
        """Loads a ``.model`` file."""
        with open(path, "rb") as f:
            return cls(spm.SentencePieceProcessor(model_proto=f.read()))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without bos/eos."""
        return self._sp.encode(text, out_type=int)

    def encode_prompt(self, text: str) -> list[int]:
        """Ids of a prompt: ``[bos] + encode(text)``."""
        return [self.bos_id] + self.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of exactly ``ids`` (no stopping at eos); pad/bos/eos are skipped. Ids outside
        ``[0, vocab_size)`` (a model vocabulary padded past the tokenizer's) decode like unk, never raise."""
        ids = [int(i) for i in ids]
        return self._sp.decode([i if 0 <= i < self.vocab_size else self.unk_id for i in ids])

    def unknown_chars(self, text: str) -> set[str]:
        """The characters of ``text`` this vocabulary maps to unk."""
        return {c for c in set(text) if self.unk_id in self.encode(c)}


def get_or_train_task_tokenizer(workdir: str, task_cfg: arithmetic.ArithmeticConfig) -> Tokenizer:
    """The arithmetic task's char tokenizer, cached at ``<workdir>/tokenizer/arith.model``: trained from
    ``arithmetic.corpus(task_cfg, ...)`` if absent (written atomically), loaded otherwise. A cached model that
    cannot encode every character of :data:`arithmetic.ALPHABET` is refused loudly."""
    path = os.path.join(workdir, "tokenizer", "arith.model")
    if not os.path.exists(path):
        train_tokenizer(arithmetic.corpus(task_cfg, _TASK_CORPUS_LINES), path[: -len(".model")])
    tokenizer = Tokenizer.load(path)
    missing = tokenizer.unknown_chars(arithmetic.ALPHABET)
    if missing:
        raise ValueError(
            f"cached tokenizer {path} maps {sorted(missing)} to unk; delete it to retrain, or use a fresh workdir."
        )
    return tokenizer
