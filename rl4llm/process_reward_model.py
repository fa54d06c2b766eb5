"""Process reward model (PRM): the outcome RM's decoder + scalar head (`rl4llm.reward_model`) read at EVERY step's
end instead of the sequence's last token, trained with a per-step binary cross-entropy on a process judge's step
labels, saved in the RM's directory format, and read by the RL step as the step scores of `config.task.step_reward`
(`config.task.step_reward_model`).

Conventions (Math-Shepherd, Wang et al. 2024, and PRM800K / "Let's Verify Step by Step", Lightman et al. 2023):

- **step score** `s_k = σ(h_{e_k}·w + b)`: the head at the token e_k that holds step k's last character (its ``;``,
  the step separator; the final ``#answer`` segment's last digit), the PRM's estimate that steps 1..k are right.
  Math-Shepherd reads P(good) at a step tag appended after each step; PRM800K's models predict the step's rating at
  the end of the step. Here the separator is the tag: it is part of the policy's text, so the PRM reads the same
  tokens the policy wrote (no tag inserted). The step ends are `rewards.process.step_layout`'s (the `Rows.step_ends`
  of the RL step), so the PRM, the exact judge and the step rewards of `rl.process` use one segmentation.
- **per-step BCE** `L = Σ_{i,k} −[ℓ_ik·log σ(z_ik) + (1 − ℓ_ik)·log σ(−z_ik)] / Σ_i K_i`, z the head's logit at
  step end k of row i, ℓ_ik ∈ {0, 1} the judge's label: the mean over all step ends of the batch (Math-Shepherd's
  cross-entropy at the step tags; a row with no step end adds nothing). Departure: the labels are the task's EXACT
  judge (`rewards.arithmetic.step_labels`: each step checked given the one before), where Math-Shepherd estimates
  them by Monte-Carlo completions and PRM800K by human raters; a step that builds correctly on an earlier error is
  labelled sound here, where a Math-Shepherd "hard" label of that prefix would be 0.
- **held-out metrics**: step accuracy (s > ½ ⇔ ℓ = 1) and step AUC (P(s_sound > s_flawed), ties ½: the
  Mann–Whitney statistic, `step_auc`) over the held-out steps, and the loss.
- params and checkpoints are the outcome RM's (`reward_model.init_params`, `save`, `load`), the meta's
  `objective` = "process" marking a PRM (`Scorer.from_checkpoint` refuses an outcome RM).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from rl4llm import models
from rl4llm import reward_model as rm
from rl4llm.models import value_head
from rl4llm.models.config import ModelConfig
from rl4llm.parallel import judges
from rl4llm.rewards import process as process_lib
from rl4llm.train import batches

OBJECTIVE = "process"  # config.reward_model.objective of a PRM, and its checkpoint meta's "objective"


def position_logits(cfg: ModelConfig, params: rm.Params, tokens: jax.Array, attention_mask: jax.Array
                    ) -> jax.Array:  # [N, L] -> [N, L] float32
    """The head's logit z_t = h_t·w + b at every position of `tokens` (one forward; 0 where the mask is 0)."""
    hidden, _ = models.forward(cfg, params["trunk"], tokens, models.positions_from_mask(attention_mask),
                               attention_mask)  # [N, L, E]
    return jnp.where(attention_mask.astype(bool), value_head.values_from_hidden(params["head"], hidden), 0.0)


def step_scores(cfg: ModelConfig, params: rm.Params, tokens: jax.Array, attention_mask: jax.Array,
                step_ends: jax.Array) -> jax.Array:  # [N, L] x3 -> [N, L] float32
    """s = σ(z) on the step-end positions `step_ends` [N, L] (bool) of `[prompt | completion]` rows, 0 elsewhere."""
    return jnp.where(step_ends, jax.nn.sigmoid(position_logits(cfg, params, tokens, attention_mask)), 0.0)


