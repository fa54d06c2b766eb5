"""The multi-turn pair losses DMPO and SDPO (`config.preference.loss=dmpo | sdpo`, agent runs): SDPO's kernels
(segments, first divergent turn, loss and its gradient) and DMPO at γ → 0 against hand-computed values; the
episodes' returns and pairs from hand-built groups; the learner's pair objective on hand-picked pairs and its
micro-batched gradient; config errors; and 2-step agent runs of configs/agent_dmpo.py and configs/agent_sdpo.py on
the nano model where pairs form and the first update moves the params.
"""

import importlib
import math
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm.rl import preference
from rl4llm.train import agent
from rl4llm.train import checkpointing
from rl4llm.train import episodes
from rl4llm.train import job
from rl4llm.train import learner as learner_lib
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import preference_step
from tests.test_multi_turn import agent_config

LOG2 = math.log(2.0)
NONE = jnp.iinfo(jnp.int32).max  # first_divergent_turn's "no turn"


def _softplus(x):
    return float(np.log1p(np.exp(x)))


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


# ------------------------------------------------------------------------------------------------ SDPO's kernels

# One pair, 8 positions. Chosen: turn 0 (positions 0-1), an observation, turn 1 (3-4), an observation, turn 2 (6-7).
# Rejected: the same up to position 3, then a shorter turn 1 (3), an observation (4-5), turn 2 (6), padding (7).
TURN_C = jnp.array([[0, 0, -1, 1, 1, -1, 2, 2]])
TURN_R = jnp.array([[0, 0, -1, 1, -1, -1, 2, -1]])


def test_first_divergent_turn_by_hand():
    base = jnp.array([[5, 6, 9, 7, 8, 9, 4, 4]])
    # tokens part inside turn 1's action (position 4: chosen's action token, rejected's observation) -> e = 1
    assert int(preference.first_divergent_turn(base, base.at[0, 4].set(3), TURN_C, TURN_R)[0]) == 1
    # they part at turn 0's second token -> e = 0
    assert int(preference.first_divergent_turn(base, base.at[0, 1].set(3), TURN_C, TURN_C)[0]) == 0
    # they part in the observation after turn 0 (a stochastic env) -> the next action's turn, 1
    assert int(preference.first_divergent_turn(base, base.at[0, 2].set(3), TURN_C, TURN_C)[0]) == 1
    # identical episodes, or parting after both last actions: no turn
    assert int(preference.first_divergent_turn(base, base, TURN_C, TURN_R)[0]) == NONE
    turn_short = jnp.array([[0, 0, -1, 1, 1, -1, -1, -1]])
    assert int(preference.first_divergent_turn(base, base.at[0, 6].set(3), turn_short, turn_short)[0]) == NONE


def test_sdpo_segments_are_equal_length_and_truncated_to_the_turns_both_have():
    first = jnp.array([1])
    seg_c, seg_r, k = preference.sdpo_segments(TURN_C, TURN_R, first, segment_turns=1)
    np.testing.assert_array_equal(seg_c, [[0, 0, 0, 1, 1, 0, 0, 0]])
    np.testing.assert_array_equal(seg_r, [[0, 0, 0, 1, 0, 0, 0, 0]])
    assert int(k[0]) == 1
    # k = 5 from turn 1: both episodes have 3 turns, so turns 1 and 2 (k' = 2)
    seg_c, seg_r, k = preference.sdpo_segments(TURN_C, TURN_R, first, segment_turns=5)
    np.testing.assert_array_equal(seg_c, [[0, 0, 0, 1, 1, 0, 1, 1]])
    np.testing.assert_array_equal(seg_r, [[0, 0, 0, 1, 0, 0, 1, 0]])
    assert int(k[0]) == 2
    # e past the turns both have (or "no turn"): k' = 0, empty segments
    for e in (3, NONE):
        seg_c, seg_r, k = preference.sdpo_segments(TURN_C, TURN_R, jnp.array([e]), segment_turns=2)
        assert int(k[0]) == 0 and float(seg_c.sum()) == 0.0 and float(seg_r.sum()) == 0.0
    with pytest.raises(ValueError, match="segment_turns=0"):
        preference.sdpo_segments(TURN_C, TURN_R, first, segment_turns=0)


