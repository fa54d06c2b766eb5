"""Prompt selection for RL: which prompts a step trains on (host-side numpy, pure functions).

Methods (``config.selection.method``; formulas from ``shared/papers/rewards_and_data_efficiency.md`` §7 and
``entropy_and_general_rl.md`` #8):

* ``uniform``: the task's training stream (``train_examples(step, B)``), as without selection.
* ``dynamic_sampling`` (DAPO, Yu et al. 2025): drop groups whose G main (verifiable) rewards are all equal --
  accuracy 0 or 1 for 0/1 rewards; the paper's filter and verl's ``filter_groups.metric=acc``, so reward shaping
  such as the overlong punishment does not keep an all-correct group --
  generate further rounds of B fresh prompts and refill to B groups, at most ``max_gen_rounds`` rounds
  (verl ``max_num_gen_batches``) -- :func:`keep_nonuniform_groups`, :func:`choose_groups`.
* ``accuracy_band`` (PRIME, Cui et al. 2025): the same refill loop, keeping groups with
  ``low <= mean correctness <= high`` (0.2, 0.8) -- :func:`keep_accuracy_band`.
* ``dots`` (Sun et al. 2025, "Improving Data Efficiency for LLM RFT through Difficulty-targeted Online Data
  Selection and Rollout Replay"): score ``s_i = -|p̂_i - α|`` (α = 0.5), sample without replacement from
  ``softmax(s / τ)`` (τ = 1e-3) -- :func:`dots_scores`, :func:`softmax_sample_without_replacement`; recent
  groups are replayed (``rl4llm.data.replay``).
* ``bots`` (BOTS, Trinity-RFT): Beta(α_k, β_k) posterior per prompt, Thompson sample ``p_k ~ Beta`` and take the
  prompts closest to the target success -- :func:`bots_update`, :func:`bots_select`.
* ``insight`` (InSight, "Efficient RLVR Training via Weighted Mutual Information Data Selection"): the BOTS
  posterior, and the prompts of largest expected information gain about their success rate from one more outcome,
  ``I(Y; θ) = h(μ) - E[h(θ)]`` at the posterior mean μ -- :func:`information_gain`, :func:`insight_select`.
* ``knapsack`` (Knapsack RL): uniform prompts, rollouts per prompt by ``rl4llm.data.allocation``.
* ``std_filter`` (StarPO-S, RAGEN): roll out ``B / p`` groups, train on the B of largest within-group reward std
  -- :func:`top_std_groups`.
* ``low_likelihood`` (SELF): one greedy completion per prompt; the prompts it gets wrong are rolled out, refilled
  over rounds as dynamic sampling -- :func:`keep_greedy_failures`, :func:`choose_groups`.
* ``prof`` (PROF): n' > G rollouts per prompt, the G kept by the process judge's consistency filter
  (``rl4llm.rewards.process.prof_kept``).

The per-prompt methods (dots, bots, knapsack) select from a fixed pool of distinct training prompts
(:func:`build_pool`) whose statistics live in :class:`SelectionState`, a pytree of fixed-shape float32/int32
arrays saved in the RL checkpoint, so a resumed run selects exactly what the uninterrupted run would have.
Random draws come from ``numpy.random.default_rng([stream, seed, step])``: a pure function of the step.

Departures from the papers, for small tasks without a reference embedder or reference models:
DOTS's adaptive difficulty ``p̂`` of a prompt is its last measured group success rate under the policy (the
quantity DOTS's attention regressor predicts); a never-measured prompt gets the mean of the measured ones (the
regressor's prediction with uniform attention weights). BOTS's implicit evidence uses reference pass rates
``weak = 0, strong = 1`` for every prompt unless given, so ``p̃_k = c`` is the EMA capability (the batch pass rate).
InSight's posterior is updated as BOTS's (its paper's forgetting and evidence weights were not available), and its
weighting of the mutual information was not retrieved: the score here is the unweighted one-outcome BALD gain.
"""

from __future__ import annotations

from typing import Sequence

import flax
import numpy as np
from scipy import special

METHODS = ("uniform", "dynamic_sampling", "accuracy_band", "dots", "bots", "insight", "knapsack",
           "adaptive_difficulty", "std_filter", "scaler", "low_likelihood", "prof", "exit")
# Methods that refill the batch over several generation rounds, and those that select from the prompt pool.
REFILL_METHODS = ("dynamic_sampling", "accuracy_band")
POOL_METHODS = ("dots", "bots", "insight", "knapsack")
# Pool methods that keep a Beta posterior per prompt (`bots_update`) and may replay rollouts.
POSTERIOR_METHODS = ("bots", "insight")
# Methods that draw problems at difficulty levels of the task's ladder (rl4llm.data.difficulty).
LEVEL_METHODS = ("adaptive_difficulty", "scaler")

