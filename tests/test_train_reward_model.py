"""The reward-model job (`experiments/train_reward_model.py` -> `rl4llm.train.reward_model_job`): preference pairs of
the arithmetic task, a nano RM trained with Bradley-Terry whose held-out pairwise accuracy beats chance, the metrics
and the checkpoint it writes, the trunk's warm start from an SFT workdir, and pairs sampled from a policy."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm import reward_model as rm
from rl4llm.data import arithmetic
from rl4llm.train import checkpointing
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import reward_model_job


def rm_config(**fields):
    """A nano RM on 2-operand problems (200 of them, 60 held out), final-answer corruptions."""
    c = default.get_config()
    c.model.preset = "nano"
    c.task.min_operands = c.task.max_operands = 2
    c.task.test_fraction = 0.3
    c.sampling.max_new_tokens = 12
    c.sampling.prompt_bucket = 8
    c.reward_model.update(dict(steps=200, batch_size=32, learning_rate=3e-3, eval_pairs=60, eval_every=200,
                               corruption="final_answer"))
    c.reward_model.update(fields)
    c.log_every = 50
    return c


def test_wrong_solution_has_a_wrong_final_answer():
    rng = np.random.default_rng(0)
    for example in arithmetic.test_examples(arithmetic.ArithmeticConfig(max_value=20), 50):
        for corruption in arithmetic.CORRUPTIONS:
            wrong = arithmetic.wrong_solution(example.solution, rng, corruption)
            assert wrong.rsplit("#", 1)[1] != example.answer
            if corruption == "final_answer":
                assert wrong.rsplit("#", 1)[0] == example.solution.rsplit("#", 1)[0]
    assert arithmetic.wrong_solution("3+7=10;10-5=5;#5", np.random.default_rng(3)) in {
        *(f"3+7=10;10-5=5;#{5 + d}" for d in (-3, -2, -1, 1, 2, 3)),
        *(f"3+7={10 + d};{10 + d}-5={5 + d};#{5 + d}" for d in (-3, -2, -1, 1, 2, 3)),
        *(f"3+7=10;10-5={5 + d};#{5 + d}" for d in (-3, -2, -1, 1, 2, 3)),
    }


def test_bradley_terry_training_beats_chance_on_held_out_pairs(tmp_path):
    summary = reward_model_job.run(rm_config(), str(tmp_path))
    records = metrics_lib.read_metrics(str(tmp_path), "rm")
    evals = [r for r in records if "eval/pairwise_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 200]
    assert [r["step"] for r in records if "loss" in r] == [50, 100, 150, 200]
    assert summary["rm_eval_pairwise_accuracy"] == evals[-1]["eval/pairwise_accuracy"] > 0.6
    assert evals[-1]["eval/loss"] < evals[0]["eval/loss"]
    # the checkpoint reproduces the logged held-out accuracy
    cfg, params, meta = rm.load(summary["checkpoint"])
    task_cfg = config_lib.parse(rm_config())
    assert meta["rm_eval_pairwise_accuracy"] == summary["rm_eval_pairwise_accuracy"]
    tokenizer = reward_model_job.setup_lib.model_tokenizer(task_cfg, str(tmp_path),
                                                           reward_model_job.tasks_lib.build(task_cfg.task, 0))
    pairs = reward_model_job.held_out_pairs(task_cfg, reward_model_job.tasks_lib.build(task_cfg.task, 0), tokenizer)
    again = reward_model_job.evaluate(cfg, params, pairs)["eval/pairwise_accuracy"]
    assert again == summary["rm_eval_pairwise_accuracy"]
    with pytest.raises(checkpointing.StorageError, match="does not resume"):
        reward_model_job.run(rm_config(), str(tmp_path))


def test_bce_on_verifier_labels_runs_and_reports(tmp_path):
    summary = reward_model_job.run(rm_config(objective="bce", steps=4, eval_every=2), str(tmp_path))
    assert 0.0 <= summary["rm_eval_pairwise_accuracy"] <= 1.0 and summary["objective"] == "bce"
    assert json.load(open(tmp_path / "summary.json"))["rm_steps"] == 4


def test_trunk_starts_from_the_sft_policy_of_init_from(tmp_path):
    c = rm_config()
    c.sft.steps, c.sft.batch_size, c.rl.steps = 2, 8, 0
    c.eval.num_examples, c.eval.pass_n, c.eval.pass_k = 4, 1, (1,)
    job.run(c, str(tmp_path / "policy"))
    c.reward_model.init_from = str(tmp_path / "policy")
    config = config_lib.parse(c)
    ckpt = checkpointing.Checkpointer(os.path.join(tmp_path, "policy", "checkpoints", "sft"))
    task = reward_model_job.tasks_lib.build(config.task, 0)
    tokenizer = reward_model_job.setup_lib.model_tokenizer(config, str(tmp_path / "policy"), task)
    model_cfg = reward_model_job.setup_lib.model_config(config, tokenizer.vocab_size)
    sft_params, _ = ckpt.restore_entry(2, "params", jax.eval_shape(rm.models.init_params, model_cfg,
                                                                    jax.random.key(0)))
    ckpt.close()
    params = reward_model_job.initial_params(config, model_cfg, jax.random.key(0))
    for a, b in zip(jax.tree.leaves(params["trunk"]), jax.tree.leaves(sft_params)):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def _parity_reward(completion: str, answer: str) -> float:
    """Right for even answers, and for odd ones iff the completion has an even length: a nano policy's samples get
    both labels (the task's own verifier would reject nearly all of them)."""
    return 1.0 if int(answer) % 2 == 0 else float(len(completion) % 2 == 0)


def sampling_policy(c, tmp_path):
    """A 2-step SFT policy of RM config `c` in tmp_path/policy, and `c` set to sample the RM's data from it (6
    prompts x 4): -> (parsed config, restored policy, its first 6 training examples, the sampling key)."""
    from rl4llm.train import runs

    c.sft.steps, c.sft.batch_size, c.rl.steps = 2, 8, 0
    c.eval.num_examples, c.eval.pass_n, c.eval.pass_k = 4, 1, (1,)
    job.run(c, str(tmp_path / "policy"))
    c.rl.num_generations = 4
    c.reward_model.update(dict(sample_from=str(tmp_path / "policy"), sample_prompts=6, eval_pairs=5, steps=3,
                               eval_every=3))
    policy = runs.restore_policy(str(tmp_path / "policy"))
    return config_lib.parse(c), policy, policy.setup.task.source.train_examples(0, 6), jax.random.key(5)


def test_pairs_sampled_from_a_policy_are_its_accepted_vs_rejected_completions(tmp_path, monkeypatch):
    """reward_model.sample_from: each pair is one prompt's accepted and rejected samples of the policy (by its
    verifier), min(accepted, rejected) pairs per prompt; the job trains on a pool of them and reports the counts."""
    from rl4llm import rewards
    from rl4llm.train import batches
    from rl4llm.train import evaluate as evaluate_lib

    monkeypatch.setitem(rewards.REWARDS, "parity", _parity_reward)
    c = rm_config()
    c.task.reward = "parity"
    config, policy, examples, key = sampling_policy(c, tmp_path)
    pairs, metrics = reward_model_job.policy_pairs(config, policy.setup.tokenizer, policy, examples, key)
    # the same samples, regenerated with the same key
    g = 4
    again = evaluate_lib.generate_scored(
        policy.setup.model_cfg, policy.params, policy.setup.tokenizer, [e.prompt for e in examples for _ in range(g)],
        [e.answer for e in examples for _ in range(g)], key, policy.setup.rollout_cfg, policy.setup.eval_spec,
        policy.setup.score_fn)
    policy.close()
    accepted = (again.rewards == 1).reshape(6, g).sum(1)
    assert metrics["pairs"] == pairs.chosen_tokens.shape[0] == np.minimum(accepted, g - accepted).sum() > 0
    assert metrics["accepted_frac"] == accepted.sum() / (6 * g)
    t = config.sampling.max_new_tokens
    for tokens, mask, label in ((pairs.chosen_tokens, pairs.chosen_mask, 1.0),
                                (pairs.rejected_tokens, pairs.rejected_mask, 0.0)):
        texts = batches.decode_completions(policy.setup.tokenizer, np.asarray(tokens)[:, -t:],
                                           np.asarray(mask)[:, -t:] > 0)
        assert set(texts) <= set(again.texts)
        prompts = batches.decode_completions(policy.setup.tokenizer, np.asarray(tokens)[:, :-t],
                                             np.asarray(mask)[:, :-t] > 0)
        answers = {e.prompt: e.answer for e in examples}
        assert [_parity_reward(text, answers[p]) for p, text in zip(prompts, texts)] == [label] * len(texts)
    summary = reward_model_job.run(c, str(tmp_path / "rm"))
    assert summary["pool/pairs"] > 0 and summary["held_out/pairs"] > 0 and summary["rm_steps"] == 3
    c.reward_model.objective = "judge"
    with pytest.raises(config_lib.ConfigError, match="sampled pairs train a scalar RM"):
        reward_model_job.run(c, str(tmp_path / "judge"))
    c.reward_model.objective = "bradley_terry"
    c.reward_model.sample_from = str(tmp_path / "nothing")
    with pytest.raises(config_lib.ConfigError, match="config.reward_model.sample_from=.*nothing"):
        reward_model_job.run(c, str(tmp_path / "missing"))
