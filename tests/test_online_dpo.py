"""Online DPO as the learner's objective (`config.preference.loss="dpo"`, `rl4llm.train.preference_step`).

The learner's loss and metrics on a hand-built batch against DPO written out in numpy on hand-picked pairs; the
micro-batched gradient against the whole-batch one and a direct `jax.grad` of the pair loss; the start of a run
(policy = reference: loss log 2, the hand-derived gradient); the config errors; and a real 2-step nano run.
"""

import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm import models
from rl4llm.rl import preference
from rl4llm.train import job
from rl4llm.train import learner as learner_lib
from rl4llm.train import logprobs as logprobs_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import preference_step
from tests.test_train import tiny_config

MODEL_CFG = models.get_config("nano", vocab_size=16)
N, P, T = 8, 3, 5
# 4 groups of 2, listed out of order (groups need not be contiguous): group 0 = rows 0, 5 (row 0 wins); group 1 =
# rows 1, 2 (row 2 wins); group 2 = rows 3, 4 (a tie: no pair); group 3 = rows 6, 7 (row 7 wins, 2 > 0.5).
GROUP_IDS = jnp.array([0, 1, 1, 2, 2, 0, 3, 3])
SCORES = jnp.array([1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5, 2.0])
PAIRS = [(0, 5), (2, 1), (7, 6)]  # (chosen, rejected), by hand from the scores above
LENGTHS = jnp.array([5, 2, 4, 3, 5, 1, 2, 4])


def _learner_cfg(micro_batch_size=0, **preference_fields):
    settings = dict(loss="dpo", kind="sigmoid", beta=0.1, label_smoothing=0.0, num_groups=4)
    return learner_lib.LearnerConfig(
        loss="ppo_clip", loss_kwargs=(), agg_mode="token-mean", kl_coef=0.0, kl_kind="k3", entropy_coef=0.0,
        temperature=1.0, micro_batch_size=micro_batch_size, logprob_chunk_size=4, use_old_logp=False,
        preference=preference_step.PreferenceSettings(**{**settings, **preference_fields}),
    )


def _batch():
    tokens = jax.random.randint(jax.random.key(1), (N, P + T), 4, 16)
    mask = (jnp.arange(T)[None] < LENGTHS[:, None]).astype(jnp.float32)
    attention = jnp.concatenate([jnp.ones((N, P), jnp.int32), mask.astype(jnp.int32)], 1)
    zeros = jnp.zeros((N, T))
    return learner_lib.LearnerBatch(tokens=tokens, attention_mask=attention, completion_mask=mask, advantages=zeros,
                                    old_logp=zeros, sampler_logp=zeros, scores=SCORES, group_ids=GROUP_IDS)


@pytest.fixture(scope="module")
def params():
    return models.init_params(MODEL_CFG, jax.random.key(0))


def _state(params, ref_params, optimizer):
    return learner_lib.TrainState(params=params, opt_state=optimizer.init(params), ref_params=ref_params,
                                  key=jax.random.key_data(jax.random.key(0)))


def _sequence_logprobs(params, batch, mean=False):
    """Σ_t m·log π (or the mean) of each row, from a plain whole-batch forward pass."""
    logp, _ = logprobs_lib.completion_logprobs(MODEL_CFG, params, batch.tokens, batch.attention_mask,
                                               completion_len=T, temperature=1.0, chunk_size=4)
    total = jnp.sum(logp * batch.completion_mask, axis=-1)
    return total / jnp.sum(batch.completion_mask, axis=-1) if mean else total


def _policy_gradients(cfg, state, batch):
    return jax.jit(lambda s, b: learner_lib.policy_gradients(MODEL_CFG, cfg, s, b, jax.random.key(3)))(state, batch)


