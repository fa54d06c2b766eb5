"""Preference kernels (rl4llm.rl.preference): hand cases, gradients, a TRL transcription, pairs from groups.

The independent reference `_trl_dpo_loss` is written from the TRL source text, not from our module:
`DPOTrainer.dpo_loss`'s `sigmoid` / `robust` / `ipo` branches and the reward lines
(`chosen_rewards = self.beta * (chosen_logps - ref_chosen_logps).detach()`), the `concatenated_forward`
length normalisation for IPO (`average_log_prob=self.loss_type == "ipo"`, i.e.
`(per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)`), and `rewards/accuracies =
(chosen_rewards > rejected_rewards).float()`; defaults and ranges from `huggingface/trl`
`trl/trainer/dpo_config.py` (commit 0105ef3d: beta 0.1, label_smoothing in [0, 0.5]) and the logged-metric
definitions of `docs/source/dpo_trainer.md` (commit 01b788ce). The stored index's own copy of
`huggingface/trl` `trl/trainer/dpo_trainer.py` (commit 9d58faa) predates `loss_type`; the branch text above was
read in the verbatim copies of TRL's `dpo_loss` the code search returns (TRL ≥ 0.8 layout).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import preference
from tests.rl.rl_testing import compiled

pref = compiled(preference)
LOG2 = np.log(2.0)


def _softplus(x):
    return np.logaddexp(0.0, x)


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def _trl_dpo_loss(pc, pr, rc, rr, beta, loss_type, label_smoothing):
    """TRL `DPOTrainer.dpo_loss` (numpy, float64), branch by branch as in the TRL source."""
    logits = (pc - pr) - (rc - rr)
    if loss_type == "sigmoid":
        losses = (-_log_sigmoid(beta * logits) * (1 - label_smoothing)
                  - _log_sigmoid(-beta * logits) * label_smoothing)
    elif loss_type == "robust":
        losses = (-_log_sigmoid(beta * logits) * (1 - label_smoothing)
                  + _log_sigmoid(-beta * logits) * label_smoothing) / (1 - 2 * label_smoothing)
    elif loss_type == "ipo":
        losses = (logits - 1 / (2 * beta)) ** 2
    chosen_rewards = beta * (pc - rc)
    rejected_rewards = beta * (pr - rr)
    return losses, chosen_rewards, rejected_rewards


def _trl_batch_logps(per_token_logps, loss_mask, average_log_prob):
    """TRL `get_batch_logps`: sum of masked token log-probs, divided by the token count for IPO."""
    total = (per_token_logps * loss_mask).sum(-1)
    return total / loss_mask.sum(-1) if average_log_prob else total


def _pairs(*rows):
    return [jnp.asarray(r, jnp.float32) for r in zip(*rows)]


# Worked 2-pair case. Pair 1: h = (−1 − −3) − (−2 − −2) = 2; pair 2: h = (−4 − −2) − 0 = −2. β = 0.5 -> βh = ±1.
WORKED = _pairs((-1.0, -3.0, -2.0, -2.0), (-4.0, -2.0, -3.0, -3.0))


# ----------------------------------------------------------------------------------------------- sequence log-probs

def test_sequence_logprobs_sum_mean_and_empty_rows():
    logp = jnp.array([[-1.0, -2.0, -3.0], [-4.0, jnp.nan, jnp.inf], [-1.0, -1.0, -1.0]])
    mask = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(pref.sequence_logprobs(logp, mask), [-3.0, -4.0, 0.0])
    np.testing.assert_allclose(pref.sequence_logprobs(logp, mask, mean=True), [-1.5, -4.0, 0.0])
    g = jax.grad(lambda x: preference.sequence_logprobs(x, mask, mean=True).sum())(jnp.zeros((3, 3)))
    np.testing.assert_allclose(g, [[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])


def test_sequence_logprobs_match_trl_batch_logps():
    rng = np.random.default_rng(0)
    logp = -rng.uniform(0.1, 3.0, (5, 7))
    mask = (rng.uniform(size=(5, 7)) < 0.6).astype(np.float64)
    mask[:, 0] = 1.0
    for mean in (False, True):
        got = pref.sequence_logprobs(jnp.asarray(logp, jnp.float32), jnp.asarray(mask, jnp.float32), mean=mean)
        np.testing.assert_allclose(got, _trl_batch_logps(logp, mask, mean), rtol=1e-5)


# ----------------------------------------------------------------------------------------------- Bradley–Terry

def test_bradley_terry_hand_cases():
    # equal scores: −log σ(0) = log 2; r_c − r_r − m = 2 − 1 = 1 -> softplus(−1); −1 -> softplus(1)
    losses, m = pref.bradley_terry_loss(jnp.array([0.3, 2.0, 0.0]), jnp.array([0.3, 0.0, 1.0]))
    np.testing.assert_allclose(losses, [LOG2, _softplus(-2.0), _softplus(1.0)], rtol=1e-6)
    np.testing.assert_allclose(m["accuracy"], 1 / 3)  # the tie counts as wrong
    np.testing.assert_allclose(m["margin"], (0 + 2 - 1) / 3, rtol=1e-6)
    np.testing.assert_allclose(m["loss"], np.mean(losses), rtol=1e-6)
    losses, m = pref.bradley_terry_loss(jnp.array([2.0, 1.0]), jnp.array([0.0, 0.0]), margin=jnp.array([1.0, 1.0]))
    np.testing.assert_allclose(losses, [_softplus(-1.0), LOG2], rtol=1e-6)
    assert float(m["accuracy"]) == 1.0  # accuracy ignores the margin


def test_bradley_terry_gradient_is_minus_sigmoid_of_minus_z():
    rc, rr, margin = jnp.array([0.5, -1.0, 2.0]), jnp.array([0.0, 1.0, 2.5]), jnp.array([0.2, 0.0, -0.3])
    g_c, g_r = jax.grad(lambda a, b: preference.bradley_terry_loss(a, b, margin=margin)[0].sum(), (0, 1))(rc, rr)
    z = np.asarray(rc - rr - margin)
    np.testing.assert_allclose(g_c, -1 / (1 + np.exp(z)), rtol=1e-6)
    np.testing.assert_allclose(g_r, 1 / (1 + np.exp(z)), rtol=1e-6)


# ----------------------------------------------------------------------------------------------- DPO hand cases

@pytest.mark.parametrize("kind", ["sigmoid", "cdpo", "robust"])
def test_equal_log_ratios_give_log_2(kind):
    z = jnp.zeros(3)
    losses, m = pref.dpo_loss(z - 1.0, z - 2.0, z - 1.0, z - 2.0, kind=kind)
    np.testing.assert_allclose(losses, [LOG2] * 3, rtol=1e-6)
    assert float(m["rewards/accuracies"]) == 0.0 and float(m["rewards/margins"]) == 0.0


def test_worked_case_sigmoid():
    losses, m = pref.dpo_loss(*WORKED, beta=0.5)
    np.testing.assert_allclose(losses, [_softplus(-1.0), _softplus(1.0)], rtol=1e-6)
    assert abs(float(losses[1] - losses[0]) - 1.0) < 1e-6  # softplus(x) − softplus(−x) = x
    # rewards: pair 1 chosen 0.5·(−1 + 2) = 0.5, rejected 0.5·(−3 + 2) = −0.5; pair 2: −0.5, 0.5
    expected = {"rewards/chosen": 0.0, "rewards/rejected": 0.0, "rewards/margins": 0.0, "rewards/accuracies": 0.5,
                "logps/chosen": -2.5, "logps/rejected": -2.5, "valid_frac": 1.0,
                "loss": (_softplus(-1.0) + _softplus(1.0)) / 2}
    for k, v in expected.items():
        np.testing.assert_allclose(m[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


def test_worked_case_cdpo_and_robust():
    a, b = _softplus(-1.0), _softplus(1.0)  # −log σ(1), −log σ(−1)
    losses, _ = pref.dpo_loss(*WORKED, beta=0.5, kind="cdpo", label_smoothing=0.1)
    np.testing.assert_allclose(losses, [0.9 * a + 0.1 * b, 0.9 * b + 0.1 * a], rtol=1e-6)
    losses, _ = pref.dpo_loss(*WORKED, beta=0.5, kind="robust", label_smoothing=0.1)
    np.testing.assert_allclose(losses, [(0.9 * a - 0.1 * b) / 0.8, (0.9 * b - 0.1 * a) / 0.8], rtol=1e-6)


def test_worked_case_ipo_and_its_minimum():
    losses, _ = pref.dpo_loss(*WORKED, beta=0.5, kind="ipo")  # target 1/(2β) = 1: (2 − 1)², (−2 − 1)²
    np.testing.assert_allclose(losses, [1.0, 9.0], rtol=1e-6)
    beta = 0.1  # minimum at h = 1/(2β) = 5: loss 0 and zero gradient
    z = jnp.zeros(1)
    loss_at = lambda pc: preference.dpo_loss(pc, z, z, z, beta=beta, kind="ipo")[0].sum()
    assert float(loss_at(jnp.array([5.0]))) == 0.0
    assert float(jax.grad(loss_at)(jnp.array([5.0]))[0]) == 0.0
    assert float(loss_at(jnp.array([4.0]))) > 0 and float(loss_at(jnp.array([6.0]))) > 0


def test_label_smoothing_zero_equals_sigmoid_for_cdpo_and_robust():
    rng = np.random.default_rng(1)
    args = [jnp.asarray(rng.normal(size=6) - 3, jnp.float32) for _ in range(4)]
    base, base_m = pref.dpo_loss(*args, beta=0.3)
    for kind in ("cdpo", "robust"):
        got, m = pref.dpo_loss(*args, beta=0.3, kind=kind, label_smoothing=0.0)
        np.testing.assert_allclose(got, base, rtol=1e-6)
        assert m.keys() == base_m.keys()
    got, _ = pref.dpo_loss(*args, beta=0.3, kind="cdpo", label_smoothing=0.2)
    np.testing.assert_allclose(got, pref.dpo_loss(*args, beta=0.3, kind="sigmoid", label_smoothing=0.2)[0], rtol=1e-6)


def test_cdpo_minimum_and_robust_unbiasedness():
    beta, eps = 0.5, 0.1
    z = jnp.zeros(1)
    # cDPO is the BCE against label 1 − ε: stationary at βh = log((1 − ε)/ε)
    h_star = np.log((1 - eps) / eps) / beta
    g = jax.grad(lambda pc: preference.dpo_loss(pc, z, z, z, beta=beta, kind="cdpo", label_smoothing=eps)[0].sum())(
        jnp.array([h_star], jnp.float32))
    assert abs(float(g[0])) < 1e-6
    # robust DPO: (1 − ε)·L(h) + ε·L(−h) = −log σ(βh), the clean DPO loss
    h = jnp.array([-2.0, -0.3, 0.0, 1.5, 4.0])
    zh = jnp.zeros_like(h)
    lr = lambda x: pref.dpo_loss(x, zh, zh, zh, beta=beta, kind="robust", label_smoothing=eps)[0]
    np.testing.assert_allclose((1 - eps) * lr(h) + eps * lr(-h), pref.dpo_loss(h, zh, zh, zh, beta=beta)[0],
                               rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------- gradients

def test_dpo_gradients_match_the_hand_derived_formulas():
    rng = np.random.default_rng(2)
    args = [jnp.asarray(rng.normal(size=5) - 2, jnp.float32) for _ in range(4)]
    h = np.asarray((args[0] - args[1]) - (args[2] - args[3]), np.float64)
    beta, eps = 0.7, 0.15
    sig = lambda x: 1 / (1 + np.exp(-x))
    dl_dh = {
        "sigmoid": -beta * sig(-beta * h),  # d/dh −log σ(βh)
        "cdpo": -(1 - eps) * beta * sig(-beta * h) + eps * beta * sig(beta * h),
        "robust": (-(1 - eps) * beta * sig(-beta * h) - eps * beta * sig(beta * h)) / (1 - 2 * eps),
        "ipo": 2 * (h - 1 / (2 * beta)),
    }
    for kind, expected in dl_dh.items():
        ls = 0.0 if kind in ("sigmoid", "ipo") else eps
        grads = jax.grad(lambda *a: preference.dpo_loss(*a, beta=beta, kind=kind, label_smoothing=ls)[0].sum(),
                         argnums=(0, 1, 2, 3))(*args)
        for g, sign in zip(grads, (1, -1, -1, 1)):  # ∂h/∂(pc, pr, rc, rr) = (1, −1, −1, 1)
            np.testing.assert_allclose(g, sign * expected, rtol=1e-5, atol=1e-6, err_msg=kind)


# ----------------------------------------------------------------------------------------------- TRL reference

@pytest.mark.parametrize("kind,trl_type,ls", [("sigmoid", "sigmoid", 0.0), ("cdpo", "sigmoid", 0.2),
                                              ("sigmoid", "sigmoid", 0.3), ("robust", "robust", 0.2),
                                              ("ipo", "ipo", 0.0)])
def test_matches_trl_from_token_logprobs(kind, trl_type, ls):
    """Token log-probs -> TRL's sequence log-probs (averaged for IPO) -> TRL's dpo_loss and reward metrics."""
    rng = np.random.default_rng(3)
    p, t, beta = 6, 9, 0.2
    tok = {k: -rng.uniform(0.05, 2.5, (p, t)) for k in ("pc", "pr", "rc", "rr")}
    tok["pc"] = tok["rc"] + rng.normal(0, 0.4, (p, t))
    masks = {k: (np.arange(t)[None] < rng.integers(1, t + 1, p)[:, None]).astype(np.float64) for k in ("c", "r")}
    avg = trl_type == "ipo"
    seq_ref = {k: _trl_batch_logps(tok[k], masks[k[1]], avg) for k in tok}
    want, want_c, want_r = _trl_dpo_loss(seq_ref["pc"], seq_ref["pr"], seq_ref["rc"], seq_ref["rr"], beta, trl_type, ls)

    seq = {k: pref.sequence_logprobs(jnp.asarray(tok[k], jnp.float32), jnp.asarray(masks[k[1]], jnp.float32),
                                     mean=avg) for k in tok}
    got, m = pref.dpo_loss(seq["pc"], seq["pr"], seq["rc"], seq["rr"], beta=beta, kind=kind, label_smoothing=ls)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(m["loss"], want.mean(), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(m["rewards/chosen"], want_c.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["rewards/rejected"], want_r.mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["rewards/margins"], (want_c - want_r).mean(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m["rewards/accuracies"], (want_c > want_r).mean())


# ----------------------------------------------------------------------------------------------- masking, jit, edges

@pytest.mark.parametrize("kind", ["sigmoid", "robust", "ipo"])
def test_invalid_pairs_are_inert_even_with_nan(kind):
    ls = 0.1 if kind == "robust" else 0.0
    good = [jnp.array([-1.0, -4.0]), jnp.array([-3.0, -2.0]), jnp.array([-2.0, -3.0]), jnp.array([-2.0, -3.0])]
    bad = [jnp.concatenate([x, jnp.array([jnp.nan, -jnp.inf])]) for x in good]
    valid = jnp.array([True, True, False, False])
    ref_losses, ref_m = pref.dpo_loss(*good, beta=0.5, kind=kind, label_smoothing=ls)
    losses, m = pref.dpo_loss(*bad, beta=0.5, kind=kind, label_smoothing=ls, valid=valid)
    np.testing.assert_allclose(losses, np.concatenate([ref_losses, [0.0, 0.0]]), rtol=1e-6)
    for k in ref_m:
        if k != "valid_frac":
            np.testing.assert_allclose(m[k], ref_m[k], rtol=1e-6, atol=1e-7, err_msg=k)
    assert float(m["valid_frac"]) == 0.5
    grads = jax.grad(lambda *a: preference.dpo_loss(*a, beta=0.5, kind=kind, label_smoothing=ls,
                                                    valid=valid)[0].sum(), argnums=(0, 1, 2, 3))(*bad)
    for g in grads:
        assert np.all(np.isfinite(g)) and np.all(np.asarray(g)[2:] == 0)


def test_empty_and_all_invalid_batches_give_zeros_not_nan():
    empty = jnp.zeros((0,))
    for kind in ("sigmoid", "ipo"):
        losses, m = pref.dpo_loss(empty, empty, empty, empty, kind=kind)
        assert losses.shape == (0,) and all(float(v) == 0.0 for v in m.values())
    losses, m = pref.bradley_terry_loss(empty, empty)
    assert losses.shape == (0,) and all(float(v) == 0.0 for v in m.values())
    x, none = jnp.array([jnp.nan, 1.0]), jnp.array([False, False])
    losses, m = pref.dpo_loss(x, x, x, x, valid=none)
    assert np.all(np.asarray(losses) == 0) and all(float(v) == 0.0 for v in m.values())
    losses, m = pref.bradley_terry_loss(x, x, margin=x, valid=none)
    assert np.all(np.asarray(losses) == 0) and all(float(v) == 0.0 for v in m.values())
    g = jax.grad(lambda a: preference.dpo_loss(a, x, x, x, valid=none)[1]["loss"])(x)
    assert np.all(np.asarray(g) == 0)


def test_jit_equals_eager():
    rng = np.random.default_rng(4)
    args = [jnp.asarray(rng.normal(size=4) - 2, jnp.float32) for _ in range(4)]
    valid = jnp.array([True, False, True, True])
    for kind, ls in (("sigmoid", 0.0), ("cdpo", 0.1), ("robust", 0.1), ("ipo", 0.0)):
        eager = preference.dpo_loss(*args, beta=0.2, kind=kind, label_smoothing=ls, valid=valid)
        jitted = jax.jit(preference.dpo_loss, static_argnames=("beta", "kind", "label_smoothing"))(
            *args, beta=0.2, kind=kind, label_smoothing=ls, valid=valid)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), eager, jitted)
    eager = preference.bradley_terry_loss(args[0], args[1], margin=args[2])
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 eager, jax.jit(preference.bradley_terry_loss)(args[0], args[1], margin=args[2]))
    scores, gids = jnp.array([1.0, 0.0, 1.0, 3.0]), jnp.array([0, 0, 1, 1])
    eager = preference.pairs_from_groups(scores, gids, num_groups=3)
    jitted = jax.jit(preference.pairs_from_groups, static_argnames="num_groups")(scores, gids, num_groups=3)
    jax.tree.map(np.testing.assert_array_equal, eager, jitted)


def test_hyperparameter_errors():
    x = jnp.zeros(2)
    with pytest.raises(ValueError, match="beta=0"):
        preference.dpo_loss(x, x, x, x, beta=0)
    with pytest.raises(ValueError, match="kind='hinge'"):
        preference.dpo_loss(x, x, x, x, kind="hinge")
    with pytest.raises(ValueError, match="label_smoothing=0.6"):
        preference.dpo_loss(x, x, x, x, label_smoothing=0.6)
    with pytest.raises(ValueError, match="label_smoothing=0.5: must be < 0.5"):
        preference.dpo_loss(x, x, x, x, kind="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match="label_smoothing=0.1: must be 0 for kind='ipo'"):
        preference.dpo_loss(x, x, x, x, kind="ipo", label_smoothing=0.1)


# ----------------------------------------------------------------------------------------------- pairs from groups

def test_pairs_from_groups_hand_batch():
    # group 0 (rows 0, 2, 5, 7): scores 1, 0, 1, 0 -> chosen = first max = 0, rejected = first min = 2
    # group 1 (rows 1, 4): all equal -> invalid; group 2 (row 3): singleton -> invalid
    # group 3 (rows 6, 8): 0.9 at row 8 beats 0.2 at row 6; group 4: empty -> invalid
    scores = jnp.array([1.0, 0.5, 0.0, 7.0, 0.5, 1.0, 0.2, 0.0, 0.9])
    gids = jnp.array([0, 1, 0, 2, 1, 0, 3, 0, 3])
    chosen, rejected, valid = pref.pairs_from_groups(scores, gids, num_groups=5)
    np.testing.assert_array_equal(chosen, [0, 1, 3, 8, 0])
    np.testing.assert_array_equal(rejected, [2, 1, 3, 6, 0])
    np.testing.assert_array_equal(valid, [True, False, False, True, False])
    assert chosen.dtype == jnp.int32 and valid.dtype == jnp.bool_


def test_pairs_from_groups_edges():
    chosen, rejected, valid = pref.pairs_from_groups(jnp.array([jnp.nan, 1.0, 2.0, 2.0]), jnp.array([0, 0, 1, 1]),
                                                     num_groups=2)
    np.testing.assert_array_equal(valid, [False, False])  # NaN in a group: no preference; all-equal: none
    assert np.all((np.asarray(chosen) >= 0) & (np.asarray(chosen) < 4))
    chosen, rejected, valid = pref.pairs_from_groups(jnp.zeros((0,)), jnp.zeros((0,), jnp.int32), num_groups=3)
    np.testing.assert_array_equal(valid, [False] * 3)
    assert chosen.shape == rejected.shape == (3,)


def test_grpo_group_to_dpo_end_to_end():
    """Pairs from groups -> gather token log-probs -> sequence log-probs -> DPO with the pairs' validity."""
    rng = np.random.default_rng(5)
    n, t, g = 8, 6, 3
    scores = jnp.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    gids = jnp.array([0, 0, 0, 1, 1, 1, 2, 2])  # group 2 all correct: no pair
    logp = jnp.asarray(-rng.uniform(0.1, 2.0, (n, t)), jnp.float32)
    ref = logp + jnp.asarray(rng.normal(0, 0.1, (n, t)), jnp.float32)
    mask = jnp.asarray((np.arange(t)[None] < rng.integers(1, t + 1, n)[:, None]), jnp.float32)

    def loss_fn(lp):
        c, r, ok = preference.pairs_from_groups(scores, gids, num_groups=g)
        seq, seq_ref = preference.sequence_logprobs(lp, mask), preference.sequence_logprobs(ref, mask)
        return preference.dpo_loss(seq[c], seq[r], seq_ref[c], seq_ref[r], valid=ok)[1]["loss"]

    c, r, ok = pref.pairs_from_groups(scores, gids, num_groups=g)
    np.testing.assert_array_equal(c, [0, 3, 6])
    np.testing.assert_array_equal(r, [1, 4, 6])
    np.testing.assert_array_equal(ok, [True, True, False])
    loss, grad = jax.jit(jax.value_and_grad(loss_fn))(logp)
    assert np.isfinite(float(loss)) and np.all(np.isfinite(grad))
    rows_with_grad = np.flatnonzero(np.any(np.asarray(grad) != 0, axis=1))
    np.testing.assert_array_equal(rows_with_grad, [0, 1, 3, 4])  # the chosen / rejected rows of valid groups
    assert np.all(np.asarray(grad)[[0, 3]] <= 0) and np.all(np.asarray(grad)[[1, 4]] >= 0)
