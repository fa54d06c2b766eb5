"""ARRoL's online rollout pruning (`rl4llm.rl.pruning`, `train.completions.pruned_completions`,
`train.companions.quality_head`): the keep rule by hand and with a perfect predictor, the head's BCE by hand, a kept
rollout decoded on from the checkpoint equal to the uninterrupted decode (greedy), and a run whose head learns and
resumes exactly."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm.rl import pruning
from rl4llm.train import batches
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import completions
from rl4llm.train import setup as setup_lib
from tests.test_train import tiny_config


def test_balanced_keep_by_hand():
    q = np.array([[0.9, 0.1, 0.5, 0.7], [0.5, 0.5, 0.5, 0.5]])
    # group 0: the likeliest (0), then the least likely of the others (1); group 1, all tied: the first, then the
    # first of the rest
    np.testing.assert_array_equal(pruning.balanced_keep(q, 2, 0.5), [[0, 1], [0, 1]])
    np.testing.assert_array_equal(pruning.balanced_keep(q, 3, 0.5), [[0, 1, 3], [0, 1, 2]])  # ceil(1.5) = 2 likeliest
    np.testing.assert_array_equal(pruning.balanced_keep(q, 2, 1.0), [[0, 3], [0, 1]])
    np.testing.assert_array_equal(pruning.balanced_keep(q, 2, 0.0), [[1, 2], [0, 1]])
    with pytest.raises(ValueError, match="keep=5"):
        pruning.balanced_keep(q, 5, 0.5)


def test_a_perfect_predictor_keeps_exactly_the_target_share_of_successes():
    """The digest's test: with q = 1 on the rollouts that will succeed and 0 on the others, a group keeps exactly
    ceil(rho M) successes whenever it has that many of each kind."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(300):
        n, keep, target = 16, int(rng.integers(2, 9)), float(rng.choice([0.25, 0.5, 0.75]))
        correct = rng.random(n) < rng.random()
        top = math.ceil(target * keep)
        kept = pruning.balanced_keep(correct[None].astype(float), keep, target)[0]
        assert len(set(kept.tolist())) == keep
        if correct.sum() >= top and (~correct).sum() >= keep - top:
            assert correct[kept].sum() == top
            checked += 1
    assert checked > 100


def test_quality_loss_by_hand():
    head = {"w": jnp.array([1.0, -2.0]), "b": jnp.array(0.5)}
    features = jnp.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # logits 2.5, -1.5, -0.5
    outcomes = jnp.array([True, True, False])
    loss, m = pruning.quality_loss(head, features, outcomes, jnp.array([True, True, False]))
    expected = (math.log1p(math.exp(-2.5)) + math.log1p(math.exp(1.5))) / 2  # the third row is not valid
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(m["accuracy"]) == 0.5 and float(m["outcome"]) == 1.0
    assert float(m["predicted"]) == pytest.approx((1 / (1 + math.exp(-2.5)) + 1 / (1 + math.exp(1.5))) / 2, rel=1e-6)
    zero, m0 = pruning.quality_loss(pruning.init_head(2), features, outcomes, jnp.ones(3, bool))
    assert float(zero) == pytest.approx(math.log(2.0)) and float(m0["predicted"]) == 0.5
    # at the initial head every logit is 0: the gradient is mean((σ(0) − y)·h), nonzero even when no rollout succeeded
    grads = jax.grad(lambda h: pruning.quality_loss(h, features, jnp.zeros(3, bool), jnp.ones(3, bool))[0])(
        pruning.init_head(2))
    np.testing.assert_allclose(grads["w"], 0.5 * np.asarray(features).mean(0), rtol=1e-6)
    assert float(grads["b"]) == pytest.approx(0.5)


def _pruning_config(**pruning_fields):
    c = tiny_config()
    c.pruning.enabled = True
    c.pruning.update(pruning_fields)
    return c


def test_a_kept_rollout_decoded_on_from_the_checkpoint_is_the_uninterrupted_decode(tmp_path):
    """Greedily (so that both are deterministic): each kept row of `pruned_completions` (decoded to the checkpoint,
    then after [prompt | those tokens] to the budget) holds the tokens and log-probs of one uninterrupted decode of
    its prompt; the rows that stop before the checkpoint keep only their tokens."""
    config = config_lib.parse(_pruning_config(checkpoint_tokens=3, oversample=2))
    setup = setup_lib.build_setup(config, str(tmp_path))
    greedy = dataclasses.replace(setup, rollout_cfg=setup.eval_spec.greedy)
    params = models.init_params(setup.model_cfg, jax.random.key(3))
    examples = setup.task.source.train_examples(0, 3)
    prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, [e.prompt for e in examples],
                                                        config.sampling.prompt_bucket)
    counts = np.array([2, 2, 2])
    head = pruning.init_head(setup.model_cfg.hidden_size)
    pruned, metrics = completions.pruned_completions(config, greedy, params, prompt_tokens, prompt_mask, counts,
                                                  jax.random.key(0), head)
    whole = completions.sample_completions(config, greedy, params, prompt_tokens, prompt_mask, counts,
                                        jax.random.key(0), setup.eval_spec.greedy)
    np.testing.assert_array_equal(pruned["completion_mask"], whole["completion_mask"])
    np.testing.assert_array_equal(np.where(pruned["completion_mask"], pruned["completion_tokens"], -1),
                                  np.where(whole["completion_mask"], whole["completion_tokens"], -1))
    np.testing.assert_allclose(pruned["logprobs"], whole["logprobs"], atol=2e-5)
    np.testing.assert_array_equal(pruned["finished"], whole["finished"])
    assert pruned["quality_features"].shape == (6, setup.model_cfg.hidden_size)
    assert metrics["pruning/sampled_rows"] == 12.0 and metrics["pruning/kept_rows"] == 6.0
    # the features are the policy's hidden state at each kept row's last checkpoint token
    tokens, mask = batches.join_sequences(np.repeat(prompt_tokens, 2, axis=0), np.repeat(prompt_mask, 2, axis=0),
                                          whole["completion_tokens"][:, :3], whole["completion_mask"][:, :3])
    hidden, _ = models.forward(setup.model_cfg, params, tokens, models.positions_from_mask(mask), mask)
    last = np.asarray(mask).shape[1] - 1 - np.argmax(np.asarray(mask)[:, ::-1], axis=1)
    np.testing.assert_allclose(pruned["quality_features"], np.asarray(hidden)[np.arange(6), last], atol=1e-5)


