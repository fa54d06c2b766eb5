"""SEELE (Li et al. 2025, "Staying in the Sweet Spot: Responsive Reasoning Evolution via Capability-Adaptive Hint
Scaffolding")."""

from configs import default


def get_config():
    """SEELE: each problem's G rollouts are drawn in rounds, and every round after the first appends to the prompt
    the prefix of the reference solution (hint rate h = the fraction of its characters) at which the problem's
    fitted item response curve a(h) = c + (1 − c)·σ(k·(h − b)) predicts accuracy 0.5, the rate where a(1 − a),
    SEELE's bound on the loss descent, is largest (`rl4llm.train.hints.round_groups`;
    `rl4llm.data.curriculum.irt_rate`, `irt_difficulty`, `irt_hint`). The group holds every round's rollouts; the
    hint is part of the prompt, so the loss trains only the policy's own tokens (SEELE: "loss only on self-generated
    tokens"), and the hint never reaches the final answer.

    What the paper specifies (digest §8.2) and this follows: hints appended after the problem, multi-round sampling,
    a 3PL IRT fit to the accuracy-hint pairs of the earlier rounds, target accuracy 0.5, GRPO on the collected
    rollouts. Reconstructed here (the paper's solver and round sizes are not in our sources): 4 rounds of 4 rollouts
    (G = 16), the first without a hint; the discrimination k = 10 and floor c = 0 fixed and only the difficulty b
    fitted per problem by maximum likelihood (a three-parameter fit is not identified by a few rounds). Around it:
    GRPO advantages, token-mean, no KL, the main job's lr.
    Logged: selection/hint_rate (mean fitted hint of rounds 2..4), selection/hinted_frac, selection/unhinted_accuracy
    (round 1), selection/hinted_accuracy (rounds 2..4: what the fit aims at 0.5).

    Run:
        python -m experiments.train --config=configs/seele.py --workdir=/tmp/rl4llm/seele
    Result (notebooks/05_guidance.ipynb, 6-7-operand chains, 3 seeds): held-out pass@16 0.207 -> 0.210 ± 0.020 after
    40 steps (GRPO 0.228 ± 0.006); the fitted hints (rate 0.84) reach accuracy 0.17, not 0.5: this model fails to
    finish even a nearly written long chain, so the curve's premise a(h) -> 1 fails.
    """
    c = default.get_config()
    c.rl.advantage = "grpo"
    c.rl.agg_mode = "token-mean"
    c.rl.kl_coef = 0.0
    c.selection.hints = True
    c.selection.hint_schedule = "irt"
    c.selection.hint_rounds = 4
    c.selection.target = 0.5
    c.selection.irt_discrimination = 10.0
    c.selection.irt_guess = 0.0
    return c
