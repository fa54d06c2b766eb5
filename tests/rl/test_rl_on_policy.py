"""On-policy gradients (old_logp == logp, ratio exactly 1) of every registered policy loss, against closed forms.

Every first update on a rollout batch is evaluated at ratio 1, where max/min/clip/|·| sit at their ties; the
expected values below are written out by hand (verl/torch tie conventions: torch.clamp passes the gradient up
to and including its bounds, torch.maximum / torch.min split a tie ½/½, torch.abs has gradient sign(0) = 0).

Batch: 3 rows of lengths 4, 2, 3 (Σm = 9), sequence advantages A = [1.5, −0.5, −2.0]. With w the aggregation
weight of a token: token-mean w = m/9, seq-mean-token-mean w = m/(3·n_i), seq-mean-token-sum w = m/3.
"""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm.rl import registry

from rl_testing import distinct_names

M = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], np.float32)
N_TOK = np.array([4.0, 2.0, 3.0], np.float32)
A = np.array([1.5, -0.5, -2.0], np.float32)
LOGP = np.log(np.array([[0.5, 0.25, 0.9, 0.6], [0.3, 0.7, 0.2, 0.1], [0.8, 0.4, 0.05, 0.3]], np.float32))
A_TOK = A[:, None] * M  # A_i on row i's valid tokens

W = {
    "token-mean": M / 9.0,
    "seq-mean-token-mean": M / (3.0 * N_TOK[:, None]),
    "seq-mean-token-sum": M / 3.0,
}

# Per-token extras, given explicitly (the selection/score functions are tested elsewhere).
PICK = np.zeros_like(M)
PICK[0, 1] = PICK[2, 0] = 1.0  # tokens clip_cov detaches / kl_cov penalises
LP_SELECT = np.zeros_like(M)
LP_SELECT[2, 0] = LP_SELECT[1, 1] = 1.0  # Lp-Reg tokens (A < 0 rows)
PROXY = LOGP + np.array([[0.0, 0.0, 0.0, 0.0], [0.0, 0.4, 0.0, 0.0], [0.7, 0.0, 0.0, 0.0]], np.float32)
H_SCORE = np.array([[-0.5, 0.3, 0.0, 1.0], [-1.0, 0.6, 0.0, 0.0], [0.2, -0.25, 1.0, 0.0]], np.float32)  # HAPO ĥ
STEER_W = np.array([[1.0, 0.8, 0.9, 1.0], [0.85, 1.0, 0.0, 0.0], [0.95, 1.0, 0.8, 0.0]], np.float32)
Z_TARGET = np.array([0.0, 2.0, -3.0], np.float32)  # GBPO z̃
TRACE = np.zeros_like(M)
TRACE[1] = 1.0  # LUFFY: row 1 is an off-policy trace
HINT = np.zeros_like(M)
HINT[0, :2] = HINT[1, 0] = 1.0  # ADHint: hint tokens in a row of A > 0 (kept) and of A < 0 (masked)

EXTRAS = {
    "clip_cov": dict(key=jax.random.PRNGKey(0), token_stats=PICK),
    "kl_cov": dict(token_stats=PICK, ppo_kl_coef=1.0),
    "lp_reg": dict(proxy_logp=PROXY, token_stats=LP_SELECT, beta=1.0),
    "hapo": dict(entropy=np.ones_like(M), token_stats=H_SCORE),
    "steer": dict(entropy=np.ones_like(M), token_stats=STEER_W),
    "gbpo": dict(target_advantages=Z_TARGET),
    "luffy": dict(off_policy_mask=TRACE),
    "rl_plus": dict(off_policy_mask=TRACE),
    "adhint": dict(off_policy_mask=HINT),
    # HeRL: row 1 a guided response whose behaviour log-probs are the policy's own (empty guidance): w = 1
    "herl": dict(off_policy_mask=TRACE, sampler_logp=LOGP),
}