def test_sdpo_loss_and_gradient_by_hand():
    """β = 0.5, segment = turn 1 of each: h = Σ_seg (π − ref)_c − Σ_seg (π − ref)_r, L = softplus(−βh); dL/dlog π is
    −β·σ(−βh) on the chosen segment's tokens, +β·σ(−βh) on the rejected one's, exactly 0 on every other token."""
    beta = 0.5
    pc = jnp.array([[-1.0, -2.0, -9.0, -0.5, -0.7, -9.0, -3.0, -1.0]])
    pr = jnp.array([[-1.0, -2.0, -9.0, -1.5, -9.0, -9.0, -0.2, 0.0]])
    rc = jnp.array([[-1.5, -1.0, -4.0, -1.0, -1.0, -4.0, -2.0, -2.0]])
    rr = jnp.array([[-0.5, -1.0, -4.0, -1.0, -4.0, -4.0, -2.0, 0.0]])
    seg_c, seg_r, _ = preference.sdpo_segments(TURN_C, TURN_R, jnp.array([1]), segment_turns=1)
    h = ((-0.5 - 0.7) - (-1.0 - 1.0)) - (-1.5 - -1.0)  # 0.8 + 0.5 = 1.3
    losses, metrics = preference.sdpo_loss(pc, pr, rc, rr, seg_c, seg_r, beta=beta)
    np.testing.assert_allclose(losses, [_softplus(-beta * h)], rtol=1e-6)
    np.testing.assert_allclose(metrics["rewards/chosen"], beta * 0.8, rtol=1e-6)
    np.testing.assert_allclose(metrics["rewards/rejected"], beta * -0.5, rtol=1e-6)

    gc, gr = jax.grad(lambda a, b: preference.sdpo_loss(a, b, rc, rr, seg_c, seg_r, beta=beta)[1]["loss"],
                      argnums=(0, 1))(pc, pr)
    g = beta * _sigmoid(-beta * h)
    np.testing.assert_allclose(gc, -g * seg_c, rtol=1e-6)
    np.testing.assert_allclose(gr, g * seg_r, rtol=1e-6)
    assert np.all(np.asarray(gc)[np.asarray(seg_c) == 0] == 0) and np.all(np.asarray(gr)[np.asarray(seg_r) == 0] == 0)

    # equal-length segments with identical summed log-ratios (here 0.3 each, split differently): log 2
    same_c = rc.at[0, 3].add(0.1).at[0, 4].add(0.2).at[0, 0].add(5.0)  # position 0 is outside the segment
    same_r = rr.at[0, 3].add(0.3).at[0, 6].add(-4.0)
    losses, _ = preference.sdpo_loss(same_c, same_r, rc, rr, seg_c, seg_r, beta=beta)
    np.testing.assert_allclose(losses, [LOG2], rtol=1e-6)


