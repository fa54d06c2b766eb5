"""An outcome reward model as the RL reward (`config.reward_model`, `train.rollouts.with_reward_model`): a nano job
whose RM checkpoint the test writes itself logs the RM's scores as its rewards ('replace'), or the rule reward plus
the weighted score ('add'); the configs it cannot serve are refused, naming the field; an RM co-trained with the policy
(Cooper) learns on the step's verified pairs and resumes exactly."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import reward_model as rm
from rl4llm.data import arithmetic
from rl4llm.rewards import combine as combine_lib
from rl4llm.rl import preference
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train.companions import rm_cotraining
from rl4llm.data import tasks as tasks_lib


def nano_job(rm_dir: str, **reward_model):
    c = default.get_config()
    c.model.preset = "nano"
    c.task.min_operands = c.task.max_operands = 2
    c.task.operators = "+"
    c.task.test_fraction = 0.2
    c.sampling.max_new_tokens = 12
    c.sampling.prompt_bucket = 8
    c.sft.steps, c.sft.batch_size = 2, 8
    c.rl.steps, c.rl.num_prompts, c.rl.num_generations = 2, 4, 4
    c.eval.num_examples, c.eval.every, c.eval.pass_n, c.eval.pass_k = 4, 100, 1, (1,)
    c.log_every = 1
    c.reward_model.checkpoint = rm_dir
    c.reward_model.update(reward_model)
    return c


def write_rm(workdir, rm_dir: str, head) -> None:
    """An RM on the job's tokenizer (trained here in the job's workdir, which the job then reuses): a random nano
    trunk and `head`."""
    c = config_lib.parse(nano_job(""))
    tokenizer = sentencepiece_tokenizer.get_or_train_task_tokenizer(str(workdir), tasks_lib.build(
        c.task, 0).source.what)
    cfg = models.get_config("nano", vocab_size=tokenizer.vocab_size)
    params = {"trunk": models.init_params(cfg, jax.random.key(5)), "head": head(cfg)}
    rm.save(rm_dir, cfg, params, {"tokenizer_fingerprint": rm.tokenizer_fingerprint(tokenizer, arithmetic.ALPHABET)})


def _rl_records(workdir):
    return [r for r in metrics_lib.read_metrics(str(workdir), "rl") if "reward" in r]


def test_replace_mode_logs_the_rm_scores_as_rewards(tmp_path):
    """A constant RM (zero kernel, bias 0.7): every reward is weight x 0.7, whatever the rule reward says."""
    write_rm(tmp_path / "job", str(tmp_path / "rm"),
             lambda cfg: {"kernel": jnp.zeros((cfg.hidden_size,)), "bias": jnp.asarray(0.7)})
    job.run(nano_job(str(tmp_path / "rm"), mode="replace", weight=2.0), str(tmp_path / "job"))
    records = _rl_records(tmp_path / "job")
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["reward_model/score_mean"] == pytest.approx(0.7, abs=1e-6)
        assert r["reward_model/score_std"] == pytest.approx(0.0, abs=1e-6)
        assert r["reward"] == pytest.approx(1.4, abs=1e-6) and r["reward_std"] == pytest.approx(0.0, abs=1e-6)
        assert 0.0 <= r["reward/exact_answer"] <= 1.0  # the rule reward, still logged


def test_add_mode_adds_the_weighted_rm_score_to_the_rule_reward(tmp_path):
    write_rm(tmp_path / "job", str(tmp_path / "rm"), lambda cfg: {
        "kernel": jax.random.normal(jax.random.key(1), (cfg.hidden_size,)), "bias": jnp.asarray(0.0)})
    job.run(nano_job(str(tmp_path / "rm"), mode="add", weight=0.5), str(tmp_path / "job"))
    for r in _rl_records(tmp_path / "job"):
        assert r["reward_model/score_std"] > 1e-3  # scores depend on the completion
        assert r["reward"] == pytest.approx(r["reward/exact_answer"] + 0.5 * r["reward_model/score_mean"], abs=1e-5)


def test_with_model_score_hand_cases():
    rule, scores = np.array([1.0, 0.0, 1.0]), np.array([0.5, -2.0, 0.0])
    np.testing.assert_allclose(combine_lib.with_model_score(rule, scores, weight=2.0, mode="replace"), [1.0, -4.0, 0.0])
    np.testing.assert_allclose(combine_lib.with_model_score(rule, scores, weight=0.5, mode="add"), [1.25, -1.0, 1.0])
    with pytest.raises(ValueError, match="mode"):
        combine_lib.with_model_score(rule, scores, weight=1.0, mode="mul")


def test_configs_the_rm_cannot_serve_are_refused(tmp_path):
    c = nano_job(str(tmp_path))
    c.rl.advantage = "gdpo"
    c.task.extra_rewards = "format_think_answer:0.5"
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    assert "config.reward_model.checkpoint" in str(e.value) and "rl.advantage='gdpo'" in str(e.value)
    assert "config.reward_model.mode='replace'" in str(e.value)
    c = nano_job(str(tmp_path / "missing"))
    with pytest.raises(config_lib.ConfigError, match="config.reward_model.checkpoint"):
        config_lib.parse(c)


# ------------------------------------------------------------------------------ co-training (Cooper)


def test_verified_pairs_hand_case():
    """Per group: the accepted completion the RM scores lowest vs the rejected one it scores highest; a group the
    verifier does not split has no pair."""
    scores = jnp.array([0.5, -1.0, 2.0, 0.1, 3.0, 1.0, -2.0, 0.0])
    correct = jnp.array([True, True, False, False, True, True, False, False])
    groups = jnp.array([0, 0, 0, 0, 1, 1, 2, 2])
    chosen, rejected, valid = preference.verified_pairs(scores, correct, groups, num_groups=3)
    assert valid.tolist() == [True, False, False]
    assert (int(chosen[0]), int(rejected[0])) == (1, 2)
    # group 0's four (accepted, rejected) pairs: only 0.5 > 0.1 is ordered right
    assert float(rm_cotraining.pair_accuracy(scores, correct, groups)) == pytest.approx(1 / 4)
    softplus = lambda x: np.log1p(np.exp(x))  # noqa: E731
    by_hand = np.mean([softplus(-(a - b - 0.5)) for a in (0.5, -1.0) for b in (2.0, 0.1)])
    assert float(rm_cotraining.all_pairs_loss(scores, correct, groups, 0.5)) == pytest.approx(by_hand, rel=1e-5)


def write_tiny_rm(directory: str, seed: int = 0) -> None:
    """A random nano RM (trunk and head) with no tokenizer fingerprint: any run's task tokenizer reads it."""
    from tests.test_generative_verifier import VOCAB

    cfg = models.get_config("nano", vocab_size=VOCAB)
    head = {"kernel": jax.random.normal(jax.random.key(seed + 1), (cfg.hidden_size,)), "bias": jnp.asarray(0.0)}
    rm.save(directory, cfg, {"trunk": models.init_params(cfg, jax.random.key(seed)), "head": head})