# SeedSequence prefixes of the selection's random streams (distinct from the tasks' ones).
_SELECT_STREAM = 0x5E1
_POOL_STREAM = 0x9001
UNMEASURED = -1.0  # SelectionState.success of a prompt never rolled out


class SelectionState(flax.struct.PyTreeNode):
    """Per-prompt statistics over the pool of P prompts (all float32 / int32, fixed shapes).

    success: [P] last measured group success rate (UNMEASURED = never); visits: [P] groups rolled out;
    alpha, beta: [P] BOTS Beta posterior; capability: [] BOTS EMA capability c; replay: the replay buffer
    (``rl4llm.data.replay.ReplayState``) or None.
    """

    success: np.ndarray
    visits: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    capability: np.ndarray
    replay: object = None


def init_state(pool_size: int, *, prior_alpha: float = 1.0, prior_beta: float = 1.0, replay=None) -> SelectionState:
    """Fresh statistics: nothing measured, Beta(prior_alpha, prior_beta) for every prompt, capability 0."""
    return SelectionState(
        success=np.full((pool_size,), UNMEASURED, np.float32),
        visits=np.zeros((pool_size,), np.int32),
        alpha=np.full((pool_size,), prior_alpha, np.float32),
        beta=np.full((pool_size,), prior_beta, np.float32),
        capability=np.zeros((), np.float32),
        replay=replay,
    )


def rng(seed: int, step: int, stream: int = 0) -> np.random.Generator:
    """The selection's generator for (seed, RL step, sub-stream): a pure function of its arguments."""
    return np.random.default_rng([_SELECT_STREAM, seed, step, stream])


def build_pool(source, size: int, *, draw_step: int) -> list:
    """``size`` distinct training examples of ``source``, the first distinct ones of ``train_examples(draw_step,
    ...)``; ValueError naming ``config.selection.pool_size`` if the training split has fewer."""
    seen: dict[str, object] = {}
    request = size
    for _ in range(6):
        for ex in source.train_examples(draw_step, request):
            seen.setdefault(ex.prompt, ex)
            if len(seen) == size:
                return list(seen.values())
        request *= 2
    raise ValueError(
        f"config.selection.pool_size={size}: found only {len(seen)} distinct training prompts in "
        f"{request // 2} draws; lower it or enlarge the task's problem space"
    )


# ------------------------------------------------------------------------------------------ filters


def keep_nonuniform_groups(scores: np.ndarray) -> np.ndarray:  # [B, G] -> [B] bool
    """Keep a group iff its scores are not all equal (``std > 0``). On the main reward: DAPO dynamic sampling
    (``0 < #correct < G`` for 0/1 rewards); on the trained rewards: the groups with a non-zero group-relative
    advantage (DOTS replay)."""
    scores = np.asarray(scores)
    return scores.max(axis=1) > scores.min(axis=1)


def keep_accuracy_band(correct: np.ndarray, low: float = 0.2, high: float = 0.8) -> np.ndarray:  # [B, G] -> [B]
    """PRIME online filter: keep a group iff ``low <= mean_j correct_ij <= high``."""
    acc = np.asarray(correct, np.float64).mean(axis=1)
    return (acc >= low) & (acc <= high)


def top_std_groups(scores: np.ndarray, k: int) -> np.ndarray:  # [M, G] -> [k] int
    """StarPO-S reward-variance filter (Wang et al. 2025, "RAGEN: Understanding Self-Evolution in LLM Agents via
    Multi-Turn Reinforcement Learning"): the ``k`` groups with the largest within-group reward std
    ``σ_i = sqrt(Σ_j (r_ij - r̄_i)² / (G - 1))``, in their original order.

    As the official code (RAGEN-AI/RAGEN ``ragen/trainer/agent_trainer.py``, ``_filter_rollout`` with
    ``rollout_filter_type=std``): the Bessel-corrected std of ``torch.std``, ``topk(int(ratio · num_groups))`` over
    the groups rolled out, and the kept groups stay in batch order (a boolean group mask); nothing is regenerated.
    Ties at the cut go to the lower group index (``torch.topk`` leaves their order unspecified). This is the
    paper-era rule (config/base.yaml: ratio 0.25, type std); the repository's later ``ragen/trainer/rollout_filter.py``
    adds other strategies (e.g. a nucleus over the std mass, ``top_p``), which are not implemented here."""
    std = np.asarray(scores, np.float64).std(axis=1, ddof=1)
    if not 0 <= k <= std.size:
        raise ValueError(f"cannot keep k={k} of {std.size} groups")
    return np.sort(np.argsort(-std, kind="stable")[:k])


