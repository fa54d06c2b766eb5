"""Outcome reward model (RM): a decoder of `rl4llm.models` plus the critic's scalar head (`models.value_head`),
scoring a whole `[prompt | completion]` sequence with one number, trained on preference pairs with the
Bradley–Terry loss or on verifier labels with a binary cross-entropy, saved as its own Orbax checkpoint, and read
by the RL step as a reward (`config.reward_model`, `train.rollouts`).

Conventions (TRL's `RewardTrainer` / OpenRLHF's `RewardModelTrainer`, followed where they agree):

- **score** `r(x, y) = h_last·w + b`: the head's output at the LAST NON-PAD token of the sequence (TRL:
  `AutoModelForSequenceClassification` with `num_labels=1` pools the logits at the last non-pad token; OpenRLHF
  `get_reward_model`: `values.gather(1, eos_indices)`, the last attended position). Our sequences end in the
  completion's eos, so the score is read there, as in OpenRLHF. Any padding layout works (left-padded prompt and
  right-padded completion, as the sampler and `encode_sequences` write them, or all right / all left): the index is
  the last position whose mask is 1, and RoPE positions follow the mask (`models.positions_from_mask`). A row with
  no token at all scores 0.
- **Bradley–Terry** `L = −log σ(r_c − r_r − m)` (margin m optional, Llama 2), the mean over pairs:
  `rl.preference.bradley_terry_loss` (TRL `-logsigmoid(rewards_chosen - rewards_rejected - margin)`).
- **verifier labels** (BCE): `L = −[ℓ·log σ(r) + (1 − ℓ)·log σ(−r)]`, ℓ ∈ [0, 1] (the outcome-reward-model
  objective of Cobbe et al. 2021's verifiers, as a logistic loss on the same scalar score).
- **bad input**: an empty completion is its eos alone (`encode_sequences`), scored there; an over-long completion
  keeps its first `completion_len` tokens (OpenRLHF's `truncation=True` keeps the head of the text; it also
  overwrites the last kept token with eos, we do not: the score is read at the last kept token). Both get a finite
  score, never an error.
- the head is the critic's (`value_head`: `h·w + b` in float32), its kernel drawn N(0, 1/(E+1)²) as OpenRLHF's, the
  bias 0 (`init_params`).

Params: `{"trunk": decoder params, "head": {"kernel" [E], "bias" []}}` (the separate critic's tree). The generative
verifier (`rl4llm.verifiers.generative`, a bare decoder judging by its next token) shares this module's directory
format (`save` / `load` with its own params tree), pooling (`last_token_index`) and update (`train_step`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Callable, Sequence

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from rl4llm import models
from rl4llm.config.sections import SCALAR_REWARD_MODEL_OBJECTIVES as OBJECTIVES
from rl4llm.models import value_head
from rl4llm.models.config import Llama3RopeScaling, ModelConfig
from rl4llm.parallel import judges
from rl4llm.rl import preference
from rl4llm.train import batches
from rl4llm.train import optim

Params = Any
META_FILE = "reward_model.json"  # beside the Orbax params: the decoder's config and how the RM was trained


def init_params(cfg: ModelConfig, key: jax.Array, trunk: Params | None = None) -> Params:
    """RM params: a copy of `trunk` (a warm start: an SFT policy, an imported HF checkpoint) or a random decoder,
    and the critic's scalar head (`value_head.init_head`) with its kernel drawn N(0, 1/(E+1)²) as OpenRLHF's
    `value_head` (`normal_(std=1 / (hidden_size + 1))`), bias 0. With a zero kernel the trunk gets no gradient until
    w moves (BT's gradient reaches it through w); measured (nano, 3-operand final-answer pairs, 300 BT updates, one
    seed): held-out pairwise accuracy 0.63 from a zero kernel, 0.77 from this one."""
    trunk = models.init_params(cfg, key) if trunk is None else jax.tree.map(jnp.copy, trunk)
    head = value_head.init_head(cfg)
    std = 1.0 / (cfg.hidden_size + 1)
    head["kernel"] = (std * jax.random.normal(jax.random.fold_in(key, 1), head["kernel"].shape)).astype(
        head["kernel"].dtype)
    return {"trunk": trunk, "head": head}


def last_token_index(attention_mask: jax.Array) -> tuple[jax.Array, jax.Array]:  # [N, L] -> [N] int32, [N] bool
    """Index of each row's last position with mask 1 (0 for a row without any), and whether the row has one."""
    mask = attention_mask.astype(bool)
    length = mask.shape[1]
    last = length - 1 - jnp.argmax(mask[:, ::-1], axis=1)
    return last.astype(jnp.int32), jnp.any(mask, axis=1)