def _co_training_job(tmp_path, monkeypatch):
    from rl4llm import rewards
    from tests.test_recipes import _parity_reward

    monkeypatch.setitem(rewards.REWARDS, "parity", _parity_reward)  # groups the verifier splits
    write_tiny_rm(str(tmp_path / "rm"))
    c = nano_job(str(tmp_path / "rm"), mode="replace", co_train=True)
    c.task.reward = "parity"
    c.rl.steps = 3
    return c


def test_co_trained_rm_learns_on_verified_pairs_and_resumes_exactly(tmp_path, monkeypatch):
    """Every step the RM takes a Bradley–Terry step on the groups the verifier splits, its state is checkpointed with
    the policy's: a run stopped after step 2 and resumed scores step 3 with the RM it had trained (the same rewards and
    RM loss as the uninterrupted run), not the checkpoint's."""
    config = _co_training_job(tmp_path, monkeypatch)
    full = tmp_path / "full"
    job.run(config, str(full))
    records = {r["step"]: r for r in _rl_records(full)}
    assert sum(r["reward_model/pairs"] for r in records.values()) > 0
    for r in records.values():
        assert np.isfinite(r["reward_model/loss"]) and 0.0 <= r["reward_model/pair_accuracy"] <= 1.0
        assert r["reward_model/grad_norm"] > 0 or r["reward_model/pairs"] == 0
    resumed = tmp_path / "resumed"
    job.run(config, str(resumed), stop_after_rl_step=2)
    job.run(config, str(resumed))
    again = {r["step"]: r for r in _rl_records(resumed)}
    for key in ("reward_model/score_mean", "reward_model/loss", "reward_model/pair_accuracy", "reward"):
        assert again[3][key] == pytest.approx(records[3][key], abs=1e-6), key
    # the same job with the RM frozen: the same policy after the first step with pairs, whose next rollouts the
    # co-trained RM then scores differently (it moved)
    first = min(s for s, r in records.items() if r["reward_model/pairs"] > 0)
    assert first < 3
    frozen = tmp_path / "frozen"
    config.reward_model.co_train = False
    job.run(config, str(frozen))
    frozen_records = {r["step"]: r for r in _rl_records(frozen)}
    assert frozen_records[first]["reward"] == pytest.approx(records[first]["reward"], abs=1e-6)
    assert frozen_records[first + 1]["reward_model/score_mean"] != pytest.approx(
        records[first + 1]["reward_model/score_mean"], abs=1e-6)


def test_co_training_config_errors(tmp_path):
    c = nano_job("")
    c.reward_model.co_train = True
    with pytest.raises(config_lib.ConfigError, match="co_train=True trains the RM that scores the rollouts"):
        config_lib.parse(c)
    c = nano_job(str(tmp_path))
    c.reward_model.co_train = True
    c.task.pseudo_labels = "majority_vote"
    with pytest.raises(config_lib.ConfigError, match="not config.task.pseudo_labels='majority_vote'"):
        config_lib.parse(c)
    c = nano_job(str(tmp_path))
    c.reward_model.co_train = True
    c.rl.async_rollouts = True
    with pytest.raises(config_lib.ConfigError, match="not with config.rl.async_rollouts"):
        config_lib.parse(c)
