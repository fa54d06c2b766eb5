"""The generative verifier's second kind: a sampled critique with a parsed verdict (DeepSeek-GRM / SPCT: Liu et al.
2025, *Inference-Time Scaling for Generalist Reward Modeling*, arXiv 2504.02495; digest rewards_and_data_efficiency.md
§6.2). `config.generative_verifier.kind="critique"`; the first kind, P(Yes) as the reward, is `generative`'s.

The judge is a decoder prompted with the judge text of `generative` (`template`: the question, the completion, the
reference). It WRITES a critique — principles, one verdict per step, then an integer score S ∈ [1, 10] — and the
reward is read from the score alone:

- **the critique** (`critique_text`, in the arithmetic task's character vocabulary, no letters):
  `{principle}={v_0};{v_1};…;{v_m}#{S}` then the stop token. The principle is the problem's operations in order
  (`principle`: "7+5-1=" gives "+5-1": what every step must apply, DeepSeek-GRM's principles reduced to the one
  criterion this task has); v_k is 1 (sound) / 0 (wrong) for segment k of the completion (its steps, then its final
  answer: the exact step judge `rewards.arithmetic.step_labels`, "step k: ok / wrong"); S is `critique_score`.
- **the score** (`critique_score`): S = 1 + round(4 · f) + 5 · c, with f = (sound segments) / (segments) and c = 1
  when the final answer equals the reference (the task's exact reward), else 0 (round half up). So S ∈ [6, 10] iff
  the answer is right, S ∈ [1, 5] iff it is wrong, and within each half the share of sound steps orders the
  responses (a right answer from flawed steps scores below a sound one: FAPO's flawed positives).
  `"7+5-1="`, `"7+5=13;13-1=12;#12"`, reference 11: labels [0, 1, 1], f = 2/3, c = 0, S = 1 + 3 + 0 = 4, critique
  `"+5-1=0;1;1#4"`.
- **the strict parser** (`parse_score`): a critique is parsable iff it holds exactly ONE score marker `#`, followed
  by an integer in [1, 10] written without sign or leading zero, and nothing after it (its stop token excluded; one
  that did not stop within `max_critique_length` tokens is not parsable). Two markers (two scores) are not
  parsable: neither counts (an ambiguous verdict earns nothing, which also closes the hedge of writing every score).
  Out of range ("#0", "#11"), missing, empty or garbage text: not parsable.
- **the vote** (`vote`): the k sampled critiques of a completion are summed, S_vote = Σ_j S_j ∈ [k, 10k] (the paper's
  voting: a sum, which widens the score's range); an unparsable critique contributes the MINIMUM score 1 (it is not
  dropped: every completion's vote has k terms and the same range, and a completion that derails the judge earns no
  credit); their count is logged (`verifier/parse_failures`). The RL reward is the vote mean-normalised to [0, 1]:
  r = (S_vote − k) / (9k) (`normalised_reward`); the verdict "correct" is S_vote > 5.5 k (`vote_verdict`, the
  mean score ≥ 6 for integer scores with k = 1).

Training (the paper's rejective fine-tuning, `train.critique_job`): the judge is fine-tuned on procedural critiques
of reference and corrupted solutions (`critique_text`), which are exactly the critiques whose verdict agrees with the
ground truth — the set RFT keeps from a judge's samples. Departures from the paper: no rule-based online RL of the
judge after RFT; no meta-RM (all k samples vote); principles are the problem's operations, not generated free text;
the scores are pointwise on one response (the paper scores n responses of a query together); the critique is in the
task's 16-character alphabet. Scoring (`CritiqueVerifier`) prefills the N judge texts once and forks each into its k
rows (`sampling.generate`'s `prompt_index`): one jitted sampling call for the N·k critiques and one transfer back,
on the judges' mesh on several devices (`config.mesh.judges`, `parallel.judges`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rl4llm import sampling
from rl4llm.parallel import judges
from rl4llm.rewards import arithmetic as arithmetic_rewards
from rl4llm.verifiers import generative

KIND = "critique"  # config.generative_verifier.kind (and config.reward_model.objective) of this judge
MIN_SCORE, MAX_SCORE = 1, 10
SCORE_MARK = "#"
_SCORE = re.compile(r"(10|[1-9])")  # the text after the one marker, whole: no sign, no leading zero


def principle(prompt: str) -> str:
    """The problem's operations in order, each operator with its operand ("7+5-1=" -> "+5-1"): the criterion the
    critique checks every step against (the operation items of `rewards.arithmetic.rubric_items`; ValueError when
    the prompt does not start with an arithmetic problem)."""
    return "".join(arithmetic_rewards.rubric_items(prompt)[:-1])


def critique_score(labels: Sequence[bool], correct: bool) -> int:
    """S = 1 + round(4 f) + 5 c ∈ [1, 10] (module docstring), f = mean(labels) (the sound share of the segments; 0
    without any), c = `correct` (the final answer equals the reference); round half up."""
    f = sum(bool(x) for x in labels) / len(labels) if len(labels) else 0.0
    return MIN_SCORE + int(np.floor(4 * f + 0.5)) + 5 * int(bool(correct))


def critique_text(prompt: str, completion: str, reference: str) -> tuple[str, int]:
    """The procedural critique of `completion` (module docstring: `{principle}={v_0};…;{v_m}#{S}`, no stop token)
    and its score S: the exact step judge's labels (`rewards.arithmetic.step_labels`) and the exact answer reward."""
    labels = arithmetic_rewards.step_labels(prompt, completion)
    score = critique_score(labels, arithmetic_rewards.score(completion, reference) == 1.0)
    verdicts = ";".join("1" if label else "0" for label in labels)
    return f"{principle(prompt)}={verdicts}{SCORE_MARK}{score}", score