def score(cfg: ModelConfig, params: Params, tokens: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Scores [N] float32 of sequences `tokens` [N, L] (mask [N, L]): the head at the last non-pad token (module
    docstring); 0 for a row without tokens."""
    hidden, _ = models.forward(cfg, params["trunk"], tokens, models.positions_from_mask(attention_mask),
                               attention_mask)  # [N, L, E]
    last, has_token = last_token_index(attention_mask)
    pooled = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]  # [N, E]
    return jnp.where(has_token, value_head.values_from_hidden(params["head"], pooled), 0.0)


@functools.lru_cache(maxsize=None)
def make_score_fn(cfg: ModelConfig) -> Callable:
    """Jitted `score(params, tokens, attention_mask) -> [N]` of one decoder config (compiled once per shape)."""
    return jax.jit(functools.partial(score, cfg))


# ------------------------------------------------------------------------------ text -> sequences


def encode_sequences(tokenizer, prompts: Sequence[str], completions: Sequence[str], *, prompt_bucket: int,
                     completion_len: int) -> tuple[np.ndarray, np.ndarray]:
    """`[prompt | completion + eos]` tokens [N, P+T] and mask [N, P+T], the rollouts' layout (prompt left-padded to a
    multiple of `prompt_bucket`, completion right-padded to T = `completion_len`); an over-long completion keeps its
    first T tokens, an empty one is its eos alone (module docstring)."""
    prompt_tokens, prompt_mask = batches.encode_prompts(tokenizer, prompts, prompt_bucket)
    completion_tokens, completion_mask = batches.encode_completions(tokenizer, completions, completion_len,
                                                                    truncate=True)
    tokens, mask = batches.join_sequences(prompt_tokens, prompt_mask, completion_tokens, completion_mask)
    return np.asarray(tokens), np.asarray(mask)


class PairBatch(flax.struct.PyTreeNode):
    """P preference pairs: the same prompt with the chosen and the rejected completion (same shapes)."""

    chosen_tokens: jax.Array  # [P, L] int32
    chosen_mask: jax.Array  # [P, L]
    rejected_tokens: jax.Array  # [P, L]
    rejected_mask: jax.Array  # [P, L]
    margin: jax.Array  # [P] float32 (zeros: no margin)


class LabelBatch(flax.struct.PyTreeNode):
    """N sequences with verifier labels in [0, 1] (1: the completion is correct)."""

    tokens: jax.Array  # [N, L] int32
    attention_mask: jax.Array  # [N, L]
    labels: jax.Array  # [N] float32


def encode_pairs(tokenizer, prompts: Sequence[str], chosen: Sequence[str], rejected: Sequence[str], *,
                 prompt_bucket: int, completion_len: int, margin: Sequence[float] | None = None) -> PairBatch:
    """A PairBatch of `encode_sequences` rows (chosen and rejected share the prompt's padding)."""
    encode = functools.partial(encode_sequences, tokenizer, prompts, prompt_bucket=prompt_bucket,
                               completion_len=completion_len)
    (ct, cm), (rt, rm) = encode(chosen), encode(rejected)
    m = np.zeros(len(prompts), np.float32) if margin is None else np.asarray(margin, np.float32)
    return PairBatch(chosen_tokens=ct, chosen_mask=cm, rejected_tokens=rt, rejected_mask=rm, margin=m)


# ------------------------------------------------------------------------------ training


def bradley_terry_objective(cfg: ModelConfig, params: Params, batch: PairBatch) -> tuple[jax.Array, dict]:
    """Mean Bradley–Terry loss of the pairs (`rl.preference.bradley_terry_loss`), both sides scored in ONE forward
    of the 2P rows; metrics `loss`, `accuracy` (r_c > r_r, strict), `margin`, `chosen_score`, `rejected_score`."""
    tokens = jnp.concatenate([batch.chosen_tokens, batch.rejected_tokens])
    mask = jnp.concatenate([batch.chosen_mask, batch.rejected_mask])
    chosen, rejected = jnp.split(score(cfg, params, tokens, mask), 2)
    _, metrics = preference.bradley_terry_loss(chosen, rejected, margin=batch.margin)
    metrics.pop("valid_frac")
    return metrics["loss"], metrics


def bce_objective(cfg: ModelConfig, params: Params, batch: LabelBatch) -> tuple[jax.Array, dict]:
    """Mean logistic loss of the scores against the labels (module docstring); `accuracy` = mean[(r > 0) ==
    (ℓ > 0.5)], `score` = mean r."""
    scores = score(cfg, params, batch.tokens, batch.attention_mask)
    labels = batch.labels.astype(jnp.float32)
    loss = jnp.mean(optax.sigmoid_binary_cross_entropy(scores, labels))
    accuracy = jnp.mean(((scores > 0) == (labels > 0.5)).astype(jnp.float32))
    return loss, {"loss": loss, "accuracy": accuracy, "score": jnp.mean(jax.lax.stop_gradient(scores))}


_OBJECTIVE_FNS = {"bradley_terry": bradley_terry_objective, "bce": bce_objective}


class RMState(flax.struct.PyTreeNode):
    params: Params
    opt_state: Any
    step: jax.Array  # int32: updates done


def init_state(params: Params, optimizer: optax.GradientTransformation) -> RMState:
    return RMState(params=params, opt_state=optimizer.init(params), step=jnp.zeros([], jnp.int32))


def train_step(objective_fn: Callable, optimizer: optax.GradientTransformation, state: RMState, batch
               ) -> tuple[RMState, dict]:
    """One optimizer update (`train.optim.apply_update`: AdamW, clipping, the non-finite guard) of
    `objective_fn(params, batch) -> (loss, metrics)` -> (state, metrics + `grad_norm`)."""
    grad_fn = jax.value_and_grad(objective_fn, has_aux=True)
    (_, metrics), grads = grad_fn(state.params, batch)
    params, opt_state = optim.apply_update(optimizer, state.params, state.opt_state, grads)
    metrics["grad_norm"] = optax.tree.norm(grads)
    return RMState(params=params, opt_state=opt_state, step=state.step + 1), metrics


def make_train_step(cfg: ModelConfig, optimizer: optax.GradientTransformation, objective: str) -> Callable:
    """Jitted `train_step(state, batch)` of `objective` ("bradley_terry" on a PairBatch, "bce" on a LabelBatch),
    state donated."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r}: must be one of {OBJECTIVES}")
    return jax.jit(functools.partial(train_step, functools.partial(_OBJECTIVE_FNS[objective], cfg), optimizer),
                   donate_argnums=0)


@functools.lru_cache(maxsize=None)
def make_eval_fn(cfg: ModelConfig, objective: str) -> Callable:
    """Jitted `(params, batch) -> metrics` of `objective`, no update (held-out pairwise accuracy, ...)."""
    return jax.jit(lambda params, batch: _OBJECTIVE_FNS[objective](cfg, params, batch)[1])


# ------------------------------------------------------------------------------ checkpoints


def _config_to_json(cfg: ModelConfig) -> dict:
    return dataclasses.asdict(cfg)


def _config_from_json(fields: dict) -> ModelConfig:
    fields = dict(fields)
    if fields.get("rope_scaling") is not None:
        fields["rope_scaling"] = Llama3RopeScaling(**fields["rope_scaling"])
    fields["lora_targets"] = tuple(fields.get("lora_targets", ()))
    return ModelConfig(**fields)


def save(directory: str, cfg: ModelConfig, params: Params, meta: dict | None = None) -> None:
    """Writes the RM: Orbax params at `<directory>/params` and `<directory>/reward_model.json` (the decoder's
    ModelConfig under "model", plus `meta`: tokenizer fingerprint, training record). `directory` must not hold an
    RM already (Orbax refuses to overwrite)."""
    os.makedirs(directory, exist_ok=True)
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(os.path.join(os.path.abspath(directory), "params"), params)
    with open(os.path.join(directory, META_FILE), "w") as f:
        json.dump({**(meta or {}), "model": _config_to_json(cfg)}, f, indent=1)


def load(directory: str, init: Callable[[ModelConfig, jax.Array], Params] | None = None
         ) -> tuple[ModelConfig, Params, dict]:
    """(ModelConfig, params, meta) of an RM written by `save`; ValueError naming the directory if it holds none or
    the params do not match the config. `init` gives the params' tree (`init_params`: trunk + head; a generative
    verifier, `verifiers.generative`, is a bare decoder: `models.init_params`)."""
    meta_path = os.path.join(directory, META_FILE)
    if not os.path.isfile(meta_path):
        raise ValueError(f"{directory!r} holds no reward model ({META_FILE} missing; "
                         "experiments/train_reward_model.py writes one)")
    with open(meta_path) as f:
        meta = json.load(f)
    cfg = _config_from_json(meta.pop("model"))
    abstract = jax.eval_shape(functools.partial(init or init_params, cfg), jax.random.key(0))
    with ocp.StandardCheckpointer() as checkpointer:
        try:
            restored = checkpointer.restore(os.path.join(os.path.abspath(directory), "params"), abstract)
        except (ValueError, KeyError) as e:
            raise ValueError(f"reward model {directory!r}: its params do not match its {META_FILE}: {e}") from e
    # uncommitted arrays, as fresh ones (a committed input would make jitted programs compile again on step 2)
    return cfg, jax.tree.map(lambda x: jnp.asarray(jax.device_get(x)), restored), meta


def load_for_run(directory: str, field: str, what: str, tokenizer, alphabet: str,
                 init: Callable[[ModelConfig, jax.Array], Params] | None = None) -> tuple[ModelConfig, Params, dict]:
    """`load(directory, init)` for a run whose policy uses `tokenizer`: every error names the config `field`
    (e.g. "config.reward_model.checkpoint"); ValueError if `what` (the model's name in the message) has a smaller
    vocabulary than the tokenizer or was written for another tokenizer (`tokenizer_fingerprint` of `alphabet`)."""
    try:
        cfg, params, meta = load(directory, init)
    except ValueError as e:
        raise ValueError(f"{field}: {e}") from e
    if cfg.vocab_size < tokenizer.vocab_size:
        raise ValueError(f"{field}={directory!r}: the {what}'s vocabulary ({cfg.vocab_size}) is smaller than this "
                         f"run's tokenizer's ({tokenizer.vocab_size})")
    expected = meta.get("tokenizer_fingerprint")
    if expected is not None and expected != tokenizer_fingerprint(tokenizer, alphabet):
        raise ValueError(f"{field}={directory!r}: the {what} was written for another tokenizer than this run's "
                         "(train it on the same task and model family)")
    return cfg, params, meta


def tokenizer_fingerprint(tokenizer, alphabet: str) -> list[int]:
    """The ids of `alphabet` (every character the task uses): two tokenizers that agree on it read the task's
    texts alike; the RL job checks its policy's tokenizer against the RM's (`Scorer.from_checkpoint`)."""
    return [int(i) for i in tokenizer.encode(alphabet)]


@dataclasses.dataclass(frozen=True)
class Scorer:
    """An RM ready to score rollouts in the RL step: ONE jitted call per batch (`make_score_fn`) and one transfer of
    the [N] scores to the host, on the judges' mesh once `placed` (`parallel.judges`)."""

    cfg: ModelConfig
    params: Params
    meta: dict
    placement: judges.JudgePlacement | None = None  # None: the default device, unsharded

    @classmethod
    def from_checkpoint(cls, directory: str, tokenizer, alphabet: str) -> "Scorer":
        """The RM at `directory`; ValueError if it was trained with another tokenizer than `tokenizer`."""
        return cls(*load_for_run(directory, "config.reward_model.checkpoint", "reward model", tokenizer, alphabet))

    def placed(self, placement: judges.JudgePlacement) -> "Scorer":
        """This RM with its params sharded on `placement`'s mesh, scoring its batches there."""
        return dataclasses.replace(self, params=placement.place_params(self.params, self.cfg), placement=placement)

    def __call__(self, tokens, attention_mask, params: Params | None = None) -> np.ndarray:  # [N, L] -> [N] float32
        """The scores on the host, by the checkpoint's params or `params` (the same model, trained on: co-training;
        they must sit on the placement's mesh: the learner's, `config.mesh.judges="shared"`)."""
        params = self.params if params is None else params
        return judges.score_rows(self.placement, make_score_fn(self.cfg), params, tokens, attention_mask)
