"""Generative verifier: a decoder of `rl4llm.models` prompted with a judge template (the question, the reference
answer, the completion, then "Is the answer correct? Answer Yes or No:"), whose reward is the probability it gives
to "Yes" as the next token — the model-based soft reward of Su et al. 2025, *Crossing the Reward Bridge: Expanding
RL with Verifiable Rewards Across Diverse Domains* (arXiv 2503.23829; digest entropy_and_general_rl.md R17).

The convention (`judge_probabilities`), with z the verifier's next-token logits after the judge text:

- **soft score, normalisation "full"** (default, the paper's): `P(Yes) = softmax(z)[yes_id]`, the probability of
  the judgement token under the verifier's whole next-token distribution, with no renormalisation. The paper's
  verifier answers with a judgement token ("1" correct / "0" wrong in its prompt) and its soft reward is that
  token's probability; mass the verifier puts on other tokens (it does not answer in the format) lowers the
  reward. `verifier/yes_no_mass` logs P(Yes) + P(No) so that a judge that does not follow the format is visible.
- **normalisation "yes_no"**: `P(Yes) = exp z_yes / (exp z_yes + exp z_no) = σ(z_yes − z_no)`, the softmax over the
  two judgement tokens only (what TRL-style judges and most LLM-as-judge code report). A departure from the
  paper, offered because a small or untuned judge spreads mass over the vocabulary.
- **hard** (`hard=True`): `1[P(Yes) >= threshold]`, the binary verdict the paper compares its soft reward with.

Departures from the paper, all documented here:

- the paper's judgement tokens are "1" / "0" under a Chinese/English instruction prompt; ours are `yes_token` /
  `no_token` (each must be ONE token of the verifier's tokenizer) under `template`, whose fields are `{question}`
  (the policy's prompt, decoded from its tokens: with a chat template it holds the template's role text),
  `{reference}` (the task's reference answer) and `{completion}` (the completion's text, decoded, without the
  stop token);
- the judge text is not wrapped in the verifier's chat template: a chat verifier's turn markers go into `template`;
- the paper z-normalises rewards per batch before REINFORCE / RLOO; here the score is the reward and the run's
  advantage estimator (GRPO's group normalisation by default) does the normalising;
- the template's pieces are tokenised one by one (literal text, then each field's text) and concatenated, after
  the tokenizer's bos when it has one. With a char tokenizer that is the tokenisation of the whole text; a BPE
  tokenizer can merge across a piece boundary that this keeps apart.

Bad input has a defined score, never an error:

- an empty completion is judged as it is (the template with nothing in `{completion}`);
- **over-long text**: a judge text longer than `max_length` tokens loses tokens from the START of the completion
  (its end — the final answer — and the rest of the template survive: the judge still sees the question, the
  reference and its instruction); if the template without the completion is still too long, the whole text is
  cut on the LEFT (the instruction and the answer slot at the end survive). `verifier/truncated_frac` logs how
  many rows were cut;
- a row with no token at all (an empty template, no bos) scores 0.

Batching: the N judge texts are tokenised on the host, left-padded to one width (a multiple of `LENGTH_BUCKET`, at
most `max_length`), scored in ONE jitted forward (`make_judge_fn`) and read back as one [N] transfer. Positions
follow the mask (`models.positions_from_mask`) and the score is read at each row's last real token, so a row's
score does not depend on the other rows or on its padding (up to float rounding).

Params: a bare decoder (`models.init_params` tree), from a directory written by `save` (Orbax params and
`reward_model.json`, as the outcome RM's: `reward_model.save`, kind "generative_verifier"), which scores with the
run's tokenizer, or an HF model directory (`config.generative_verifier.hf_checkpoint`, scored with its own
tokenizer.json). The reward-model job trains one on the task's verdicts (`experiments/train_reward_model.py` with
`config.reward_model.objective="judge"`: `judge_objective`); `save` takes any other decoder params (an SFT policy,
`train.reward_model_job.sft_policy`; a random decoder for tests). On several devices the params are sharded on
the judges' mesh (`config.mesh.judges`, `parallel.judges`; `placed`) and each batch's rows split over its batch
axes; on one device they sit on it, unsharded.

This is `config.generative_verifier.kind="p_yes"`; kind "critique" (`verifiers.critique`: sampled critiques ending in
a parsed score, DeepSeek-GRM) shares the judge text and the loading (`load_judge`, which refuses a directory trained
for the other kind: `reward_model.json`'s "objective").
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import reward_model
from rl4llm.config.sections import GENERATIVE_VERIFIER_NORMALISATIONS as NORMALISATIONS
from rl4llm.models.config import ModelConfig
from rl4llm.parallel import judges
from rl4llm.sampling import sampler
from rl4llm.verifiers import templates

KIND = "generative_verifier"  # reward_model.json's "kind" of a verifier directory
LENGTH_BUCKET = 32  # judge widths are rounded up to a multiple of this (a handful of compiled shapes per run)
SECTION = "config.generative_verifier"


# ------------------------------------------------------------------------------ the kernel


def judge_logits(cfg: ModelConfig, params, tokens: jax.Array, attention_mask: jax.Array
                 ) -> tuple[jax.Array, jax.Array]:
    """The verifier's next-token logits [N, V] float32 after each row's last real token of `tokens` [N, L] (mask
    [N, L], any padding), and whether the row has a token [N]."""
    hidden, _ = models.forward(cfg, params, tokens, models.positions_from_mask(attention_mask), attention_mask)
    last, has_token = reward_model.last_token_index(attention_mask)
    pooled = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]  # [N, E]
    return models.unembed(cfg, params, pooled).astype(jnp.float32), has_token


def judge_probabilities(cfg: ModelConfig, params, tokens: jax.Array, attention_mask: jax.Array, yes_id: int,
                        no_id: int, normalisation: str) -> tuple[jax.Array, jax.Array]:
    """(P(Yes) [N], P(Yes) + P(No) under the full distribution [N]) of judge texts `tokens` [N, L] (mask [N, L],
    any padding): the next-token distribution after each row's last real token (module docstring: "full" =
    softmax over the vocabulary, "yes_no" = σ(z_yes − z_no)). Rows with no token get (0, 0)."""
    logits, has_token = judge_logits(cfg, params, tokens, attention_mask)
    logp = jax.nn.log_softmax(logits, axis=-1)
    p_yes, p_no = jnp.exp(logp[:, yes_id]), jnp.exp(logp[:, no_id])
    if normalisation == "yes_no":
        p = jax.nn.sigmoid(logits[:, yes_id] - logits[:, no_id])
    elif normalisation == "full":
        p = p_yes
    else:
        raise ValueError(f"normalisation={normalisation!r}: must be one of {NORMALISATIONS}")
    return jnp.where(has_token, p, 0.0), jnp.where(has_token, p_yes + p_no, 0.0)


def judge_objective(cfg: ModelConfig, yes_id: int, no_id: int, params, batch: reward_model.LabelBatch
                    ) -> tuple[jax.Array, dict]:
    """Training a verifier on verdicts (the paper distils a large judge's verdicts into its 7B verifier by SFT):
    the cross-entropy of the judgement token, L = −mean[ℓ·log P(Yes) + (1 − ℓ)·log P(No)] under the full softmax
    (ℓ = 1: the completion is correct). Metrics `loss`, `accuracy` = mean[(P(Yes) > P(No)) == (ℓ > 0.5)],
    `p_yes` (mean P(Yes))."""
    logits, _ = judge_logits(cfg, params, batch.tokens, batch.attention_mask)
    logp = jax.nn.log_softmax(logits, axis=-1)
    labels = batch.labels.astype(jnp.float32)
    loss = -jnp.mean(labels * logp[:, yes_id] + (1.0 - labels) * logp[:, no_id])
    accuracy = jnp.mean(((logp[:, yes_id] > logp[:, no_id]) == (labels > 0.5)).astype(jnp.float32))
    return loss, {"loss": loss, "accuracy": accuracy, "p_yes": jnp.mean(jnp.exp(jax.lax.stop_gradient(
        logp[:, yes_id])))}


def make_train_step(cfg: ModelConfig, optimizer, yes_id: int, no_id: int) -> Callable:
    """Jitted `reward_model.train_step(state, batch)` of `judge_objective` on LabelBatches, state donated."""
    objective = functools.partial(judge_objective, cfg, yes_id, no_id)
    return jax.jit(functools.partial(reward_model.train_step, objective, optimizer), donate_argnums=0)


@functools.lru_cache(maxsize=None)
def make_judge_fn(cfg: ModelConfig, yes_id: int, no_id: int, normalisation: str) -> Callable:
    """Jitted `judge_probabilities(params, tokens, attention_mask)` of one verifier (compiled once per width)."""
    return jax.jit(functools.partial(judge_probabilities, cfg, yes_id=yes_id, no_id=no_id,
                                     normalisation=normalisation))


def hard_verdict(p_yes: np.ndarray, threshold: float) -> np.ndarray:
    """The binary reward 1[P(Yes) >= threshold] [N] float32."""
    return (np.asarray(p_yes) >= threshold).astype(np.float32)


# ------------------------------------------------------------------------------ judge texts -> tokens


def judge_ids(tokenizer, pieces, question: str, reference: str, completion: str, max_length: int,
              criterion: str = "") -> tuple[list[int], bool]:
    """The judge text's token ids (bos, then each piece tokenised in turn) and whether it was cut to
    `max_length` (module docstring: the completion's start first, then the whole text's left)."""
    values = {"question": question, "reference": reference, "completion": completion, "criterion": criterion}
    head = [] if tokenizer.bos_id is None else [tokenizer.bos_id]
    parts, completion_part = [], 0
    for literal, field in pieces:
        if literal:
            parts.append(tokenizer.encode(literal))
        if field is not None:
            completion_part = len(parts) if field == "completion" else completion_part
            parts.append(tokenizer.encode(values[field]))
    excess = len(head) + sum(len(p) for p in parts) - max_length
    if excess > 0:
        cut = min(excess, len(parts[completion_part]))
        parts[completion_part] = parts[completion_part][cut:]
    ids = head + [i for p in parts for i in p]
    return ids[max(0, len(ids) - max_length):], excess > 0


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded tokens [N, W] int32 and mask [N, W] int32, W = the longest row rounded up to LENGTH_BUCKET (at
    most max_length, at least 1); an empty row is all padding."""
    width = max(1, min(max_length, sampler.bucket_length(max((len(r) for r in rows), default=1), LENGTH_BUCKET)))
    tokens = np.full((len(rows), width), pad_id, np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        if row:
            tokens[i, width - len(row):] = row
            mask[i, width - len(row):] = 1
    return tokens, mask


def encode_judge_texts(tokenizer, pieces, questions: Sequence[str], references: Sequence[str],
                       completions: Sequence[str], max_length: int, criteria: Sequence[str] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left-padded judge tokens [N, W], mask [N, W] (`judge_ids`, `left_pad`) and the rows cut to max_length [N]."""
    criteria = [""] * len(completions) if criteria is None else criteria
    rows = [judge_ids(tokenizer, pieces, q, r, c, max_length, k)
            for q, r, c, k in zip(questions, references, completions, criteria, strict=True)]
    tokens, mask = left_pad([ids for ids, _ in rows], tokenizer.pad_id, max_length)
    return tokens, mask, np.array([cut for _, cut in rows], bool)


def single_token_id(tokenizer, text: str, field: str) -> int:
    """The id of `text` when the tokenizer reads it as ONE known token; ValueError naming `field` otherwise."""
    ids = tokenizer.encode(text)
    if len(ids) != 1 or ids[0] == getattr(tokenizer, "unk_id", None):
        raise ValueError(f"{SECTION}.{field}={text!r}: the verifier's tokenizer reads it as {ids} (unk id "
                         f"{getattr(tokenizer, 'unk_id', None)}); it must be a single known token")
    return ids[0]


# ------------------------------------------------------------------------------ the verifier


def save(directory: str, cfg: ModelConfig, params, meta: dict | None = None) -> None:
    """Writes decoder `params` as a verifier directory (`reward_model.save`, kind "generative_verifier"); `meta` may
    hold the tokenizer's fingerprint (`reward_model.tokenizer_fingerprint`), checked against the RL run's."""
    reward_model.save(directory, cfg, params, {**(meta or {}), "kind": KIND})


@dataclasses.dataclass(frozen=True)
class Verifier:
    """A generative verifier ready to score rollouts: ONE jitted forward per batch and one transfer of [N]."""

    cfg: ModelConfig
    params: object
    tokenizer: object
    pieces: tuple
    yes_id: int
    no_id: int
    normalisation: str
    max_length: int
    placement: judges.JudgePlacement | None = None  # None: the default device, unsharded

    @classmethod
    def from_config(cls, section, run_tokenizer, alphabet: str, *, dtype: str = "float32",
                    param_dtype: str = "float32") -> "Verifier":
        """The verifier of `config.generative_verifier` (`section`): an HF directory with its tokenizer, or a `save`
        directory on the run's tokenizer (its fingerprint on `alphabet` checked); `config.ConfigError` (a
        ValueError) naming the field when it cannot be read or does not fit."""
        cfg, params, tokenizer, pieces = load_judge(section, run_tokenizer, alphabet, "p_yes", dtype, param_dtype)
        try:
            yes_id = single_token_id(tokenizer, section.yes_token, "yes_token")
            no_id = single_token_id(tokenizer, section.no_token, "no_token")
        except ValueError as e:
            raise config_error(str(e)) from e
        if yes_id == no_id or max(yes_id, no_id) >= cfg.vocab_size:
            raise config_error(f"{SECTION}.yes_token / no_token: ids {yes_id} / {no_id} must differ and be < the "
                               f"verifier's vocabulary ({cfg.vocab_size})")
        return cls(cfg, params, tokenizer, pieces, yes_id, no_id, section.normalisation, section.max_length)

    def for_rubric(self, template: str) -> "Verifier":
        """This verifier with a rubric judge's `template` (fields incl. {criterion}: `rewards.rubric`)."""
        try:
            pieces = tuple(templates.template_pieces(template, templates.RUBRIC_TEMPLATE_FIELDS))
        except ValueError as e:
            raise ValueError(f"rubric judge template {template!r}: {e}") from e
        return dataclasses.replace(self, pieces=pieces)

    def encode(self, questions: Sequence[str], references: Sequence[str], completions: Sequence[str],
               criteria: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Left-padded judge tokens [N, W], mask [N, W] and the rows cut to max_length [N] bool."""
        return encode_judge_texts(self.tokenizer, self.pieces, questions, references, completions, self.max_length,
                                  criteria)

    def placed(self, placement: judges.JudgePlacement) -> "Verifier":
        """This verifier with its params sharded on `placement`'s mesh, judging its batches there."""
        return dataclasses.replace(self, params=placement.place_params(self.params, self.cfg), placement=placement)

    def probabilities(self, tokens, mask) -> tuple[np.ndarray, np.ndarray]:
        """(P(Yes) [N], P(Yes) + P(No) [N]) on the host, from one jitted call and one transfer."""
        fn = make_judge_fn(self.cfg, self.yes_id, self.no_id, self.normalisation)
        return tuple(judges.score_rows(self.placement, fn, self.params, tokens, mask))

    def __call__(self, questions, references, completions, criteria=None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(P(Yes) [N], P(Yes) + P(No) [N], truncated [N]) of the completions (with a rubric template, each judged
        against its `criteria` text)."""
        tokens, mask, truncated = self.encode(questions, references, completions, criteria)
        return (*self.probabilities(tokens, mask), truncated)


def config_error(message: str) -> config_lib.ConfigError:
    """A ConfigError whose message starts with the section's name."""
    return config_lib.ConfigError(message if message.startswith(SECTION) else f"{SECTION}: {message}")


def load_judge(section, run_tokenizer, alphabet: str, kind: str, dtype: str = "float32",
               param_dtype: str = "float32") -> tuple:
    """(cfg, params, tokenizer, template pieces) of the judge of `config.generative_verifier` (`section`) of `kind`
    ("p_yes" or "critique"): an HF directory with its own tokenizer, or a `save` directory on the run's tokenizer
    (its fingerprint on `alphabet` checked, and the objective it was trained with matching `kind`); its template
    readable by its tokenizer. `config.ConfigError` naming the field otherwise."""
    try:
        if section.hf_checkpoint:
            from rl4llm.models import hf_checkpoint  # the `hf` extra
            from rl4llm.tokenizers import hf_tokenizer

            tokenizer = hf_tokenizer.HFTokenizer.load(section.hf_checkpoint)
            cfg, params = hf_checkpoint.load_hf_checkpoint(section.hf_checkpoint, dtype=dtype, param_dtype=param_dtype)
        else:
            cfg, params, tokenizer = _load_own(section.checkpoint, run_tokenizer, alphabet, kind)
        try:
            pieces = tuple(templates.template_pieces(section.template))
        except ValueError as e:
            raise ValueError(f"{SECTION}.template={section.template!r}: {e}") from e
        unknown = sorted({c for literal, _ in pieces for c in literal
                          if getattr(tokenizer, "unk_id", None) in tokenizer.encode(c)})
        if unknown:
            raise ValueError(f"{SECTION}.template={section.template!r}: the verifier's tokenizer has no token for "
                             f"{unknown} (they would read as unk)")
    except ValueError as e:
        raise config_error(str(e)) from e
    return cfg, params, tokenizer, pieces


# the reward-model job's objective that trains each kind of judge (reward_model.json's "objective")
_KIND_OBJECTIVES = {"p_yes": "judge", "critique": "critique"}


def _load_own(directory: str, run_tokenizer, alphabet: str, kind: str):
    """(cfg, params, the run's tokenizer) of a `save` directory, checked against the run's tokenizer and `kind`."""
    meta_path = os.path.join(directory, reward_model.META_FILE)
    meta = {"kind": KIND}  # a missing reward_model.json: `reward_model.load` names it
    if os.path.isfile(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
    if meta.get("kind") != KIND:
        raise ValueError(f"{SECTION}.checkpoint={directory!r} holds no generative verifier (kind {meta.get('kind')!r}: "
                         "an outcome reward model, config.reward_model); write one with verifiers.generative.save")
    trained = meta.get("objective")
    if trained in _KIND_OBJECTIVES.values() and trained != _KIND_OBJECTIVES[kind]:
        raise ValueError(f"{SECTION}.kind={kind!r}: the judge in checkpoint={directory!r} was trained with "
                         f"config.reward_model.objective={trained!r}; set kind="
                         f"{next(k for k, o in _KIND_OBJECTIVES.items() if o == trained)!r}")
    cfg, params, _ = reward_model.load_for_run(directory, f"{SECTION}.checkpoint", "verifier", run_tokenizer, alphabet,
                                               models.init_params)
    return cfg, params, run_tokenizer