def test_dmpo_as_gamma_goes_to_0_weighs_turn_0_only():
    """γ → 0: φ(0, T) = 1 and φ(j > 0, T) → 0, so DMPO is DPO on turn 0's log-ratios; later turns get no gradient."""
    key = jax.random.split(jax.random.key(0), 4)
    pc, pr, rc, rr = (-jnp.abs(jax.random.normal(k, (1, 8))) for k in key)
    weights = preference.dmpo_turn_weights(TURN_C, gamma=1e-6)
    np.testing.assert_allclose(weights, [[1, 1, 0, 0, 0, 0, 0, 0]], atol=1e-5)
    turn0_c, turn0_r = (TURN_C == 0).astype(jnp.float32), (TURN_R == 0).astype(jnp.float32)
    seq = preference.sequence_logprobs
    expected, _ = preference.dpo_loss(seq(pc, turn0_c), seq(pr, turn0_r), seq(rc, turn0_c), seq(rr, turn0_r))
    got, _ = preference.dmpo_loss(pc, pr, rc, rr, TURN_C, TURN_R, gamma=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    grad = jax.grad(lambda a: preference.dmpo_loss(a, pr, rc, rr, TURN_C, TURN_R, gamma=1e-6)[1]["loss"])(pc)
    assert np.all(np.abs(np.asarray(grad)[0, 2:]) < 1e-6) and np.all(np.abs(np.asarray(grad)[0, :2]) > 1e-3)


# ------------------------------------------------------------------------------------- returns and pairs by hand


def test_episode_returns_and_best_vs_worst_pairs_of_hand_built_groups():
    """R = outcome + Σ turn rewards over the played turns (G-RA: turn rewards only where the outcome reaches the
    gate); each group's best vs worst by R, ties give no pair."""
    config = agent_config()
    outcome = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    turn_rewards = np.array([[1.0, 0.5, 0.0], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [1.0, 0.0, 0.0], [0.2, 0.0, 0.0],
                             [0.2, 0.0, 0.0]])
    valid = np.array([[True, True, False], [True, False, False], [True, True, True], [True, False, False],
                      [True, False, False], [True, False, False]])
    returns = episodes.episode_returns(config, outcome, turn_rewards * valid, valid)
    np.testing.assert_allclose(returns, [1.5, 1.0, 1.5, 1.0, 0.2, 0.2])
    config.agent.gated_rewards, config.agent.reward_gate = True, 1.0
    np.testing.assert_allclose(episodes.episode_returns(config, outcome, turn_rewards * valid, valid),
                               [0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    # groups: rows 0-2 (returns 1.5, 1.0, 1.5: best = row 0, the first of the tie at the top; worst = row 1),
    # rows 3, 5 (1.0 vs 0.2) and row 4 alone (no pair)
    chosen, rejected, ok = preference.pairs_from_groups(jnp.asarray(returns), jnp.array([0, 0, 0, 1, 2, 1]),
                                                        num_groups=3)
    np.testing.assert_array_equal(ok, [True, True, False])
    np.testing.assert_array_equal(chosen[:2], [0, 3])
    np.testing.assert_array_equal(rejected[:2], [1, 5])


# 2 groups of 3 episodes and a tied group: group 0 = rows 0, 1, 4 (row 4 best, row 1 worst), group 1 = rows 2, 3
# (row 2 best), group 2 = row 5, 6 (tied: no pair). Turns: rows share turn 0; rows 4 / 1 part inside turn 1.
N, T = 7, 8
TOKENS = jnp.tile(jnp.array([5, 6, 9, 7, 8, 9, 4, 4]), (N, 1)).at[1, 4].set(3).at[3, 0].set(2)
TURN_IDS = jnp.array([[0, 0, -1, 1, 1, -1, 2, 2]] * N).at[1].set(TURN_R[0]).at[3].set(TURN_R[0])
MASK = (TURN_IDS >= 0).astype(jnp.float32)
SCORES = jnp.array([1.0, 0.0, 2.0, 1.0, 3.0, 1.0, 1.0])
GROUP_IDS = jnp.array([0, 0, 1, 1, 0, 2, 2])
PAIRS = [(4, 1), (2, 3)]
ROWS = preference_step.PairRows(mask=MASK, scores=SCORES, group_ids=GROUP_IDS, turn_id=TURN_IDS, tokens=TOKENS)


def _settings(loss, **fields):
    return preference_step.PreferenceSettings(loss, "sigmoid", 0.1, 0.0, 3, **fields)


def test_pair_objective_dmpo_and_sdpo_on_hand_picked_pairs():
    key = jax.random.split(jax.random.key(1), 2)
    policy, ref = (-jnp.abs(jax.random.normal(k, (N, T))) for k in key)
    chosen, rejected = np.array(PAIRS).T
    for loss in ("dmpo", "sdpo"):
        cfg = _settings(loss, turn_discount=0.5, segment_turns=1)
        value, (row_loss, m) = preference_step.pair_loss(cfg, policy, ref, None, ROWS)
        args = (policy[chosen], policy[rejected], ref[chosen], ref[rejected])
        if loss == "dmpo":
            expected, _ = preference.dmpo_loss(*args, TURN_IDS[chosen], TURN_IDS[rejected], beta=0.1, gamma=0.5)
        else:  # pair (4, 1) parts in turn 1, pair (2, 3) at turn 0: segments = turn 1, turn 0 (k = 1)
            np.testing.assert_allclose(m["first_turn"], 0.5)
            np.testing.assert_allclose(m["segment_turns"], 1.0)
            seg_c, seg_r, _ = preference.sdpo_segments(TURN_IDS[chosen], TURN_IDS[rejected], jnp.array([1, 0]),
                                                       segment_turns=1)
            expected, _ = preference.sdpo_loss(*args, seg_c, seg_r, beta=0.1)
        np.testing.assert_allclose(value, np.mean(expected), rtol=1e-6)
        np.testing.assert_allclose(row_loss, np.bincount(chosen, expected, N) / 2, rtol=1e-6)  # on chosen rows
        np.testing.assert_allclose(m["valid_pair_frac"], 2 / 3)


# --------------------------------------------------------------------------- the learner: micro-batches, nano model

MODEL_CFG = models.get_config("nano", vocab_size=16)


@pytest.mark.parametrize("loss", ["dmpo", "sdpo"])
def test_micro_batched_gradient_equals_whole_batch_and_direct_gradient(loss):
    """The learner's pair objective with micro-batches of 1 row gives the whole batch's loss and gradient,
    which are those of the kernel written directly on the whole batch (`jax.grad` through the model)."""
    params = models.init_params(MODEL_CFG, jax.random.key(0))
    ref_params = jax.tree.map(lambda x: 0.9 * x, params)
    tokens = jnp.concatenate([jnp.full((N, 1), 1), TOKENS], axis=1)  # a prompt token, then the record
    zeros = jnp.zeros((N, T))
    batch = learner_lib.LearnerBatch(tokens=tokens, attention_mask=jnp.ones_like(tokens), completion_mask=MASK,
                                     advantages=zeros, old_logp=zeros, sampler_logp=zeros, turn_id=TURN_IDS,
                                     scores=SCORES, group_ids=GROUP_IDS)
    settings = _settings(loss, turn_discount=0.7, segment_turns=2)
    optimizer = optax.sgd(0.0)
    state = learner_lib.TrainState(params=params, opt_state=optimizer.init(params), ref_params=ref_params,
                                   key=jax.random.key_data(jax.random.key(0)))

    def gradients(micro):
        cfg = learner_lib.LearnerConfig(
            loss="ppo_clip", loss_kwargs=(), agg_mode="token-mean", kl_coef=0.0, kl_kind="k3", entropy_coef=0.0,
            temperature=1.0, micro_batch_size=micro, logprob_chunk_size=4, use_old_logp=False, preference=settings)
        return jax.jit(lambda s, b: learner_lib.policy_gradients(MODEL_CFG, cfg, s, b, jax.random.key(3)))(state, batch)

    def token_logp(p):
        from rl4llm.train import logprobs as logprobs_lib

        return logprobs_lib.completion_logprobs(MODEL_CFG, p, tokens, batch.attention_mask, completion_len=T,
                                                temperature=1.0, chunk_size=4)[0]

    rows = ROWS._replace(turn_id=jnp.where(MASK > 0, TURN_IDS, -1))
    direct_value, direct_grads = jax.value_and_grad(
        lambda p: preference_step.pair_loss(settings, token_logp(p), token_logp(ref_params), None, rows)[0])(params)
    whole = gradients(0)
    np.testing.assert_allclose(whole.sums["pg_loss"], direct_value, rtol=1e-5)
    assert float(optax.tree.norm(whole.grads)) > 0
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), whole.grads, direct_grads)
    for micro in (1,):  # every pair straddles micro-batches
        part = gradients(micro)
        np.testing.assert_allclose(part.sums["pg_loss"], whole.sums["pg_loss"], rtol=1e-5)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), part.grads, whole.grads)


