"""BroRL's claim on this library's kernels: one GRPO / PPO-clip policy-gradient step on a toy softmax policy raises the
probability mass of the correct tokens with probability -> 1 as the rollouts per prompt N grow. With small N most
steps leave it unchanged: no correct token was sampled, the group's rewards are all equal and GRPO's advantages 0.
The paper's other small-N effect, steps that LOWER the mass (its unsampled-token term), did not appear: with GRPO's
zero-sum advantages and the exact softmax gradient, a sampled correct token's gain outweighs what the unsampled
correct ones lose (first order: pi_a * delta * (1 - Q_pos) > 0), and no step here lowered it. And the recipe keeps the
default's rollout budget."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from configs import brorl
from configs import default
from rl4llm import config as config_lib
from rl4llm.rl import registry

# 16 tokens; tokens 0-2 are correct: one at moderate probability, two rare ones
LOGITS = jnp.array([1.0, -2.0, -2.5] + [0.5] * 13, jnp.float32)
CORRECT = jnp.arange(16) < 3
SEEDS = 256


def correct_mass(logits):
    return jnp.sum(jax.nn.softmax(logits) * CORRECT)


@functools.partial(jax.jit, static_argnames="n")
def mass_change(key, *, n: int):
    """Q_pos after one SGD step (lr 1) on the GRPO advantages and PPO-clip loss of n sampled tokens, minus before."""
    tokens = jax.random.categorical(key, LOGITS, shape=(n,))
    scores = CORRECT[tokens].astype(jnp.float32)
    mask = jnp.ones((n, 1), jnp.float32)
    adv = registry.get_advantage("grpo")(scores, jnp.zeros(n, jnp.int32), mask, num_groups=1)

    def loss(logits):
        logp = jax.nn.log_softmax(logits)[tokens][:, None]
        value, _ = registry.get_policy_loss("ppo_clip")(logp, jax.lax.stop_gradient(logp), adv[:, None] * mask, mask,
                                                         agg_mode="token-mean")
        return value

    return correct_mass(LOGITS - jax.grad(loss)(LOGITS)) - correct_mass(LOGITS)


def fraction_raised(n: int) -> tuple[float, np.ndarray]:
    changes = np.asarray(jax.vmap(functools.partial(mass_change, n=n))(jax.random.split(jax.random.key(0), SEEDS)))
    return float(np.mean(changes > 0)), changes


def test_broad_groups_raise_the_correct_mass_almost_surely():
    q = float(correct_mass(LOGITS))  # 0.12
    for n in (4, 16):
        # a step raises Q_pos iff its group holds a correct token: P = 1 - (1 - Q_pos)^n (0.40 for 4, 0.87 for 16)
        raised, changes = fraction_raised(n)
        expected = 1 - (1 - q) ** n
        assert abs(raised - expected) < 4 * np.sqrt(expected * (1 - expected) / SEEDS), (n, raised, expected)
        assert np.all(changes > -1e-7), n  # none lowered it (up to float rounding)
    broad, broad_changes = fraction_raised(512)
    assert broad == 1.0 and np.all(np.isfinite(broad_changes))


def test_recipe_keeps_the_default_rollout_budget_in_broader_groups():
    base, recipe = default.get_config(), brorl.get_config()
    config_lib.parse(recipe)
    assert recipe.rl.num_generations == 8 * base.rl.num_generations
    budget = lambda c: c.rl.steps * c.rl.num_prompts * c.rl.num_generations  # noqa: E731
    assert 0.9 * budget(base) <= budget(recipe) <= budget(base)
    assert recipe.sampling.rows_per_call == base.rl.num_prompts * base.rl.num_generations