def _gbpo_expected():
    # ρ* = 1 − 0.2 + 0.48·sigmoid(z̃) = [1.04, 1.2228, 0.8228]: L = |(ρ − ρ*)·A|, dL/dlogp = sign(1 − ρ*)·|A|·w
    target = 0.8 + 0.48 / (1.0 + np.exp(-Z_TARGET))
    return np.sign(1.0 - target)[:, None] * np.abs(A)[:, None] * W["token-mean"]


def _lp_reg_expected():
    # −A·w everywhere; selected tokens add β·dk3/dlogp = β·(1 − e^(proxy − logp)) (k3 = e^k − k − 1, k = proxy − logp)
    k3_grad = 1.0 - np.exp(PROXY - LOGP)
    return (-A_TOK + LP_SELECT * k3_grad) * W["token-mean"]


def _hapo_expected():
    # ρ = 1 lies inside the neutral zone: ĥ ≤ 0 -> A·(1 + β·ĥ) (β = 1), ĥ > 0 -> A
    scale = np.where(H_SCORE <= 0, 1.0 + H_SCORE, 1.0)
    return -A_TOK * scale * W["token-mean"]


def _luffy_expected():
    # trace tokens: d(−A·π/(π + γ))/dlogp = −A·γπ/(π + γ)² (γ = 0.1); the others −A as ppo_clip
    p = np.exp(LOGP)
    return -A_TOK * np.where(TRACE > 0, 0.1 * p / (p + 0.1) ** 2, 1.0) * W["token-mean"]


def _rl_plus_expected():
    # trace tokens at π_old = π: −A·(1 − π)^½·w, w = π/(¾π + ¼) (MIS with π_ω = (π + 1)/2); the others −A
    p = np.exp(LOGP)
    return -A_TOK * np.where(TRACE > 0, np.sqrt(1.0 - p) * p / (0.75 * p + 0.25), 1.0) * W["token-mean"]


def _adhint_expected():
    # hint tokens: d(−A·m·π)/dlogp = −A·m·π, m = 1[π ≥ 0.05]·1[A ≥ 0] (row 0: π = 0.5, 0.25; row 1: A < 0,
    # masked); the others −A as ppo_clip
    p = np.exp(LOGP)
    kept = (p >= 0.05) & (A_TOK >= 0)
    return -A_TOK * np.where(HINT > 0, kept * p, 1.0) * W["token-mean"]


def _herl_expected():
    # guided tokens at w = π_θ/π_b = 1: d(−A·w/(w + γ))/dlogp = −A·γw/(w + γ)² = −A/4 (γ = 1); the others −A
    return -A_TOK * np.where(TRACE > 0, 0.25, 1.0) * W["token-mean"]


EXPECTED = {  # on-policy dL/dlogp for each loss at its default aggregation
    "ppo_clip": lambda: -A_TOK * W["token-mean"],
    "cispo": lambda: -A_TOK * W["token-mean"],  # IS weight clip(1) = 1
    "gpg": lambda: -A_TOK * W["token-mean"],  # REINFORCE
    "gspo": lambda: -A_TOK * W["seq-mean-token-mean"],  # s_i = 1, ds/dlogp = s
    "sapo": lambda: -A_TOK * W["seq-mean-token-mean"],  # df/dρ = 4σ(0)(1 − σ(0)) = 1
    "geo_mean": lambda: -A_TOK * W["seq-mean-token-mean"],  # dρ_i/dlogp_t = ρ_i/n_i
    "kimi": lambda: -A_TOK * W["seq-mean-token-sum"],  # d(τ/2·Δ²) = τΔ = 0
    "clip_cov": lambda: -A_TOK * (1.0 - PICK) * W["token-mean"],  # picked tokens detached
    "kl_cov": lambda: -A_TOK * W["token-mean"],  # coef·|lr| has gradient sign(0) = 0
    "gbpo": _gbpo_expected,
    "lp_reg": _lp_reg_expected,
    "hapo": _hapo_expected,
    "steer": lambda: -A_TOK * STEER_W * W["token-mean"],
    "luffy": _luffy_expected,
    "rl_plus": _rl_plus_expected,
    "adhint": _adhint_expected,
    "herl": _herl_expected,
}