# ---------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize("loss, overrides, field", [
    ("dmpo", {"agent.env": ""}, "config.agent.env=''"),  # a multi-turn loss needs agent episodes
    ("sdpo", {"agent.env": ""}, "config.agent.env=''"),
    ("dpo", {}, "config.agent.env='guess_number'"),  # single-turn losses still refuse agent runs
    ("cpl", {}, "config.agent.env='guess_number'"),
    ("dmpo", {"preference.kind": "ipo"}, "config.preference.kind='ipo'"),
    ("sdpo", {"preference.label_smoothing": 0.1}, "config.preference.label_smoothing=0.1"),
    ("dmpo", {"preference.turn_discount": 0.0}, "config.preference.turn_discount"),
    ("sdpo", {"preference.segment_turns": 0}, "config.preference.segment_turns"),
    ("dmpo", {"rl.num_minibatches": 2}, "config.rl.num_minibatches=2"),
    ("sdpo", {"rl.advantage": "bilevel_gae"}, "config.rl.advantage='bilevel_gae'"),
])
def test_config_errors_name_the_field(loss, overrides, field):
    config = agent_config()
    config.preference.loss = loss
    config.update_from_flattened_dict(overrides)
    with pytest.raises(config_lib.ConfigError, match=field.replace(".", r"\.")):
        config_lib.parse(config)