def completion_step_scores(cfg: ModelConfig, params: rm.Params, tokens: jax.Array, attention_mask: jax.Array,
                           step_ends: jax.Array) -> jax.Array:  # [N, P+T] x2, [N, T] -> [N, T]
    """`step_scores` of `[prompt | completion]` rows with the step ends given on the T completion tokens (the RL
    step's layout, `Rows.step_ends`): [N, T]."""
    width = step_ends.shape[1]
    logits = position_logits(cfg, params, tokens, attention_mask)[:, -width:]
    return jnp.where(step_ends, jax.nn.sigmoid(logits), 0.0)


class StepBatch(flax.struct.PyTreeNode):
    """N `[prompt | completion]` sequences with the judge's label on each step end."""

    tokens: jax.Array  # [N, L] int32
    attention_mask: jax.Array  # [N, L]
    step_ends: jax.Array  # [N, L] bool: the tokens that end a step
    step_labels: jax.Array  # [N, L] float32: the step's label (1 sound, 0 flawed) on its end, 0 elsewhere


def encode_steps(tokenizer, judge: process_lib.Judge, prompts: Sequence[str], completions: Sequence[str], *,
                 prompt_bucket: int, completion_len: int) -> StepBatch:
    """`reward_model.encode_sequences` rows (the rollouts' layout; an over-long completion keeps its first
    `completion_len` tokens) with `judge`'s labels of the completion as it was kept (decoded from its tokens, as the RL
    step judges it) placed on the step ends (`process.step_layout`)."""
    tokens, mask = rm.encode_sequences(tokenizer, prompts, completions, prompt_bucket=prompt_bucket,
                                       completion_len=completion_len)
    completion_tokens, completion_mask = tokens[:, -completion_len:], mask[:, -completion_len:]
    texts = batches.decode_completions(tokenizer, completion_tokens, completion_mask)
    labels = [judge(p, t) for p, t in zip(prompts, texts)]
    scores, ends = process_lib.step_layout(tokenizer.decode, labels, texts, [0] * len(texts), completion_tokens,
                                           completion_mask)
    prompt_zeros = np.zeros((len(texts), tokens.shape[1] - completion_len))
    return StepBatch(tokens=tokens, attention_mask=mask,
                     step_ends=np.concatenate([prompt_zeros.astype(bool), ends], axis=1),
                     step_labels=np.concatenate([prompt_zeros.astype(np.float32), scores], axis=1))


def step_bce_objective(cfg: ModelConfig, params: rm.Params, batch: StepBatch) -> tuple[jax.Array, dict]:
    """The per-step BCE (module docstring), mean over the batch's step ends; metrics `loss`, `step_accuracy`
    (σ(z) > ½ ⇔ ℓ > ½), `score` (mean s over step ends), `steps` (their number)."""
    logits = position_logits(cfg, params, batch.tokens, batch.attention_mask)
    ends = batch.step_ends.astype(jnp.float32)
    labels = batch.step_labels.astype(jnp.float32)
    num_ends = jnp.maximum(jnp.sum(ends), 1.0)
    loss = jnp.sum(optax.sigmoid_binary_cross_entropy(logits, labels) * ends) / num_ends
    right = ((logits > 0) == (labels > 0.5)).astype(jnp.float32)
    return loss, {"loss": loss, "step_accuracy": jnp.sum(right * ends) / num_ends,
                  "score": jnp.sum(jax.nn.sigmoid(jax.lax.stop_gradient(logits)) * ends) / num_ends,
                  "steps": jnp.sum(ends)}


def make_train_step(cfg: ModelConfig, optimizer: optax.GradientTransformation) -> Callable:
    """Jitted `train_step(state, StepBatch)` of the per-step BCE (`reward_model.train_step`), state donated."""
    return jax.jit(functools.partial(rm.train_step, functools.partial(step_bce_objective, cfg), optimizer),
                   donate_argnums=0)