def _default_mode(name):
    default = inspect.signature(registry.POLICY_LOSSES[name]).parameters["agg_mode"].default
    return registry.agg_mode_for(name, default)


def _on_policy_grad(name, advantages=A, logp=LOGP, **kwargs):
    fn = registry.get_policy_loss(name)
    mode = _default_mode(name)
    extras = {**EXTRAS.get(name, {}), **kwargs}
    old = jnp.asarray(logp)  # the same values: ratio exactly 1

    @jax.jit
    def grad(lp):
        return jax.grad(lambda x: fn(x, old, jnp.asarray(advantages), jnp.asarray(M), agg_mode=mode, **extras)[0])(lp)

    return np.asarray(grad(jnp.asarray(logp)))


def test_expected_table_covers_every_registered_loss():
    assert set(EXPECTED) == set(distinct_names(registry.POLICY_LOSSES))


@pytest.mark.parametrize("name", distinct_names(registry.POLICY_LOSSES))
def test_on_policy_gradient_matches_closed_form(name):
    assert _default_mode(name) in W
    np.testing.assert_allclose(_on_policy_grad(name), EXPECTED[name](), rtol=2e-6, atol=1e-8)


@pytest.mark.parametrize("name", distinct_names(registry.POLICY_LOSSES))
def test_on_policy_gradient_is_zero_with_zero_advantages(name):
    """A ≡ 0 at ratio 1: no loss moves the policy (the selections are the losses' own, not forced)."""
    own_selection = {"token_stats": None} if "token_stats" in EXTRAS.get(name, {}) else {}
    np.testing.assert_array_equal(_on_policy_grad(name, advantages=np.zeros(3, np.float32), **own_selection), 0.0)


def test_lp_reg_penalty_moves_the_policy_with_zero_advantages():
    """The one legitimate exception: Lp-Reg's k3 pull toward the proxy acts on-policy on its selected tokens
    (gradient β·(1 − π_proxy/π)), whatever A. Its own selection needs A < 0, so it is forced here."""
    g = _on_policy_grad("lp_reg", advantages=np.zeros(3, np.float32))
    np.testing.assert_allclose(g, LP_SELECT * (1.0 - np.exp(PROXY - LOGP)) * W["token-mean"], rtol=2e-6, atol=1e-8)
    assert np.count_nonzero(g) == 2


# ------------------------------------------------------------------------------------------ tie cases


@pytest.mark.parametrize("name", ["ppo_clip", "clip_cov", "steer", "lp_reg", "gspo", "geo_mean", "cispo", "luffy",
                                  "rl_plus"])
@pytest.mark.parametrize("low, high", [(0.0, 0.2), (0.2, 0.0), (0.0, 0.0)])
def test_zero_clip_side_keeps_the_on_policy_gradient(name, low, high):
    """ρ = 1 sits ON a bound when a clip range is 0: torch.clamp passes the whole gradient there (jnp.clip
    passes ½, ¼ when both are 0, which gave 0.625–0.75 of the gradient before `clip_torch_grad`)."""
    np.testing.assert_allclose(_on_policy_grad(name, clip_low=low, clip_high=high), EXPECTED[name](),
                               rtol=2e-6, atol=1e-8)