def keep_greedy_failures(greedy_reward: np.ndarray) -> np.ndarray:  # [B] -> [B] bool
    """SELF low-likelihood curation (Nguyen et al. 2025, "The Reasoning Boundary Paradox: How Reinforcement Learning
    Constrains Language Models"): keep a prompt iff the reward of its greedy completion is not 1.

    The paper trains on the problems whose correct solutions have low likelihood under the policy. The official code
    (mail-research/SELF-llm-interference, ``verl/trainer/ppo/ray_trainer.py``, ``RayMaxPPOTrainer.fit``, run by
    ``slurm/train_max_ppo.sh``) tests that with one greedy (``do_sample=False``) completion per prompt of the batch,
    keeps the prompts with ``reward != 1.0`` (skipping a batch with none) and samples the n rollouts of the kept
    prompts only. We follow the code, not the digest's reconstruction (``0 < p̂ <= δ`` on estimated success rates)."""
    return np.asarray(greedy_reward) != 1.0


def choose_groups(keep_masks: Sequence[np.ndarray], batch_size: int) -> tuple[list[tuple[int, int]], int]:
    """The ``batch_size`` groups a refilled step trains on, from the keep masks [B] of its generation rounds.

    Kept groups in round order first; if fewer than ``batch_size`` were kept when the round bound was hit, the
    batch is completed with dropped groups of the latest rounds first, which the caller masks out of the loss
    (DAPO's verl raises here instead; we keep the batch shape static). Returns
    ([(round, group index)], number of kept groups used).
    """
    kept = [(r, int(g)) for r, mask in enumerate(keep_masks) for g in np.flatnonzero(mask)]
    chosen = kept[:batch_size]
    if len(chosen) < batch_size:
        dropped = [(r, int(g)) for r in reversed(range(len(keep_masks))) for g in np.flatnonzero(~keep_masks[r])]
        chosen += dropped[: batch_size - len(chosen)]
    if len(chosen) < batch_size:
        raise ValueError(f"choose_groups: {len(chosen)} groups in all rounds < batch_size={batch_size}")
    return chosen, min(len(kept), batch_size)


# --------------------------------------------------------------------------------------------- DOTS


def predicted_success(success: np.ndarray) -> np.ndarray:  # [P] -> [P]
    """DOTS adaptive difficulty p̂: the last measured success rate; unmeasured prompts get the mean of the measured
    ones (0.5 when none is measured)."""
    measured = success != UNMEASURED
    prior = float(success[measured].mean()) if measured.any() else 0.5
    return np.where(measured, success, prior).astype(np.float32)


def dots_scores(p_hat: np.ndarray, target: float = 0.5) -> np.ndarray:  # [P] -> [P]
    """DOTS selection score ``s_i = -|p̂_i - α|``."""
    return -np.abs(np.asarray(p_hat, np.float64) - target)


def softmax_sample_without_replacement(
    scores: np.ndarray, k: int, temperature: float, generator: np.random.Generator
) -> np.ndarray:  # [P] -> [k] int
    """``k`` distinct indices drawn without replacement from ``softmax(scores / temperature)`` (successive draws,
    each renormalised over the rest), by the Gumbel-top-k trick: ``top_k(scores / temperature + Gumbel)``.
    ``temperature = 0``: the top-k scores, ties broken by the Gumbel draw."""
    if not 0 < k <= len(scores):
        raise ValueError(f"cannot draw k={k} of {len(scores)} prompts without replacement")
    gumbel = generator.gumbel(size=len(scores))
    keys = np.asarray(scores, np.float64) / temperature + gumbel if temperature > 0 else np.asarray(scores) + 1e-9 * gumbel
    return np.argsort(-keys, kind="stable")[:k].astype(np.int32)


def record_success(state: SelectionState, prompt_ids: np.ndarray, success_rate: np.ndarray) -> SelectionState:
    """The state after measuring groups of ``prompt_ids`` [b] with success rates [b] (last measurement wins)."""
    success, visits = state.success.copy(), state.visits.copy()
    success[prompt_ids] = np.asarray(success_rate, np.float32)
    np.add.at(visits, prompt_ids, 1)
    return state.replace(success=success, visits=visits)


# --------------------------------------------------------------------------------------------- BOTS


