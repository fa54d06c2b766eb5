"""The learner: one jitted, donated step `(state, batch) -> (state, metrics)`.

The step recomputes the completion log-probs (and entropies) under the current params, the reference log-probs
when KL is on, evaluates the configured policy loss from `rl4llm.rl` (by name) with optional per-token weights
(truncated IS against the sampler, a token-selection mask), or a pairwise objective in its place (online DPO:
`preference_step`), adds the KL and entropy terms (fixed coefficients, or adaptive ones carried in the TrainState),
applies one optax update, and logs whole-batch token statistics (entropy percentiles, Cov(logp, A)). Gradient
accumulation over micro-batches is a `lax.scan` inside the step; the loss of every term is aggregated with
whole-batch weights (`rl.aggregation.aggregation_weights`), and losses that select or weight tokens by batch
statistics (or pair rows) get those of the whole minibatch (`minibatch_token_stats`, `preference_step.pair_terms`),
so the update does not depend on the micro-batch size (nor on how the batch is sharded across devices).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import flax
import jax
import jax.numpy as jnp
import optax

from rl4llm import models
from rl4llm.models import lora
from rl4llm.rl import aggregation
from rl4llm.rl import kl as kl_lib
from rl4llm.rl import registry
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import optim
from rl4llm.train import preference_step
from rl4llm.train import token_weights
from rl4llm.train.companions import epo as epo_lib


class TrainState(flax.struct.PyTreeNode):
    """Everything the learner carries between RL steps (a checkpoint's `state`; the RL loop carries the prompt
    selection's host-side state beside it, `train.loop`)."""

    params: Any  # with LoRA adapters (config.model.lora.rank > 0) only lora.trainable(params) is trained
    opt_state: Any  # optimizer state of lora.trainable(params)
    ref_params: Any  # frozen reference policy for KL (the warm-start params); None when KL is off
    key: jax.Array  # uint32 key data; the draws of RL step s come from fold_in(key, s)
    # What a run adds to the policy, by name, present only when it is on: the controllers' adaptive coefficients
    # ("kl_coef", "entropy_coef": float32 scalars, config.rl.kl_target / entropy_target > 0; absent: the fixed
    # LearnerConfig value) and the companions' states ("critic", "prm", "epo": `train.companions`).
    extras: dict = flax.struct.field(default_factory=dict)

    def extra(self, name: str):
        """`extras[name]`, or None when the run has no such state."""
        return self.extras.get(name)

    def with_extras(self, **values) -> "TrainState":
        """This state with `extras[name] = value` for each (a None value removes the entry)."""
        extras = {**self.extras, **values}
        return self.replace(extras={k: v for k, v in extras.items() if v is not None})


class LearnerBatch(flax.struct.PyTreeNode):
    """One (mini)batch of N completions; P prompt tokens and T completion tokens per row."""

    tokens: jax.Array  # [N, P+T] int32
    attention_mask: jax.Array  # [N, P+T] int32 0/1
    completion_mask: jax.Array  # [N, T] float32: 1 on policy tokens
    advantages: jax.Array  # [N, T] float32
    old_logp: jax.Array  # [N, T] float32: log-probs before this step's updates (PPO "old")
    sampler_logp: jax.Array  # [N, T] float32: log-probs the sampler reported
    token_weights: Any = None  # [N, T] float32 multiplied into the loss's is_weights (e.g. forking-token mask)
    proxy_logp: Any = None  # [N, T] float32 Lp-Reg proxy log-probs (losses that declare proxy_logp)
    target_advantages: Any = None  # [N] float32 GBPO targets (losses that declare target_advantages)
    turn_id: Any = None  # [N, T] int32 turn index of each completion token, -1 elsewhere (multi-turn batches: EPO)
    off_policy_mask: Any = None  # [N, T] float32 1 on off-policy trace tokens (losses that declare off_policy_mask)
    scores: Any = None  # [N] float32 rewards and group_ids [N] int32: a pairwise objective's pairs (preference_step)
    group_ids: Any = None


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Static hyper-parameters of the learner step (hashable, so the step compiles once)."""

    loss: str
    loss_kwargs: tuple  # sorted (name, value) pairs
    agg_mode: str
    kl_coef: float  # KL-in-loss coefficient (the initial one when adaptive); 0: no KL term in the loss
    kl_kind: str
    entropy_coef: float  # entropy bonus coefficient (the initial one when adaptive)
    temperature: float
    micro_batch_size: int  # 0: no accumulation
    logprob_chunk_size: int
    use_old_logp: bool  # False: one on-policy update, old = stop_gradient(current) (ratio 1)
    tis_cap: float = 0.0  # > 0: truncated IS weights against the sampler log-probs on the policy loss
    tis_level: str = "token"  # "token" | "sequence" (losses.truncated_is_weights)
    logprob_vocab_chunk_size: int = 0  # > 0: vocabulary entries projected at once (online logsumexp); 0: all
    epo: tuple = ()  # EPO's settings (train.companions.epo.learner_settings); (): no EPO term
    agg_norm_length: float = 0.0  # C of "seq-mean-token-sum-norm" (Dr.GRPO's run constant); 0: the padded length
    prompt_group: int = 1  # > 1: rows in groups of this many share a prompt, forwarded once (completion_hidden)
    preference: Any = None  # a pairwise objective replacing `loss` (preference_step.PreferenceSettings), or None


# LearnerBatch fields forwarded to the policy loss when they are set.
_OPTIONAL_LOSS_INPUTS = ("proxy_logp", "target_advantages", "off_policy_mask", "sampler_logp")


def coefficients(cfg: LearnerConfig, state: TrainState) -> tuple:
    """(KL-in-loss coefficient, entropy coefficient) of this update; None where the term is off.

    Adaptive coefficients come from the state (they change between steps without recompiling), fixed ones from the
    config. KL is on iff `cfg.kl_coef > 0`; entropy iff its coefficient is adaptive or nonzero (negative: minimised).
    """
    kl_coef = None if cfg.kl_coef <= 0 else (cfg.kl_coef if state.extra("kl_coef") is None else state.extra("kl_coef"))
    entropy_coef = state.extra("entropy_coef")
    entropy_coef = entropy_coef if entropy_coef is not None else (cfg.entropy_coef or None)
    return kl_coef, entropy_coef


def reference_params(state: TrainState):
    """Params of the KL reference policy: for LoRA params (`lora.has_adapters`), the same params with the
    adapters off (the frozen base, no second copy); otherwise `state.ref_params`."""
    return lora.adapters_off(state.params) if lora.has_adapters(state.params) else state.ref_params


def _logprob_options(cfg: LearnerConfig) -> dict:
    """Keyword arguments of `logprobs.completion_logprobs` / `logprobs_from_hidden`: temperature and chunking."""
    return dict(temperature=cfg.temperature, chunk_size=cfg.logprob_chunk_size,
                vocab_chunk_size=cfg.logprob_vocab_chunk_size or None)


def _logprob_fn(model_cfg, cfg: LearnerConfig, completion_len: int) -> Callable:
    """(params, tokens, attention_mask) -> (logp, entropy) [m, T] of the completions, chunked as configured."""
    return functools.partial(logprobs_lib.completion_logprobs, model_cfg, completion_len=completion_len,
                             prompt_group=cfg.prompt_group, **_logprob_options(cfg))


def minibatch_token_stats(model_cfg, cfg: LearnerConfig, params, batch: LearnerBatch, key):
    """The configured loss's `token_stats` [N, T] on the WHOLE minibatch, or None when it needs none or
    the minibatch is a single micro-batch (the loss then computes them over the whole minibatch itself).

    Losses that select or weight tokens by batch statistics (clip_cov, kl_cov, lp_reg, hapo, steer:
    `registry.TOKEN_STATISTICS`) would otherwise select per micro-batch, as verl does. Their statistics
    use the current policy's log-probs and entropies, which do not change within one update, so a
    forward-only pass over the micro-batches (no gradient, one extra forward) gives exactly what a
    single whole-minibatch call would see; each micro-batch's loss then gets its slice.
    """
    num_micro = batch.completion_mask.shape[0] // (cfg.micro_batch_size or batch.completion_mask.shape[0])
    if cfg.loss not in registry.TOKEN_STATISTICS or num_micro == 1:
        return None
    logp_fn = _logprob_fn(model_cfg, cfg, batch.completion_mask.shape[1])
    inputs = optim.split_microbatches((batch.tokens, batch.attention_mask), cfg.micro_batch_size)
    logp, entropy = jax.lax.map(lambda xs: logp_fn(params, *xs), inputs)  # [n_micro, m, T] each
    logp, entropy = (x.reshape(batch.completion_mask.shape) for x in (logp, entropy))
    return registry.get_token_statistics(cfg.loss)(
        logp=logp,
        old_logp=batch.old_logp if cfg.use_old_logp else logp,
        advantages=batch.advantages,
        mask=batch.completion_mask,
        key=key,
        entropy=entropy,
        proxy_logp=batch.proxy_logp,
        **dict(cfg.loss_kwargs),
    )


def _add_regularisers(model_cfg, cfg: LearnerConfig, coefs, loss, sums: dict, logp, entropy, ref_params,
                      mb: LearnerBatch, agg_weights, epo):
    """`loss` plus the KL term (k1/k2/k3 to the reference, `rl.kl.estimate`), minus the entropy bonus, plus EPO's
    term, each aggregated with the whole minibatch's weights; their metrics go into `sums`."""
    kl_coef, entropy_coef = coefs
    mask = mb.completion_mask
    if kl_coef is not None:
        ref_logp, _ = _logprob_fn(model_cfg, cfg, mask.shape[1])(ref_params, mb.tokens, mb.attention_mask)
        kl = kl_lib.estimate(logp, jax.lax.stop_gradient(ref_logp), cfg.kl_kind)
        kl_loss = jnp.sum(kl * agg_weights)
        loss = loss + kl_coef * kl_loss
        sums["kl_loss"] = kl_loss
        sums["kl"] = jnp.sum(kl * mask)
    if entropy_coef is not None:
        loss = loss - entropy_coef * jnp.sum(entropy * agg_weights)
    if cfg.epo:  # EPO's entropy bonus and per-turn corridor; its metrics are whole-batch aggregates once summed
        epo_loss, epo_metrics = epo_lib.loss(cfg.epo, epo, entropy, mb.turn_id, mask, agg_weights)
        loss = loss + epo_loss
        sums.update(epo_metrics)
    return loss


def _microbatch_loss(
    model_cfg, cfg: LearnerConfig, params, ref_params, coefs, mb: LearnerBatch, agg_weights, token_stats, key,
    head_loss: Callable | None = None, head_params=None, head_mb=None, epo=None,
):
    """Loss of one micro-batch (its share of the whole-batch aggregate), summed metrics, the head loss's summed
    metrics (None without one), and the micro-batch's (log-probs, entropies) [m, T] without gradient.
    `token_stats`: the micro-batch's slice of `minibatch_token_stats` (None: the loss computes its own).
    `head_loss(head_params, hidden [m, T, E], head_mb) -> (loss, sums)`: a loss read from the same completion
    hidden states as the log-probs (one decoder forward), added to the policy loss (`HeadLoss`).
    `epo`: the state's `train.companions.epo.EPOState` (read when `cfg.epo` is set)."""
    completion_len = mb.completion_mask.shape[1]
    hidden = models.completion_hidden(model_cfg, params, mb.tokens, mb.attention_mask, completion_len, cfg.prompt_group)
    logp, entropy = logprobs_lib.logprobs_from_hidden(model_cfg, params, hidden, mb.tokens[:, -completion_len:],
                                                      **_logprob_options(cfg))
    old_logp = mb.old_logp if cfg.use_old_logp else jax.lax.stop_gradient(logp)
    is_weights = token_weights.policy_is_weights(cfg, old_logp, mb)
    if cfg.preference:  # `token_stats`: the rows' PairTerms; the pair loss's metrics are whole-minibatch ones
        loss, loss_metrics = preference_step.surrogate_loss(logp, token_stats), {}
    else:
        extras = {name: getattr(mb, name) for name in _OPTIONAL_LOSS_INPUTS if getattr(mb, name) is not None}
        extras.update({} if token_stats is None else {"token_stats": token_stats})
        loss, loss_metrics = registry.get_policy_loss(cfg.loss)(
            logp, old_logp, mb.advantages, mb.completion_mask, agg_mode=registry.agg_mode_for(cfg.loss, cfg.agg_mode),
            agg_weights=agg_weights, is_weights=is_weights, key=key, entropy=jax.lax.stop_gradient(entropy),
            **extras, **dict(cfg.loss_kwargs))
    mask = mb.completion_mask
    sums = {"pg_loss": loss, "entropy": jnp.sum(entropy * mask)}
    if is_weights is not None:
        sums["is_weight"] = jnp.sum(is_weights * mask)
    sums.update(token_weights.mechanism_sums(cfg, old_logp, mb))
    loss = _add_regularisers(model_cfg, cfg, coefs, loss, sums, logp, entropy, ref_params, mb, agg_weights, epo)
    # Loss metrics are masked means over the micro-batch, weighted by its token count, or maxima / minima
    # (`metrics.extremum`), combined as such over the micro-batches.
    tokens = jnp.sum(mask)
    sums.update({f"{k}_tokensum": v * tokens for k, v in loss_metrics.items() if metrics_lib.extremum(k) is None})
    extremes = {k: v for k, v in loss_metrics.items() if metrics_lib.extremum(k) is not None}
    sums["tokens"] = tokens
    sampled = mask if mb.off_policy_mask is None else mask * (1.0 - mb.off_policy_mask)  # traces: no sampler logp
    sums["logp_gap_sampler_learner"] = jnp.sum(jnp.abs(logp - mb.sampler_logp) * sampled)
    head_sums = None
    if head_loss is not None:
        head_value, head_sums = head_loss(head_params, hidden, head_mb)
        loss = loss + head_value
    return loss, (sums, extremes, head_sums, jax.lax.stop_gradient((logp, entropy)))


class HeadLoss(NamedTuple):
    """A loss on the policy's completion hidden states trained with the policy loss in the same forward pass:
    a shared-trunk value head (`train.companions.critic.shared_trunk_step`). Its gradient flows into the policy's params
    as `loss_fn` lets it (the value head scales it by value_loss_coef)."""

    loss_fn: Callable  # (params, hidden [m, T, E], micro-batch of `batch`) -> (loss, summed metrics)
    params: Any  # differentiated: their gradients come back as PolicyGradients.head_grads
    batch: Any  # the loss's inputs, leaves [N, ...], split into micro-batches with the LearnerBatch


class PolicyGradients(NamedTuple):
    """Whole-minibatch gradients and summed micro-batch metrics of `policy_gradients`."""

    grads: Any  # of lora.trainable(params)
    sums: dict  # the policy loss's summed metrics
    extremes: dict  # the policy loss's maxima / minima over the micro-batches (`metrics.extremum`)
    logp: jax.Array  # [N, T] without gradient
    entropy: jax.Array  # [N, T] without gradient
    head_grads: Any = None  # of HeadLoss.params (None without a head loss)
    head_sums: Any = None  # the head loss's summed metrics
    pair_metrics: Any = None  # a pairwise objective's whole-minibatch metrics (preference_step.pair_terms)


def policy_gradients(model_cfg, cfg: LearnerConfig, state: TrainState, batch: LearnerBatch, key: jax.Array,
                     head: HeadLoss | None = None) -> PolicyGradients:
    """Gradients of the whole-minibatch loss w.r.t. `lora.trainable(state.params)` (and `head.params`),
    accumulated over micro-batches (`learner_step` applies them).

    `key` feeds losses that draw random numbers (clip_cov: one draw per token of the whole minibatch).
    Aggregation weights and token statistics (`minibatch_token_stats`) are those of the whole
    minibatch, sliced per micro-batch, so the update does not depend on the micro-batch size; a head loss
    must aggregate its micro-batches the same way (whole-minibatch weights in `head.batch`).
    """
    # What is differentiated and updated: `lora.trainable(params)`, the adapters alone for LoRA params (the
    # frozen base gets no gradient and no optimizer state), else all params.
    trainable = lora.trainable(state.params)
    ref_params = reference_params(state)
    coefs = coefficients(cfg, state)
    head_fn, head_params, head_batch = (None, None, None) if head is None else head

    def loss_fn(t, h, mb, mb_weights, mb_stats, mb_head):
        return _microbatch_loss(model_cfg, cfg, lora.with_trainable(state.params, t), ref_params, coefs, mb,
                                mb_weights, mb_stats, key, head_fn, h, mb_head, state.extra("epo"))

    grad_fn = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)

    def part(xs):
        (_, (mb_sums, mb_extremes, mb_head_sums, mb_tokens)), (mb_grads, mb_head_grads) = grad_fn(
            trainable, head_params, *xs)
        return ((mb_grads, mb_head_grads, mb_sums, mb_head_sums), mb_extremes), mb_tokens

    def combine(carry, part):
        return jax.tree.map(jnp.add, carry[0], part[0]), metrics_lib.combine_extremes(carry[1], part[1])

    # Weights of the WHOLE minibatch, sliced per micro-batch: Σ over micro-batches = full-batch aggregate.
    agg_mode = registry.agg_mode_for(cfg.loss, cfg.agg_mode)
    agg_weights = aggregation.aggregation_weights(batch.completion_mask, agg_mode,
                                                  norm_length=cfg.agg_norm_length or None)
    if cfg.preference:  # a pair loss: its rows' terms (as token_stats) and metrics, from the whole minibatch
        logprob_fn = _logprob_fn(model_cfg, cfg, batch.completion_mask.shape[1])
        token_stats, pair_metrics = preference_step.pair_terms(cfg.preference, logprob_fn, cfg.micro_batch_size,
                                                               state.params, ref_params, batch)
    else:
        token_stats, pair_metrics = minibatch_token_stats(model_cfg, cfg, state.params, batch, key), None
    xs = optim.split_microbatches((batch, agg_weights, token_stats, head_batch), cfg.micro_batch_size)
    first = jax.tree.map(lambda x: x[0], xs)

    def carry_shape():
        (_, (sums, extremes, head_sums, _)), (grads, head_grads) = grad_fn(trainable, head_params, *first)
        return (grads, head_grads, sums, head_sums), extremes

    added_shape, extremes_shape = jax.eval_shape(carry_shape)
    init = (jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), added_shape), metrics_lib.no_extremes(extremes_shape))
    ((grads, head_grads, sums, head_sums), extremes), (logp, entropy) = optim.accumulate(part, init, xs, combine)
    unsplit = lambda x: x.reshape(batch.completion_mask.shape)  # noqa: E731
    return PolicyGradients(grads, sums, extremes, unsplit(logp), unsplit(entropy), head_grads, head_sums, pair_metrics)