def test_ratio_exactly_on_the_clip_bound_passes_the_gradient():
    # ρ = 1 + clip_high exactly (A > 0) and ρ = 1 − clip_low exactly (A < 0): L1 == L2, both carry −A·ρ
    # (torch.clamp is inclusive), so dL/dlogp = −A·ρ·w (jnp.clip's ½ gave ¾ of it); beyond the bound it is 0.
    fn = registry.get_policy_loss("ppo_clip")
    lp = jnp.array([[0.1], [-0.15]])
    ratio = np.asarray(jnp.exp(lp))  # the kernel's own float32 ratios; the bounds are set to hit them exactly
    kw = dict(clip_high=float(ratio[0, 0]) - 1.0, clip_low=1.0 - float(ratio[1, 0]), dual_clip=None)
    a, m = jnp.array([2.0, -3.0]), jnp.ones((2, 1))
    _, metrics = fn(lp, jnp.zeros_like(lp), a, m, **kw)
    assert metrics["ratio_max"] == np.float32(1.0 + kw["clip_high"])
    assert metrics["ratio_min"] == np.float32(1.0 - kw["clip_low"])
    assert metrics["clip_frac"] == metrics["clip_frac_high"] == metrics["clip_frac_low"] == 0.0  # on it is not beyond it
    g = jax.grad(lambda x: fn(x, jnp.zeros_like(x), a, m, **kw)[0])(lp)
    np.testing.assert_allclose(g, [[-2.0 * ratio[0, 0] / 2], [3.0 * ratio[1, 0] / 2]], rtol=1e-6)


def test_dual_clip_tie_halves_the_gradient():
    # A < 0, ρ = c exactly: Lc = −A·ρ == −A·c, torch.min splits ½/½ and −A·c carries none: dL/dlogp = ½·(−A·ρ)
    fn = registry.get_policy_loss("ppo_clip")
    lp = jnp.array([[1.1]])
    c = float(jnp.exp(lp)[0, 0])
    g = jax.grad(lambda x: fn(x, jnp.zeros_like(x), jnp.array([-2.0]), jnp.ones((1, 1)), dual_clip=c)[0])(lp)
    np.testing.assert_allclose(g, [[0.5 * 2.0 * c]], rtol=1e-6)
    _, m = fn(lp, jnp.zeros_like(lp), jnp.array([-2.0]), jnp.ones((1, 1)), dual_clip=c)
    assert m["dual_clip_frac"] == 0.0  # strict >, as verl's pg_clipfrac_lower


def test_gbpo_ratio_at_its_target_has_no_gradient():
    # clip_low = clip_high and z̃ = 0: ρ* = 1 = ρ; |x| at 0 has torch's gradient 0
    g = _on_policy_grad("gbpo", clip_low=0.25, clip_high=0.25, target_advantages=np.zeros(3, np.float32))
    np.testing.assert_array_equal(g, 0.0)


def test_gmpo_sign_zero_advantage_tokens_drop_out_of_the_ratio():
    # token-level A with zeros: sgn(0) = 0 (torch.sign too), so those tokens add 0 to log ρ_i and get no
    # gradient; row i's others get −Â_i·ρ_i/n_i/3 with Â_i = mean_t A (ρ_i = 1 on-policy)
    a_tok = np.array([[1.0, 0.0, 2.0, 1.0], [0.0, -1.0, 0.0, 0.0], [-1.0, -1.0, 0.0, 0.0]], np.float32)
    g = _on_policy_grad("geo_mean", advantages=a_tok)
    seq_adv = (a_tok * M).sum(-1) / N_TOK
    expected = -seq_adv[:, None] * (a_tok != 0) * M / (3.0 * N_TOK[:, None])
    np.testing.assert_allclose(g, expected, rtol=2e-6, atol=1e-8)


def test_default_recipe_is_unchanged_on_policy_and_off():
    """ppo_clip 0.2/0.2, dual clip 3, token-mean: on-policy −A·m/Σm; off-policy the hand case of
    test_rl_losses (every token strictly inside or outside its clip range) is covered there."""
    np.testing.assert_array_equal(_on_policy_grad("ppo_clip"), _on_policy_grad("vanilla"))
    np.testing.assert_allclose(_on_policy_grad("ppo_clip"), -A_TOK * M / M.sum(), rtol=2e-6, atol=1e-8)