def step_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(s_a > s_b) + ½·P(s_a = s_b) over pairs of a sound step a and a flawed step b (the Mann–Whitney U statistic
    over their counts, by average ranks): 1 = the scores rank every sound step above every flawed one, ½ = chance.
    `scores`, `labels` [S] (one entry per step). NaN when either class is empty."""
    scores, labels = np.asarray(scores, np.float64), np.asarray(labels) > 0.5
    sound, flawed = int(labels.sum()), int((~labels).sum())
    if sound == 0 or flawed == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    sorted_scores = scores[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_scores)) + 1]
    ends = np.r_[starts[1:], len(scores)]
    for start, end in zip(starts, ends):  # ties share their average rank (1-based)
        ranks[order[start:end]] = (start + end + 1) / 2.0
    return float((ranks[labels].sum() - sound * (sound + 1) / 2.0) / (sound * flawed))


def evaluate(cfg: ModelConfig, params: rm.Params, batch: StepBatch) -> dict:
    """Held-out `eval/step_accuracy`, `eval/step_auc` (`step_auc`), `eval/loss` and `eval/score` (mean s) over the
    batch's step ends."""
    metrics, scores = jax.device_get(_make_eval_fn(cfg)(params, batch))
    ends = np.asarray(batch.step_ends, bool)
    return {"eval/step_accuracy": float(metrics["step_accuracy"]), "eval/loss": float(metrics["loss"]),
            "eval/score": float(metrics["score"]),
            "eval/step_auc": step_auc(scores[ends], np.asarray(batch.step_labels)[ends])}


@functools.lru_cache(maxsize=None)
def _make_eval_fn(cfg: ModelConfig) -> Callable:
    """Jitted `(params, batch) -> (objective metrics, step scores [N, L])`."""

    def eval_fn(params, batch):
        scores = step_scores(cfg, params, batch.tokens, batch.attention_mask, batch.step_ends)
        return step_bce_objective(cfg, params, batch)[1], scores

    return jax.jit(eval_fn)


@functools.lru_cache(maxsize=None)
def _make_completion_score_fn(cfg: ModelConfig) -> Callable:
    return jax.jit(functools.partial(completion_step_scores, cfg))


@dataclasses.dataclass(frozen=True)
class Scorer:
    """A PRM ready to score the RL step's rollouts: ONE jitted forward of the batch and one transfer of the [N, T]
    step scores to the host, on the judges' mesh once `placed` (`parallel.judges`)."""

    cfg: ModelConfig
    params: rm.Params
    meta: dict
    placement: judges.JudgePlacement | None = None  # None: the default device, unsharded

    @classmethod
    def from_checkpoint(cls, directory: str, tokenizer, alphabet: str) -> "Scorer":
        """The PRM at `directory` (`config.task.step_reward_model`); ValueError naming that field if it holds no
        reward model, one trained with another tokenizer, or an outcome RM (meta objective other than "process")."""
        field = "config.task.step_reward_model"
        cfg, params, meta = rm.load_for_run(directory, field, "process reward model", tokenizer, alphabet)
        if meta.get("objective") != OBJECTIVE:
            raise ValueError(f"{field}={directory!r}: an outcome reward model (objective {meta.get('objective')!r}), "
                             f"not a PRM; train one with --config.reward_model.objective={OBJECTIVE}")
        return cls(cfg, params, meta)

    def placed(self, placement: judges.JudgePlacement) -> "Scorer":
        """This PRM with its params sharded on `placement`'s mesh, scoring its batches there."""
        return dataclasses.replace(self, params=placement.place_params(self.params, self.cfg), placement=placement)

    def __call__(self, tokens, attention_mask, step_ends) -> np.ndarray:  # [N, P+T] x2, [N, T] -> [N, T] float32
        """The step scores s on the completions' step ends (`completion_step_scores`), 0 elsewhere, on the host."""
        return judges.score_rows(self.placement, _make_completion_score_fn(self.cfg), self.params, tokens,
                                 attention_mask, step_ends)
