"""Off-policy guidance: policy losses over groups that mix on-policy rollouts with off-policy traces (expert,
teacher or reference solutions), marked per token by `off_policy_mask[N, T]` (1 on a trace's tokens).

Same contract as `losses` (`(loss, metrics)`, `agg_mode` / `agg_weights` / `is_weights`); `off_policy_mask` is a
standard loss input (`registry.LOSS_INPUTS`): None or all zeros = every token on-policy. Sampled tokens get PPO's
clipped ratio in all three losses; they differ on the trace tokens: `luffy` (policy shaping of π_θ), `rl_plus` (multiple
importance sampling and an exploration-based advantage), `herl` (policy shaping of the importance ratio to the
behaviour policy: HeRL's guided responses).
"""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp

from rl4llm.rl.aggregation import masked_mean, require
from rl4llm.rl.losses import (_LOG_RATIO_CLAMP, Metrics, _clamped_log_ratio, _ppo_token_loss, _reduce, _selected_mean,
                              _token_advantages)


def luffy(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    off_policy_mask: Optional[jax.Array] = None,  # [N, T] 1 on off-policy (trace) tokens
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    on_policy_clip: bool = True,
    shaping_gamma: float = 0.1,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """LUFFY mixed-policy token loss with policy shaping (Yan et al. 2025, "Learning to Reason under Off-Policy
    Guidance"; official code `mix_core_alg.compute_token_on_off_policy_loss`, train.sh settings).

    ```
    on-policy tokens (off = 0):  lr = clip(logp − old_logp, −20, 20);  ρ = exp(lr)
                                 L = max(−A·ρ, −A·clip(ρ, 1 − clip_low, 1 + clip_high))   (on_policy_clip)
                                 L = −A·ρ                                                  (not on_policy_clip)
    off-policy tokens (off = 1): w = π_θ(t) / π_b(t) with π_b(t) := 1, i.e. w = exp(logp)
                                 L = −A·f(w),  f(w) = w / (w + γ)   (γ = shaping_gamma = 0.1)
    loss = aggregate(L·is_weights, mask, agg_mode)
    ```
    Conventions of the official code (the paper writes the IS ratio π_θ/π_φ of the expert policy φ; the code
    takes π_φ = 1 for every trace token, as its paper says it does "for computational efficiency"): the off-policy
    weight is π_θ(t) itself, it is never clipped (`off_max_clip` / `off_min_clip` unset in train.sh) and has no
    `old_logp` in it. dL/dlogp on a trace token is −A·γ·w/(w + γ)²: largest for w ≈ γ, so unlikely-but-correct
    tokens are not starved; it vanishes as w → 0 (a trace token the policy gives probability 0: finite loss
    and gradient) and as w → 1. The on-policy part is verl "vanilla" without the dual clip (the official code
    has none; it also does not clamp the log-ratio, we clamp at ±20 as `losses.ppo_clip`). LUFFY's train.sh
    drops the on-policy clip (`loss_remove_clip=True`): `on_policy_clip=False`. Advantages come from the
    estimator over the whole mixed group (train.sh: `adv_estimator=grpo`, `grpo_use_std=False`, i.e. `dr_grpo`).
    Without `off_policy_mask` (or with it all 0) the loss is `ppo_clip` with `dual_clip=None`.

    Ties: on-policy as `ppo_clip` (at ρ = 1 dL/dlogp = −A·w_agg whatever the clip ranges). Inputs of the branch a
    token does not take are replaced by 0 before any nonlinearity, so a −inf log-prob of a trace token (or its
    NaN log-ratio) never reaches the loss or the gradient.

    Metrics: `off_policy_frac` (trace tokens / valid tokens); over the valid trace tokens (0 when none):
    `off_is_weight_mean` (mean π_θ/π_b, LUFFY's `off_policy_prob`), `off_shaped_weight_mean` (mean f(w), LUFFY's
    `off_ratio_mean`), `off_is_weight_max` / `off_is_weight_min` (0 / 1 when there is none: the identities of max
    / min on [0, 1], so micro-batch maxima and minima combine exactly; the two means are per micro-batch means,
    combined by token count); with `on_policy_clip`, `ppo_clip`'s clip fractions over the valid on-policy tokens;
    `approx_kl` and `ratio_mean/max/min` over the on-policy tokens.
    """
    require("shaping_gamma", shaping_gamma, shaping_gamma > 0, "must be > 0")
    off = _trace_tokens(off_policy_mask, mask)
    is_weight = jnp.exp(jnp.where(off, logp, 0.0))  # π_θ(t) / π_b(t), π_b := 1
    shaped = is_weight / (is_weight + shaping_gamma)
    adv = _token_advantages(advantages)
    token_loss, metrics = _mixed(adv, logp, old_logp, mask, off, -adv * shaped, is_weight, 1.0,
                                 clip_low, clip_high, on_policy_clip)
    metrics["off_shaped_weight_mean"] = _selected_mean(jax.lax.stop_gradient(shaped), mask * off)
    return _reduce(token_loss, mask, agg_mode, agg_weights, is_weights), metrics


def rl_plus(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    off_policy_mask: Optional[jax.Array] = None,  # [N, T] 1 on off-policy (trace) tokens
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    on_policy_clip: bool = True,
    exploration_exponent: float = 0.5,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """RL-PLUS hybrid-policy loss: multiple importance sampling and an exploration-based advantage on the trace
    tokens (Dong et al. 2025, "RL-PLUS: Countering Capability Boundary Collapse of LLMs in Reinforcement Learning
    with Hybrid-policy Optimization"; official code `rlplus_core_alg.compute_token_on_off_policy_loss` with
    `off_policy_strategy="RL-PLUS"`, train_RL-PLUS.sh settings).

    ```
    on-policy tokens: as `luffy` (PPO clip without dual clip; `on_policy_clip=False`: −A·ρ)
    trace tokens:     π_ω = (π_old + 1)/2                         (the unknown behaviour policy's estimate)
                      w = π_θ / (½·π_old + ½·π_ω) = π_θ / (¾·π_old + ¼)   (MIS, balance heuristic over {π_old, π_ω})
                      C = (1 − sg(π_θ))^γ                          (exploration weight, γ = exploration_exponent)
                      L = −A·C·w
    ```
    π_old are the old log-probs of the trace tokens (the behaviour pass of the params before this step's updates;
    with one update per step the learner's own, so π_old = π_θ there). The official code hard-codes γ = 0.5 and
    this π_ω; w ∈ [0, 4] (≤ π_θ/¼), never clipped. dL/dlogp on a trace token = −A·C·w (C carries no gradient):
    0 at π_θ = 0 (finite for a probability-0 trace token, −inf log-probs included) and at π_θ = 1 (C = 0).

    Metrics: `off_policy_frac`; over the valid trace tokens `off_is_weight_mean/max/min` (w; 0 / 4 when there is
    none, the identities of max / min on [0, 4]), `off_exploration_weight_mean` (C); the on-policy ones as `luffy`.
    """
    require("exploration_exponent", exploration_exponent, exploration_exponent >= 0, "must be >= 0")
    off = _trace_tokens(off_policy_mask, mask)
    policy_prob = jnp.exp(jnp.where(off, logp, 0.0))
    old_prob = jnp.exp(jnp.where(off, old_logp, 0.0))
    behaviour_estimate = 0.5 * (old_prob + 1.0)  # π_ω
    is_weight = policy_prob / (0.5 * old_prob + 0.5 * behaviour_estimate)
    exploration = (1.0 - jax.lax.stop_gradient(policy_prob)) ** exploration_exponent
    adv = _token_advantages(advantages)
    token_loss, metrics = _mixed(adv, logp, old_logp, mask, off, -adv * exploration * is_weight, is_weight, 4.0,
                                 clip_low, clip_high, on_policy_clip)
    metrics["off_exploration_weight_mean"] = _selected_mean(exploration, mask * off)
    return _reduce(token_loss, mask, agg_mode, agg_weights, is_weights), metrics


def herl(
    logp: jax.Array,  # [N, T]
    old_logp: jax.Array,  # [N, T]
    advantages: jax.Array,  # [N] or [N, T]
    mask: jax.Array,  # [N, T]
    off_policy_mask: Optional[jax.Array] = None,  # [N, T] 1 on the tokens of guided responses
    sampler_logp: Optional[jax.Array] = None,  # [N, T] the behaviour log-probs (the sampler's)
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: Optional[float] = 3.0,
    shaping_gamma: float = 1.0,
    agg_mode: str = "token-mean",
    agg_weights: Optional[jax.Array] = None,
    is_weights: Optional[jax.Array] = None,
) -> tuple[jax.Array, Metrics]:
    """HeRL's mixed-policy token loss (Zhang et al. 2026, "Experience is the Best Teacher: Motivating Effective
    Exploration in Reinforcement Learning for LLMs"; official code sikelifei/HeRL `core_algos.py`,
    `compute_policy_loss_mixpolicy_vanilla`, Qwen3_herl.sh): a response sampled under hindsight guidance g and trained
    as a response to the original prompt x (`rl4llm.train.hints.hindsight_groups`) is off-policy for π_θ(·|x):

    ```
    sampled tokens (off = 0): `losses.ppo_clip` (clip_low, clip_high, dual_clip) on logp − old_logp
    guided tokens (off = 1):  w = exp(clip(logp − sampler_logp, −20, 20)) = π_θ(y_t | x, y_<t) / π_b(y_t | x ⊕ g, y_<t)
                              L = −A·f(w),  f(w) = w / (w + γ)    (γ = shaping_gamma)
    loss = aggregate(L·is_weights, mask, agg_mode)
    ```
    `sampler_logp` on a guided token is its behaviour log-prob, the sampler's under the guided prompt (the official
    code's separate `he_log_probs`; `old_logp` is the learner's, its ratio 1 at one update per step). w is never
    clipped, as the official code's: the shaping f bounds the update (dL/dlogp = −A·γ·w/(w + γ)², largest at w = γ,
    vanishing as w → 0 and as w → ∞); only the log-ratio is clamped at ±20. A token with no behaviour log-prob (a
    trace or Guide's hint: sampler_logp = 0, π_b := 1) gets w = π_θ, LUFFY's weight (`luffy`); so does every guided
    token when `sampler_logp` is None. The on-policy point: an empty guidance gives sampler_logp = logp (up to the
    sampler's numerics), w = 1, f = 1/(1 + γ). Without guided tokens the loss is `losses.ppo_clip` exactly (GRPO's
    with the default loss). γ = 1: Qwen3_herl.sh's `he_shaping_gamma` (its medical recipe: 0.1).

    Metrics: `off_policy_frac` (guided tokens / valid tokens); over the valid guided tokens (0 when none):
    `off_is_weight_mean/max/min` (w; 0 / e^20 when none, the identities of max / min on [0, e^20]),
    `off_shaped_weight_mean` (f(w)), `off_is_clamp_frac` (|log w| at the ±20 clamp); `ppo_clip`'s over the sampled
    tokens.
    """
    require("shaping_gamma", shaping_gamma, shaping_gamma > 0, "must be > 0")
    off = _trace_tokens(off_policy_mask, mask)
    behaviour = jnp.zeros_like(logp) if sampler_logp is None else sampler_logp
    log_ratio = _clamped_log_ratio(jnp.where(off, logp, 0.0), jnp.where(off, behaviour, 0.0))  # ±20, torch's grad
    is_weight = jnp.exp(log_ratio)
    shaped = is_weight / (is_weight + shaping_gamma)
    adv = _token_advantages(advantages)
    token_loss, metrics = _mixed(adv, logp, old_logp, mask, off, -adv * shaped, is_weight,
                                 math.exp(_LOG_RATIO_CLAMP), clip_low, clip_high, True, dual_clip)
    guided = mask * off
    metrics["off_shaped_weight_mean"] = _selected_mean(jax.lax.stop_gradient(shaped), guided)
    clamped = (jnp.abs(log_ratio) >= _LOG_RATIO_CLAMP).astype(jnp.float32)
    metrics["off_is_clamp_frac"] = _selected_mean(clamped, guided)
    return _reduce(token_loss, mask, agg_mode, agg_weights, is_weights), metrics


def _trace_tokens(off_policy_mask: Optional[jax.Array], mask: jax.Array) -> jax.Array:  # [N, T] bool
    return jnp.zeros(mask.shape, bool) if off_policy_mask is None else off_policy_mask != 0


def _mixed(adv, logp, old_logp, mask, off, off_loss, is_weight, weight_bound, clip_low, clip_high, on_policy_clip,
           dual_clip=None):
    """Per-token loss: `off_loss` on trace tokens, PPO's clipped (or plain) ratio loss on the others (with
    `dual_clip` as `losses.ppo_clip`'s), and the metrics shared by the mixed-policy losses. The on-policy branch sees
    0 log-probs on trace tokens, so their (possibly −inf) log-probs never reach its exp; `is_weight` ∈
    [0, weight_bound] on trace tokens."""
    log_ratio = _clamped_log_ratio(jnp.where(off, 0.0, logp), jnp.where(off, 0.0, old_logp))
    on_loss, metrics = _ppo_token_loss(adv, log_ratio, mask * ~off, clip_low, clip_high, dual_clip)
    if not on_policy_clip:
        on_loss = -adv * jnp.exp(log_ratio)
        metrics = {k: v for k, v in metrics.items() if not k.startswith(("clip_frac", "dual_clip"))}
    off_mask, w = mask * off, jax.lax.stop_gradient(is_weight)
    metrics.update({
        "off_policy_frac": masked_mean(off.astype(jnp.float32), mask),
        "off_is_weight_mean": _selected_mean(w, off_mask),
        "off_is_weight_max": jnp.max(jnp.where(off_mask != 0, w, 0.0)),
        "off_is_weight_min": jnp.min(jnp.where(off_mask != 0, w, weight_bound)),
    })
    return jnp.where(off, off_loss, on_loss), metrics