def apply_policy_gradients(optimizer: optax.GradientTransformation, state: TrainState, batch: LearnerBatch,
                           pg: PolicyGradients) -> tuple[TrainState, dict]:
    """One optimizer update of `lora.trainable(state.params)` by `pg.grads`, and the step's policy metrics."""
    params, opt_state = optim.apply_policy_update(optimizer, state.params, state.opt_state, pg.grads)
    sums = dict(pg.sums)
    tokens = jnp.maximum(sums.pop("tokens"), 1.0)
    metrics = {"loss/pg": sums.pop("pg_loss"), "grad_norm": optax.tree.norm(pg.grads)}
    metrics.update({k: sums.pop(k) for k in [k for k in sums if k.startswith("epo/")]})  # summed aggregates
    if "kl_loss" in sums:
        metrics["loss/kl"] = sums.pop("kl_loss")
    metrics.update({k.removesuffix("_tokensum"): v / tokens for k, v in sums.items()})
    metrics.update({**pg.extremes, **(pg.pair_metrics or {})})
    metrics.update(metrics_lib.token_statistics(pg.logp, pg.entropy, batch.advantages, batch.completion_mask))
    state = state.replace(params=params, opt_state=opt_state)
    if state.extra("epo") is not None:  # EPO: this update's entropies join the per-turn history of the next updates
        state = state.with_extras(epo=epo_lib.accumulate(state.extra("epo"), pg.entropy, batch.turn_id,
                                                         batch.completion_mask))
    return state, metrics


def learner_step(
    model_cfg,
    cfg: LearnerConfig,
    optimizer: optax.GradientTransformation,
    state: TrainState,
    batch: LearnerBatch,
    key: jax.Array,
) -> tuple[TrainState, dict]:
    """One optimizer update on `batch` (gradients accumulated over micro-batches, `policy_gradients`)."""
    return apply_policy_gradients(optimizer, state, batch, policy_gradients(model_cfg, cfg, state, batch, key))


def make_learner_step(model_cfg, cfg: LearnerConfig, optimizer, layout=None, state=None) -> Callable:
    """The jitted learner step; the state argument is donated. With a `parallel.layout.Layout` (and the `state`
    whose shardings it keeps): compiled on the learner mesh by `Layout.jit_step` (the batch's rows split over the
    batch axes, metrics replicated)."""
    step = functools.partial(learner_step, model_cfg, cfg, optimizer)
    if layout is None:
        return jax.jit(step, donate_argnums=0)
    return layout.jit_step(step, state, batch_argnums=(1,))