def parse_score(critique: str, finished: bool = True) -> int | None:
    """The score of a critique's text (its stop token excluded), or None when it is not parsable (module docstring:
    exactly one `#`, then an integer in [1, 10] with no sign or leading zero, then the end; `finished` False — the
    judge did not stop — is not parsable). Never raises on any str."""
    if not finished or critique.count(SCORE_MARK) != 1:
        return None
    match = _SCORE.fullmatch(critique.split(SCORE_MARK, 1)[1])
    return int(match.group(1)) if match else None


def vote(scores: np.ndarray, parsed: np.ndarray) -> np.ndarray:
    """S_vote [N] = Σ_j S_j over the k critiques of each completion (DeepSeek-GRM's voting), `scores` [N, k] int and
    `parsed` [N, k] bool; an unparsable critique counts MIN_SCORE. In [k, 10k]."""
    return np.where(parsed, scores, MIN_SCORE).sum(-1).astype(np.int64)


def normalised_reward(votes: np.ndarray, k: int) -> np.ndarray:
    """r = (S_vote − k · MIN) / (k · (MAX − MIN)) ∈ [0, 1] [N] float32: the mean score mapped to [0, 1]."""
    return ((np.asarray(votes, np.float64) - k * MIN_SCORE) / (k * (MAX_SCORE - MIN_SCORE))).astype(np.float32)


def vote_verdict(votes: np.ndarray, k: int) -> np.ndarray:
    """The vote's verdict [N] bool: "correct" iff S_vote > k · 5.5 (the mean score is in the upper half, [6, 10])."""
    return np.asarray(votes) > k * (MIN_SCORE + MAX_SCORE) / 2


# ------------------------------------------------------------------------------ sampling critiques


@functools.lru_cache(maxsize=None)
def _make_critique_fn(cfg, sampling_cfg: sampling.SamplingConfig, samples: int):
    """Jitted `(params, tokens [N, W], mask [N, W], key) -> (tokens, mask, finished)` of the N·k critiques, each
    [N, k, ...] (text n's k samples): one `sampling.generate`, each text prefilled once and forked to its k rows."""

    def critiques(params, tokens, mask, key):
        n = tokens.shape[0]
        rollout = sampling.generate(cfg, params, tokens, mask, key, sampling_cfg,
                                    prompt_index=jnp.repeat(jnp.arange(n, dtype=jnp.int32), samples))
        per_text = lambda x: x.reshape(n, samples, *x.shape[1:])  # noqa: E731
        return tuple(map(per_text, (rollout.completion_tokens, rollout.completion_mask, rollout.finished)))

    return jax.jit(critiques)


def sample_critiques(cfg, params, tokenizer, tokens: np.ndarray, mask: np.ndarray, samples: int,
                     sampling_cfg: sampling.SamplingConfig, key, placement: judges.JudgePlacement | None = None
                     ) -> tuple[list[str], np.ndarray, np.ndarray]:
    """k = `samples` critiques of each of the N left-padded judge texts `tokens` / `mask` [N, W]: one jitted
    `sampling.generate` (each text prefilled once, forked to its k rows; row n·k + j is text n's j-th sample,
    drawn with key fold_in(key, n·k + j)) and one transfer, on the judges' mesh with a `placement` (`params` placed
    there, `parallel.judges`: the texts' rows split over its batch axes, padded with empty texts whose critiques
    are dropped). -> (texts [N·k] without the stop token, finished [N·k] bool (stopped within max_new_tokens),
    lengths [N·k] int)."""
    key = key if placement is None else placement.replicate(key)
    fn = functools.partial(_make_critique_fn(cfg, sampling_cfg, samples), key=key)
    out, out_mask, finished = (x.reshape(-1, *x.shape[2:]) for x in judges.score_rows(placement, fn, params, tokens,
                                                                                      mask))
    stops = set(sampling_cfg.stop_token_ids)
    texts = [tokenizer.decode([int(t) for t in row[m] if t not in stops]) for row, m in zip(out, out_mask)]
    return texts, np.asarray(finished, bool), out_mask.sum(-1)


@dataclasses.dataclass(frozen=True)
class Critiques:
    """A batch's critiques: `texts` [N·k] (row n·k + j: completion n's j-th), `scores` [N, k] int (MIN_SCORE where
    not parsable), `parsed` [N, k] bool, `finished` [N, k] bool, `lengths` [N, k] tokens, `truncated` [N] (the judge
    text was cut to max_length), `votes` [N] (`vote`) and `rewards` [N] (`normalised_reward`)."""

    texts: list
    scores: np.ndarray
    parsed: np.ndarray
    finished: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray
    votes: np.ndarray
    rewards: np.ndarray