def bots_update(
    state: SelectionState,
    prompt_ids: np.ndarray,  # [b] prompts rolled out this step
    pass_rate: np.ndarray,  # [b] their pass rates
    num_rollouts: int,  # m
    *,
    decay: float,  # λ
    implicit_weight: float,  # ρ
    prior_alpha: float = 1.0,
    prior_beta: float = 1.0,
    weak: np.ndarray | float = 0.0,  # [P] reference pass rates a_k (weak model)
    strong: np.ndarray | float = 1.0,  # [P] b_k (strong model)
    capability_momentum: float = 0.9,
) -> SelectionState:
    """BOTS posterior update for every prompt k of the pool after one step:

    ``α_k ← (1-λ)α_k + λα_0 + (1-ρ)s_k + ρ s̃_k``,  ``β_k ← (1-λ)β_k + λβ_0 + (1-ρ)f_k + ρ f̃_k``

    with explicit counts ``s_k = m·pass_k, f_k = m·(1-pass_k)`` for rolled-out k (0 otherwise) and implicit
    pseudo-counts ``s̃_k = m·p̃_k, f̃_k = m·(1-p̃_k)`` for all k, ``p̃_k`` = the observed pass rate for rolled-out
    k, else the interpolation ``clip(a_k + c·(b_k - a_k), 0, 1)``; capability ``ĉ = (mean pass - mean a) /
    (mean b - mean a + 1e-6)`` over the batch, ``c ← 0.9c + 0.1ĉ`` (updated before it is used).
    """
    pool = state.alpha.shape[0]
    weak = np.broadcast_to(np.asarray(weak, np.float64), (pool,))
    strong = np.broadcast_to(np.asarray(strong, np.float64), (pool,))
    pass_rate = np.asarray(pass_rate, np.float64)
    c_hat = (pass_rate.mean() - weak[prompt_ids].mean()) / (strong[prompt_ids].mean() - weak[prompt_ids].mean() + 1e-6)
    capability = capability_momentum * float(state.capability) + (1 - capability_momentum) * c_hat
    implicit = np.clip(weak + capability * (strong - weak), 0.0, 1.0)
    implicit[prompt_ids] = pass_rate
    explicit = np.zeros(pool)
    rolled = np.zeros(pool, bool)
    explicit[prompt_ids] = pass_rate
    rolled[prompt_ids] = True
    m = float(num_rollouts)
    s = np.where(rolled, m * explicit, 0.0)
    f = np.where(rolled, m * (1 - explicit), 0.0)
    alpha = (1 - decay) * state.alpha + decay * prior_alpha + (1 - implicit_weight) * s + implicit_weight * m * implicit
    beta = (1 - decay) * state.beta + decay * prior_beta + (1 - implicit_weight) * f + implicit_weight * m * (1 - implicit)
    return state.replace(
        alpha=alpha.astype(np.float32), beta=beta.astype(np.float32), capability=np.asarray(capability, np.float32)
    )


def bots_select(
    state: SelectionState, k: int, generator: np.random.Generator, *, target: float = 0.5, temperature: float = 0.0
) -> np.ndarray:  # [k] int
    """BOTS Thompson selection: ``p_k ~ Beta(α_k, β_k)``, score ``-|p_k - target|``, the top-k (temperature 0)
    or a softmax sample without replacement."""
    p = generator.beta(state.alpha.astype(np.float64), state.beta.astype(np.float64))
    return softmax_sample_without_replacement(-np.abs(p - target), k, temperature, generator)


# --------------------------------------------------------------------------------------------- InSight


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """h(p) = -p log p - (1-p) log(1-p) in nats (0 at p = 0 and 1)."""
    p = np.asarray(p, np.float64)
    return -(special.xlogy(p, p) + special.xlogy(1 - p, 1 - p))


def information_gain(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:  # [P], [P] -> [P] nats
    """Expected information about a prompt's success rate θ ~ Beta(α, β) from one more outcome Y ~ Bernoulli(θ)
    (BALD; InSight's unweighted score):

    ``I(Y; θ) = h(μ) - E[h(θ)]``, μ = α/(α+β), ``E[h(θ)] = ψ(α+β+1) - μ ψ(α+1) - (1-μ) ψ(β+1)`` (ψ digamma).

    ≥ 0; for a fixed μ it shrinks as the evidence α+β grows, for a fixed α+β it peaks at μ = 1/2.
    """
    a, b = np.asarray(alpha, np.float64), np.asarray(beta, np.float64)
    mean = a / (a + b)
    expected_entropy = special.digamma(a + b + 1) - mean * special.digamma(a + 1) - (1 - mean) * special.digamma(b + 1)
    return np.maximum(binary_entropy(mean) - expected_entropy, 0.0)


def insight_select(state: SelectionState, k: int, generator: np.random.Generator, *, temperature: float = 0.0
                   ) -> np.ndarray:  # [k] int
    """InSight: the k prompts of largest `information_gain` of their posterior (temperature 0; ties broken at
    random) or a softmax sample without replacement. Deterministic in the posterior mean, unlike BOTS's Thompson
    draw (the paper's choice, for stability)."""
    return softmax_sample_without_replacement(information_gain(state.alpha, state.beta), k, temperature, generator)