def test_learner_dpo_loss_and_metrics_equal_dpo_on_hand_computed_sequence_logprobs(params):
    ref_params = jax.tree.map(lambda x: 0.9 * x, params)
    batch, beta = _batch(), 0.1
    optimizer = optax.sgd(0.0)
    _, metrics = jax.jit(lambda s, b: learner_lib.learner_step(MODEL_CFG, _learner_cfg(), optimizer, s, b,
                                                               jax.random.key(3)))(
        _state(params, ref_params, optimizer), batch)
    s, q = np.asarray(_sequence_logprobs(params, batch)), np.asarray(_sequence_logprobs(ref_params, batch))
    chosen, rejected = np.array(PAIRS).T
    h = (s[chosen] - s[rejected]) - (q[chosen] - q[rejected])
    expected_loss = np.mean(np.log1p(np.exp(-beta * h)))  # −log σ(βh), numpy
    reward_c, reward_r = beta * (s[chosen] - q[chosen]), beta * (s[rejected] - q[rejected])
    np.testing.assert_allclose(metrics["dpo/loss"], expected_loss, rtol=1e-5)
    np.testing.assert_allclose(metrics["loss/pg"], expected_loss, rtol=1e-5)  # the surrogate's value is the loss
    np.testing.assert_allclose(metrics["dpo/rewards/chosen"], reward_c.mean(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(metrics["dpo/rewards/rejected"], reward_r.mean(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(metrics["dpo/rewards/margins"], (reward_c - reward_r).mean(), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(metrics["dpo/rewards/accuracies"], np.mean(reward_c > reward_r))
    np.testing.assert_allclose(metrics["dpo/logps/chosen"], s[chosen].mean(), rtol=1e-5)
    np.testing.assert_allclose(metrics["dpo/valid_pair_frac"], 3 / 4)  # the tied group gives no pair


@pytest.mark.parametrize("kind, label_smoothing", [("sigmoid", 0.0), ("robust", 0.2), ("ipo", 0.0)])
def test_micro_batched_gradient_equals_whole_batch_and_direct_gradient(params, kind, label_smoothing):
    """Micro-batches of 1, 2 and 4 rows (the pair (7, 6) and with 1 row every pair straddles micro-batches) give
    the whole batch's gradient, which is `jax.grad` of the pair loss written directly on the whole batch."""
    ref_params = jax.tree.map(lambda x: 0.9 * x, params)
    batch, beta = _batch(), 0.1
    state = _state(params, ref_params, optax.sgd(0.0))
    settings = dict(kind=kind, label_smoothing=label_smoothing)
    whole = _policy_gradients(_learner_cfg(0, **settings), state, batch)
    ipo = kind == "ipo"
    q = _sequence_logprobs(ref_params, batch, mean=ipo)
    chosen, rejected = np.array(PAIRS).T

    def direct_loss(p):
        s = _sequence_logprobs(p, batch, mean=ipo)
        losses, _ = preference.dpo_loss(s[chosen], s[rejected], q[chosen], q[rejected], beta=beta, kind=kind,
                                        label_smoothing=label_smoothing)
        return jnp.mean(losses)

    direct_value, direct_grads = jax.value_and_grad(direct_loss)(params)
    np.testing.assert_allclose(whole.sums["pg_loss"], direct_value, rtol=1e-5)
    # atol: float32 rounding of gradients whose largest entries are ~1 (a 4e-4 entry may differ by 1.6e-7)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), whole.grads, direct_grads)
    for micro in (1, 2, 4):
        part = _policy_gradients(_learner_cfg(micro, **settings), state, batch)
        np.testing.assert_allclose(part.sums["pg_loss"], whole.sums["pg_loss"], rtol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), part.grads, whole.grads)
        assert part.pair_metrics.keys() == whole.pair_metrics.keys()


@pytest.mark.parametrize("kind, label_smoothing", [("sigmoid", 0.0), ("cdpo", 0.1)])
def test_at_the_start_the_loss_is_log_2_and_the_gradient_is_the_hand_derived_one(params, kind, label_smoothing):
    """Policy = reference: h = 0 for every pair, so L = log 2 (cDPO: (1−ε)·log 2 + ε·log 2), every implicit reward
    is 0 (accuracy 0: strict), and dL/dh = −β(1 − 2ε)·σ(0) gives ∇L = −β(1 − 2ε)/2 · mean_pairs ∇(s_c − s_r)."""
    batch, beta, eps = _batch(), 0.1, label_smoothing
    pg = _policy_gradients(_learner_cfg(2, kind=kind, label_smoothing=eps), _state(params, params, optax.sgd(0.0)),
                           batch)
    np.testing.assert_allclose(pg.pair_metrics["dpo/loss"], math.log(2), rtol=1e-6)
    np.testing.assert_allclose(pg.sums["pg_loss"], math.log(2), rtol=1e-6)
    for key in ("dpo/rewards/chosen", "dpo/rewards/rejected", "dpo/rewards/margins", "dpo/rewards/accuracies"):
        assert float(pg.pair_metrics[key]) == 0.0, key
    chosen, rejected = np.array(PAIRS).T

    def hand_loss(p):  # linear in the sequence log-probs: its gradient is the hand-derived one
        s = _sequence_logprobs(p, batch)
        return -beta * (1 - 2 * eps) / 2 * jnp.mean(s[chosen] - s[rejected])

    hand = jax.grad(hand_loss)(params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-8), pg.grads, hand)


def test_masked_rows_and_groups_without_a_pair_give_no_pair(params):
    """A row without a trained token (a group the prompt selection dropped) is in no pair; with every group tied
    there is no pair, the loss is 0 and so is the gradient."""
    batch = _batch()
    state = _state(params, jax.tree.map(lambda x: 0.9 * x, params), optax.sgd(0.0))
    dropped = batch.replace(completion_mask=batch.completion_mask.at[7].set(0.0))  # group 3 loses its winner
    pg = _policy_gradients(_learner_cfg(), state, dropped)
    np.testing.assert_allclose(pg.pair_metrics["dpo/valid_pair_frac"], 2 / 4)
    tied = _policy_gradients(_learner_cfg(), state, batch.replace(scores=jnp.ones(N)))
    assert float(tied.pair_metrics["dpo/valid_pair_frac"]) == 0.0 and float(tied.sums["pg_loss"]) == 0.0
    assert float(optax.tree.norm(tied.grads)) == 0.0


def _dpo_config(**overrides):
    config = default.get_config()
    config.preference.loss = "dpo"
    config.update_from_flattened_dict(overrides)
    return config


@pytest.mark.parametrize("overrides, field", [
    ({"rl.num_generations": 1}, "config.rl.num_generations=1"),
    ({"rl.num_minibatches": 2}, "config.rl.num_minibatches=2"),
    ({"rl.off_policy_traces": 2, "rl.loss": "luffy"}, "config.rl.off_policy_traces=2"),
    ({"rl.tis_cap": 2.0}, "config.rl.tis_cap=2.0"),
    ({"rl.token_selection": "high_entropy"}, "config.rl.token_selection='high_entropy'"),
    ({"rl.kl_in_reward": True, "rl.kl_coef": 0.01}, "config.rl.kl_in_reward=True"),
    ({"rl.advantage": "gae"}, "config.rl.advantage='gae'"),
    ({"agent.env": "guess_number"}, "config.agent.env='guess_number'"),
    ({"preference.kind": "ipo", "preference.label_smoothing": 0.1}, "config.preference.label_smoothing=0.1"),
    ({"preference.kind": "robust", "preference.label_smoothing": 0.5}, "config.preference.label_smoothing=0.5"),
])
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(config_lib.ConfigError, match=field.replace("(", r"\(").replace(".", r"\.")):
        config_lib.parse(_dpo_config(**overrides))


def test_valid_dpo_configs_parse():
    parsed = config_lib.parse(_dpo_config(**{"rl.ref_reset_every": 4}))  # iterative DPO needs no KL term
    assert parsed.preference.loss == "dpo" and parsed.rl.kl_coef == 0.0
    config_lib.parse(_dpo_config(**{"preference.kind": "cdpo", "preference.label_smoothing": 0.1,
                                    "rl.micro_batch_size": 16, "rl.ppo_epochs": 2}))
    without = default.get_config()
    without.rl.ref_reset_every = 4
    with pytest.raises(config_lib.ConfigError, match=r"config\.rl\.ref_reset_every=4"):  # still needs KL without DPO
        config_lib.parse(without)


def _parity_reward(completion: str, answer: str) -> float:
    """All-correct groups for even answers, about half right (by completion length) for odd ones: the nano policy
    solves nothing yet, so the arithmetic reward would tie every group."""
    return 1.0 if int(answer) % 2 == 0 else float(len(completion) % 2 == 0)


@pytest.fixture(scope="module")
def sft_workdir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("sft"))
    config = tiny_config()
    config.rl.steps = 0
    job.run(config, workdir)
    return workdir


@pytest.mark.parametrize("ref_reset_every", [0, 1])
def test_two_step_nano_run(sft_workdir, tmp_path, monkeypatch, ref_reset_every):
    """Two RL steps of the main job with online DPO: pairs form, the DPO metrics are logged, the first update
    starts at policy = reference (loss log 2); the second is away from it unless the reference was reset to the
    policy after step 1 (iterative DPO)."""
    from rl4llm import rewards

    monkeypatch.setitem(rewards.REWARDS, "parity", _parity_reward)
    # 8 prompts: the tiny config's 4 prompts of step 2 all have even answers (all-correct groups, no pair)
    config = tiny_config(steps=2, num_prompts=8, learning_rate=1e-2, warmup_steps=0, ref_reset_every=ref_reset_every)
    config.task.reward = "parity"
    config.preference.loss = "dpo"
    config_lib.parse(config)
    workdir = str(tmp_path / "dpo")
    shutil.copytree(sft_workdir, workdir)
    job.run(config, workdir)
    records = {r["step"]: r for r in metrics_lib.read_metrics(workdir, "rl")}
    assert sorted(records) == [1, 2]
    for record in records.values():
        for key in ("dpo/loss", "dpo/rewards/chosen", "dpo/rewards/rejected", "dpo/rewards/margins",
                    "dpo/rewards/accuracies", "dpo/valid_pair_frac", "loss/pg", "grad_norm"):
            assert key in record and math.isfinite(record[key]), key
        assert record["dpo/valid_pair_frac"] > 0 and record["grad_norm"] > 0
    assert records[1]["dpo/loss"] == pytest.approx(math.log(2), rel=1e-6)
    if ref_reset_every:
        assert records[2]["ref_reset"] == 1.0 and records[2]["dpo/loss"] == pytest.approx(math.log(2), rel=1e-6)
    else:
        assert abs(records[2]["dpo/loss"] - math.log(2)) > 1e-4