def _rl_records(workdir):
    return {r["step"]: r for r in metrics_lib.read_metrics(str(workdir), "rl")}


def test_the_quality_head_learns_from_the_kept_rollouts_and_resumes_exactly(tmp_path):
    """Every step prunes 2x the rollouts to the group size, the head takes a BCE step on the kept ones' outcomes
    (its state is checkpointed with the policy's): a run stopped after step 2 and resumed prunes step 3 with the head
    it had trained, as the uninterrupted run does."""
    c = _pruning_config(checkpoint_tokens=4, learning_rate=0.1)
    c.rl.steps, c.checkpoint.every = 3, 1
    config = c
    full = tmp_path / "full"
    job.run(config, str(full))
    records = _rl_records(full)
    g = c.rl.num_prompts * c.rl.num_generations
    for r in records.values():
        assert r["pruning/sampled_rows"] == 2 * g and r["pruning/kept_rows"] == g
        assert np.isfinite(r["pruning/head_loss"]) and r["pruning/head_grad_norm"] > 0
    assert records[1]["pruning/kept_quality"] == 0.5  # the initial head predicts 1/2 everywhere
    assert records[3]["pruning/kept_quality"] != 0.5  # ... and had learned by step 3
    resumed = tmp_path / "resumed"
    job.run(config, str(resumed), stop_after_rl_step=2)
    job.run(config, str(resumed))
    again = _rl_records(resumed)
    for key in ("pruning/kept_quality", "pruning/dropped_quality", "pruning/head_loss", "reward"):
        assert again[3][key] == pytest.approx(records[3][key], abs=1e-6), key


def test_pruning_config_errors():
    for fields, message in (
        (dict(checkpoint_tokens=12), "config.pruning.checkpoint_tokens=12: must be < config.sampling.max_new_tokens"),
    ):
        with pytest.raises(config_lib.ConfigError, match=message):
            config_lib.parse(_pruning_config(**fields))
    for section, field, value in (("rl", "off_policy_traces", 2), ("tree", "enabled", True),
                                  ("rl", "async_rollouts", True), ("sampling", "temperature_tau", 0.5)):
        c = _pruning_config()
        setattr(getattr(c, section), field, value)
        with pytest.raises(config_lib.ConfigError, match=f"config.{section}.{field}={value!r}: ARRoL"):
            config_lib.parse(c)


def test_the_offline_probe_by_hand():
    """`analysis.quality_probe`: within-group AUC counts a group's (success, failure) pairs (ties ½), across groups
    only within each; the logistic probe separates a linearly separable set; group centring by hand."""
    from rl4llm.analysis import quality_probe

    scores = np.array([0.9, 0.1, 0.5, 0.5, 0.2, 0.8])
    labels = np.array([1, 0, 1, 0, 1, 0])
    groups = np.array([0, 0, 1, 1, 2, 2])
    assert quality_probe.within_group_auc(scores, labels, groups) == pytest.approx((1 + 0.5 + 0) / 3)
    assert np.isnan(quality_probe.within_group_auc(scores[:2], np.ones(2), groups[:2]))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x[:, 0] - 0.5 * x[:, 2] > 0).astype(float)
    predict, w, _ = quality_probe.fit_logistic(x, y)
    assert np.mean((predict(x) > 0.5) == (y > 0.5)) > 0.95 and w[0] > 0 > w[2]
    np.testing.assert_allclose(quality_probe.group_centred(np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 5.0]]),
                                                           np.array([0, 0, 1])), [[-1, -2], [1, 2], [0, 0]])


def test_the_probe_binary_on_a_tiny_run(tmp_path):
    """`experiments/pruning_probe.py` on a run's SFT checkpoint: one record per k, rates in [0, 1]."""
    import json
    import os
    import subprocess
    import sys

    from tests import subprocess_env

    c = tiny_config()
    c.rl.steps = 0
    job.run(c, str(tmp_path / "run"))
    out = tmp_path / "probe.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "experiments.pruning_probe", f"--workdir={tmp_path / 'run'}", "--prompts=8",
         "--generations=4", "--k=2,4", f"--out={out}"],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))), env=subprocess_env.default_xla_flags(),
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["k"] for r in records] == [2, 4] and all(r["rollouts"] == 32 and r["stage"] == "sft" for r in records)
    for r in records:
        for key in ("success_rate", "test_accuracy", "test_majority"):
            assert 0.0 <= r[key] <= 1.0, key