def test_valid_multi_turn_preference_configs_parse():
    for loss in ("dmpo", "sdpo"):
        config = agent_config()
        config.preference.loss = loss
        config.rl.ref_reset_every = 2  # the reference of DMPO / SDPO's log-ratios: no KL term needed
        assert config_lib.parse(config).preference.loss == loss


# ------------------------------------------------------------------------------------------- 2-step agent runs

# recipe -> metrics that must be non-zero at some RL step (test_recipes checks every recipe file is run somewhere)
AGENT_PREFERENCE_RECIPES = {
    # tasks' episodes returned differently: pairs formed and DMPO's turn-weighted loss was trained on them
    "agent_dmpo": ("dmpo/valid_pair_frac", "grad_norm"),
    # pairs formed, their first divergent turn located and a segment of turns trained on
    "agent_sdpo": ("sdpo/valid_pair_frac", "sdpo/segment_turns"),
}
SFT_STEPS = 30


def _tiny(config):
    """The recipe on agent_config's tiny guess-the-number job, with a warm start that samples some valid guesses
    (SFT_STEPS at lr 1e-2; sampling at temperature 0.5): the episodes' returns (outcome + valid actions) differ."""
    tiny = agent_config()
    config.agent, config.model, config.sft, config.eval = tiny.agent, tiny.model, tiny.sft, tiny.eval
    config.rl.steps, config.rl.num_prompts, config.rl.num_generations = 2, 2, 4
    config.log_every, config.checkpoint.every = tiny.log_every, tiny.checkpoint.every
    config.agent.turn_reward = "valid_action:1"
    config.sft.steps, config.sft.learning_rate = SFT_STEPS, 1e-2
    config.sampling.temperature = 0.5
    config.eval.every = 100  # evaluation at the last step only
    config.rl.learning_rate, config.rl.warmup_steps = 1e-2, 0
    return config


@pytest.fixture(scope="module")
def sft_workdir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("sft"))
    config = _tiny(importlib.import_module("configs.agent_dmpo").get_config())
    config.rl.steps = 0
    job.run(config, workdir)
    return workdir


def _params(workdir, stage, step, target):
    ckpt = checkpointing.Checkpointer(os.path.join(workdir, "checkpoints", stage))
    params, _ = ckpt.restore_entry(step, "params", target)
    ckpt.close()
    return params


@pytest.mark.parametrize("name", sorted(AGENT_PREFERENCE_RECIPES))
def test_agent_recipe_forms_pairs_and_its_update_moves_the_params(name, sft_workdir, tmp_path):
    recipe = importlib.import_module(f"configs.{name}")
    assert f"--config=configs/{name}.py" in recipe.get_config.__doc__
    config = _tiny(recipe.get_config())
    parsed = config_lib.parse(config)
    loss = parsed.preference.loss
    workdir = str(tmp_path / name)
    shutil.copytree(sft_workdir, workdir)
    job.run(config, workdir)
    records = {r["step"]: r for r in metrics_lib.read_metrics(workdir, "rl")}
    assert sorted(records) == [1, 2]
    for record in records.values():
        for key in (f"{loss}/loss", f"{loss}/valid_pair_frac", "loss/pg", "episode_return"):
            assert key in record and math.isfinite(record[key]), key
    for key in AGENT_PREFERENCE_RECIPES[name]:
        values = [r[key] for r in records.values()]
        assert max(values) > 0, f"{name}: its mechanism metric {key} is {values}"
    # the first update starts at policy = reference (log 2 over its pairs) and, with pairs, moves the params (no
    # weight decay: only the pair loss's gradient can)
    assert records[1][f"{loss}/valid_pair_frac"] > 0 and records[1][f"{loss}/loss"] == pytest.approx(LOG2, rel=1e-6)
    assert records[1]["grad_norm"] > 0 and parsed.rl.weight_decay == 0.0
    target = models.init_params(agent.build_setup(parsed, workdir).model_cfg, jax.random.key(0))
    warm, after = _params(workdir, "sft", SFT_STEPS, target), _params(workdir, "rl", 1, target)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(warm), jax.tree.leaves(after)))