def read_critiques(texts: Sequence[str], finished: np.ndarray, lengths: np.ndarray, has_text: np.ndarray,
                   truncated: np.ndarray, k: int) -> Critiques:
    """Parses and votes N·k sampled critiques (`sample_critiques`' outputs); a judge text without any token
    (`has_text` [N] False) gets no parsable critique."""
    n = len(has_text)
    parsed_scores = [parse_score(t, bool(f)) for t, f in zip(texts, finished)]
    parsed = np.array([s is not None for s in parsed_scores], bool).reshape(n, k) & np.asarray(has_text)[:, None]
    scores = np.where(parsed, np.array([s or MIN_SCORE for s in parsed_scores]).reshape(n, k), MIN_SCORE)
    votes = vote(scores, parsed)
    return Critiques(list(texts), scores, parsed, np.asarray(finished, bool).reshape(n, k),
                     np.asarray(lengths).reshape(n, k), np.asarray(truncated, bool), votes, normalised_reward(votes, k))


@dataclasses.dataclass(frozen=True)
class CritiqueVerifier:
    """A critique judge ready to score rollouts: k sampled critiques per completion in one jitted call, parsed and
    voted on the host (module docstring)."""

    cfg: object
    params: object
    tokenizer: object
    pieces: tuple
    max_length: int
    samples: int
    sampling_cfg: sampling.SamplingConfig
    placement: judges.JudgePlacement | None = None  # None: the default device, unsharded

    @classmethod
    def from_config(cls, section, run_tokenizer, alphabet: str, *, dtype: str = "float32",
                    param_dtype: str = "float32") -> "CritiqueVerifier":
        """The judge of `config.generative_verifier` with kind "critique" (`generative.load_judge`: its directory or
        HF checkpoint, its template read); `config.ConfigError` naming the field when it cannot serve."""
        cfg, params, tokenizer, pieces = generative.load_judge(section, run_tokenizer, alphabet, KIND, dtype,
                                                               param_dtype)
        stops = tuple(getattr(tokenizer, "stop_token_ids", ()) or ())
        if not stops:
            raise generative.config_error(f"{generative.SECTION}.kind='critique': the judge's tokenizer has no stop "
                                          "token to end a critique with")
        sampling_cfg = sampling.SamplingConfig(max_new_tokens=section.max_critique_length,
                                               temperature=section.temperature, stop_token_ids=stops,
                                               pad_id=tokenizer.pad_id)
        return cls(cfg, params, tokenizer, pieces, section.max_length, section.samples, sampling_cfg)

    def placed(self, placement: judges.JudgePlacement) -> "CritiqueVerifier":
        """This judge with its params sharded on `placement`'s mesh, sampling its critiques there."""
        return dataclasses.replace(self, params=placement.place_params(self.params, self.cfg), placement=placement)

    def encode(self, questions, references, completions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Left-padded judge tokens [N, W], mask [N, W] and the rows cut to max_length [N] (`generative`'s)."""
        return generative.encode_judge_texts(self.tokenizer, self.pieces, questions, references, completions,
                                             self.max_length)

    def __call__(self, questions, references, completions, key) -> Critiques:
        """The k critiques of each (question, reference, completion), parsed and voted; `key` draws them (unused at
        temperature 0)."""
        tokens, mask, truncated = self.encode(questions, references, completions)
        texts, finished, lengths = sample_critiques(self.cfg, self.params, self.tokenizer, tokens, mask,
                                                    self.samples, self.sampling_cfg, key, self.placement)
        return read_critiques(texts, finished, lengths, mask.any(-1), truncated, self.samples)


def critique_metrics(critiques: Critiques, main: np.ndarray) -> dict:
    """The RL step's `verifier/*` of a critique judge: `parse_failures` (count of unparsable critiques; they voted
    MIN_SCORE), `parse_fail_frac`, `unfinished_frac` (critiques cut at max_critique_length), `score_mean` (mean
    score of a critique, failures as MIN_SCORE), `reward_mean`, `agreement` (the vote's verdict equals the exact
    reward's, `main` [N] = 1 for a right answer), `critique_length` (mean tokens) and `truncated_frac`."""
    k = critiques.scores.shape[1]
    return {
        "verifier/parse_failures": float((~critiques.parsed).sum()),
        "verifier/parse_fail_frac": float((~critiques.parsed).mean()),
        "verifier/unfinished_frac": float((~critiques.finished).mean()),
        "verifier/score_mean": float(critiques.scores.mean()),
        "verifier/reward_mean": float(critiques.rewards.mean()),
        "verifier/agreement": float(np.mean(vote_verdict(critiques.votes, k) == (np.asarray(main) >= 1.0))),
        "verifier/critique_length": float(critiques.lengths.mean()),
        "verifier/truncated_frac": float(critiques.truncated.mean()),
    }

