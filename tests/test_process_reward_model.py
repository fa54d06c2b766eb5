"""The learned process reward model (`rl4llm.process_reward_model`): the per-step BCE by hand, step scores equal to a
direct forward's head at the step-end tokens and invariant to batch composition and padding, the step AUC by hand and
against its definition, the training binary's checkpoint loaded and scoring, and the config errors naming the field."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import process_reward_model as prm
from rl4llm import reward_model as rm
from rl4llm.data import arithmetic
from rl4llm.rewards import arithmetic as arithmetic_rewards
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import process_sequences
from rl4llm.train import reward_model_job
from tests.test_train_reward_model import rm_config, sampling_policy

VOCAB = 64  # >= the arithmetic char tokenizer's ids
CFG = models.get_config("nano", vocab_size=VOCAB)
JUDGE = arithmetic_rewards.step_labels
PROMPTS = ["3+7-5=", "12*2+1=", "4+4="]
COMPLETIONS = ["3+7=10;10-5=5;#5", "12*2=25;25+1=26;#26", "4+4=8;#9"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return sentencepiece_tokenizer.get_or_train_task_tokenizer(str(tmp_path_factory.mktemp("tok")),
                                                               arithmetic.ArithmeticConfig())


def _params(seed=0, bias=0.1):
    """A random trunk and a large random head, so scores differ clearly across positions."""
    trunk = models.init_params(CFG, jax.random.key(seed))
    kernel = 0.5 * jax.random.normal(jax.random.key(seed + 100), (CFG.hidden_size,))
    return {"trunk": trunk, "head": {"kernel": kernel, "bias": jnp.asarray(bias)}}


def _encode(tokenizer, prompts=PROMPTS, completions=COMPLETIONS, bucket=8, width=24):
    return prm.encode_steps(tokenizer, JUDGE, prompts, completions, prompt_bucket=bucket, completion_len=width)


def test_step_ends_are_the_separators_and_the_answers_last_digit(tokenizer):
    batch = _encode(tokenizer)
    for i, completion in enumerate(COMPLETIONS):
        ends = np.flatnonzero(batch.step_ends[i])
        texts = [tokenizer.decode(batch.tokens[i, :e + 1][batch.attention_mask[i, :e + 1] > 0].tolist())
                 for e in ends]
        prompt = PROMPTS[i]
        segments = completion.split(";")
        assert texts == [prompt + ";".join(segments[:k + 1]) + (";" if k < len(segments) - 1 else "")
                         for k in range(len(segments))]
        np.testing.assert_array_equal(batch.step_labels[i, ends], np.asarray(JUDGE(prompt, completion), float))
    # "12*2=25" is flawed, the step built on it is sound (judge's convention), the final answer follows; "#9" is wrong
    assert batch.step_labels[1][batch.step_ends[1]].tolist() == [0.0, 1.0, 1.0]
    assert batch.step_labels[2][batch.step_ends[2]].tolist() == [1.0, 0.0]


def test_per_step_bce_by_hand(tokenizer):
    """A zero kernel and bias ln 3: every logit is ln 3, σ = ¾; the loss is the mean over the 8 step ends of
    −ln ¾ (sound) and −ln ¼ (flawed): 6 sound, 2 flawed."""
    params = _params()
    params["head"] = {"kernel": jnp.zeros((CFG.hidden_size,)), "bias": jnp.asarray(math.log(3.0))}
    loss, metrics = prm.step_bce_objective(CFG, params, _encode(tokenizer))
    by_hand = (6 * -math.log(0.75) + 2 * -math.log(0.25)) / 8
    assert float(loss) == pytest.approx(by_hand, rel=1e-5)
    assert float(metrics["step_accuracy"]) == pytest.approx(6 / 8)
    assert float(metrics["score"]) == pytest.approx(0.75, rel=1e-5) and float(metrics["steps"]) == 8


def test_per_step_bce_ignores_positions_off_the_step_ends(tokenizer):
    """Changing the labels off the ends changes nothing; a row without a step end adds nothing."""
    params, batch = _params(), _encode(tokenizer)
    loss, _ = prm.step_bce_objective(CFG, params, batch)
    noisy = batch.replace(step_labels=np.where(batch.step_ends, batch.step_labels, 1.0))
    assert float(prm.step_bce_objective(CFG, params, noisy)[0]) == float(loss)
    no_steps = batch.replace(step_ends=np.zeros_like(batch.step_ends))
    assert float(prm.step_bce_objective(CFG, params, no_steps)[0]) == 0.0


def _direct_scores(params, tokens_row, mask_row):
    """Independent reading: the unpadded sequence through the decoder, σ(h·w + b) in numpy at every position."""
    seq = jnp.asarray(tokens_row[mask_row > 0][None], jnp.int32)
    hidden, _ = models.forward(CFG, params["trunk"], seq, jnp.arange(seq.shape[1])[None], jnp.ones_like(seq))
    z = np.asarray(hidden[0], np.float64) @ np.asarray(params["head"]["kernel"], np.float64)
    return 1.0 / (1.0 + np.exp(-(z + float(params["head"]["bias"]))))


def test_step_scores_are_the_heads_sigmoid_at_the_step_ends(tokenizer):
    params, batch = _params(), _encode(tokenizer)
    got = np.asarray(prm.step_scores(CFG, params, batch.tokens, batch.attention_mask, batch.step_ends))
    for i in range(len(PROMPTS)):
        valid = np.flatnonzero(batch.attention_mask[i])
        direct = _direct_scores(params, batch.tokens[i], batch.attention_mask[i])
        ends = batch.step_ends[i, valid]
        np.testing.assert_allclose(got[i, valid][ends], direct[ends], rtol=2e-5, atol=2e-6)
        assert not got[i][~batch.step_ends[i]].any()
    assert len(set(np.round(got[batch.step_ends], 4))) > 4  # the scores differ: the test could fail


def test_scores_do_not_depend_on_the_other_rows_or_the_padding(tokenizer):
    """A row's step scores are the same alone, in another batch, with a wider prompt bucket (more left padding) and
    a longer completion budget (more right padding); the Scorer reads the RL step's [prompt | completion] layout."""
    params = _params()
    batch = _encode(tokenizer)
    scorer = prm.Scorer(CFG, params, {"objective": "process"})
    width = 24
    full = scorer(batch.tokens, batch.attention_mask, batch.step_ends[:, -width:])
    for i in range(len(PROMPTS)):
        alone = _encode(tokenizer, [PROMPTS[i]], [COMPLETIONS[i]], bucket=16, width=32)
        one = scorer(alone.tokens, alone.attention_mask, alone.step_ends[:, -32:])
        np.testing.assert_allclose(one[0][alone.step_ends[0, -32:]], full[i][batch.step_ends[i, -width:]],
                                   rtol=2e-5, atol=2e-6)
    reordered = _encode(tokenizer, PROMPTS[::-1] + ["9-9="], COMPLETIONS[::-1] + ["9-9=0;#0"])
    again = scorer(reordered.tokens, reordered.attention_mask, reordered.step_ends[:, -width:])
    np.testing.assert_allclose(again[:3][::-1], full, rtol=2e-5, atol=2e-6)


def test_step_auc_by_hand_and_against_its_definition():
    # sound {0.9, 0.8} vs flawed {0.8, 0.3}: 0.9 beats both, 0.8 ties 0.8 (½) and beats 0.3: 3.5 / 4
    assert prm.step_auc(np.array([0.9, 0.8, 0.3, 0.8]), np.array([1, 0, 0, 1])) == 0.875
    assert prm.step_auc(np.array([0.1, 0.9]), np.array([1, 0])) == 0.0
    assert math.isnan(prm.step_auc(np.array([0.1, 0.9]), np.array([1, 1])))
    rng = np.random.default_rng(0)
    for _ in range(20):
        scores = rng.integers(0, 5, size=30) / 4.0  # many ties
        labels = rng.integers(0, 2, size=30)
        pos, neg = scores[labels == 1], scores[labels == 0]
        brute = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
        assert prm.step_auc(scores, labels) == pytest.approx(brute)


def test_training_binary_writes_a_prm_that_loads_scores_and_beats_chance(tmp_path, tokenizer):
    """`objective="process"` on reference vs final-answer-corrupted solutions: the held-out step AUC rises above
    chance, the checkpoint loads as a PRM and reproduces the logged held-out step accuracy."""
    config = rm_config(objective="process", steps=200, eval_every=200)
    summary = reward_model_job.run(config, str(tmp_path))
    assert summary["objective"] == "process"
    assert summary["rm_eval_step_auc"] > 0.7 and summary["rm_eval_step_auc"] > summary["rm_eval_step_auc_init"]
    parsed = config_lib.parse(config)
    task = reward_model_job.tasks_lib.build(parsed.task, 0)
    run_tokenizer = reward_model_job.setup_lib.model_tokenizer(parsed, str(tmp_path), task)
    scorer = prm.Scorer.from_checkpoint(summary["checkpoint"], run_tokenizer, task.source.corpus(0)[0])
    held_out = process_sequences.step_sequences(parsed, run_tokenizer, task.source.test_examples(60),
                                               np.random.default_rng((0, reward_model_job._EVAL_STREAM)))
    again = prm.evaluate(scorer.cfg, scorer.params, held_out)
    assert again["eval/step_accuracy"] == summary["rm_eval_step_accuracy"]
    width = parsed.sampling.max_new_tokens
    scores = scorer(held_out.tokens, held_out.attention_mask, held_out.step_ends[:, -width:])
    ends = held_out.step_ends[:, -width:]
    assert scores.shape == ends.shape and ((scores[ends] > 0) & (scores[ends] < 1)).all() and not scores[~ends].any()


def test_scorer_refuses_an_outcome_reward_model(tmp_path, tokenizer):
    from tests.test_reward_model_rl import write_tiny_rm

    write_tiny_rm(str(tmp_path / "rm"))
    with pytest.raises(ValueError, match=r"config\.task\.step_reward_model=.*outcome reward model"):
        prm.Scorer.from_checkpoint(str(tmp_path / "rm"), tokenizer, "0123456789")
    with pytest.raises(ValueError, match=r"config\.task\.step_reward_model: .*holds no reward model"):
        prm.Scorer.from_checkpoint(str(tmp_path), tokenizer, "0123456789")


def write_tiny_prm(directory: str, seed: int = 0) -> None:
    """A random nano PRM with no tokenizer fingerprint: any run's task tokenizer reads it."""
    rm.save(directory, CFG, _params(seed), {"objective": prm.OBJECTIVE})


def test_config_errors_name_the_field(tmp_path):
    from configs import prm_clip

    c = prm_clip.get_config()
    c.task.step_reward_model = str(tmp_path / "missing")
    with pytest.raises(config_lib.ConfigError, match=r"task\.step_reward_model.*not a directory"):
        config_lib.parse(c)
    write_tiny_prm(str(tmp_path / "prm"))
    c.task.step_reward_model = str(tmp_path / "prm")
    config_lib.parse(c)
    c.task.step_reward = "none"
    c.rl.advantage = "grpo"
    c.rl.advantage_kwargs = {}
    with pytest.raises(config_lib.ConfigError, match=r"config\.task\.step_reward_model=.*set it"):
        config_lib.parse(c)


def test_the_rl_step_reads_the_prms_scores_in_place_of_the_judges_labels(tokenizer):
    """`rollouts.with_step_reward_model`: the scores that reach the step rewards are the PRM's at the step ends of the
    `[prompt | completion]` rows (one call for the batch), and its metrics compare them with the judge's labels."""
    from rl4llm.train import rollouts

    params, batch, width = _params(), _encode(tokenizer), 24
    scorer = prm.Scorer(CFG, params, {"objective": "process"})
    setup = rollouts.Setup(*[None] * 9, step_reward_model=scorer)
    ends, labels = batch.step_ends[:, -width:], batch.step_labels[:, -width:]
    metrics = {}
    got = rollouts.with_step_reward_model(setup, batch.tokens, batch.attention_mask, labels, ends, metrics)
    direct = np.asarray(prm.step_scores(CFG, params, batch.tokens, batch.attention_mask, batch.step_ends))
    np.testing.assert_allclose(got, direct[:, -width:], rtol=1e-6, atol=1e-7)
    s, ell = got[ends], labels[ends]
    assert metrics["prm/step_score_mean"] == pytest.approx(s.mean(), rel=1e-6)
    assert metrics["prm/judge_sound_frac"] == pytest.approx(6 / 8)
    assert metrics["prm/step_agreement"] == pytest.approx(np.mean((s > 0.5) == (ell > 0.5)))
    per_row = [got[i][ends[i]] for i in range(len(PROMPTS))]
    assert metrics["prm/score_sum"] == pytest.approx(np.mean([r.sum() for r in per_row]), rel=1e-6)
    assert metrics["prm/response_min_score"] == pytest.approx(np.mean([r.min() for r in per_row]), rel=1e-6)


def test_bad_input_gets_defined_scores_never_an_error(tokenizer):
    """An empty completion (its eos alone) has no step end: no score, and it adds nothing to the loss; an over-long
    one keeps its first tokens, the steps ending inside them scored, the cut segment on the last kept token."""
    long = ";".join(["1+1=2"] * 20) + ";#2"
    batch = _encode(tokenizer, ["1+1=", "1+1="], ["", long], width=16)
    assert not batch.step_ends[0].any()
    kept = tokenizer.decode(batch.tokens[1, -16:].tolist())
    assert batch.step_ends[1].sum() == kept.count(";") + 1  # the cut segment ends on the last kept token
    scores = prm.step_scores(CFG, _params(), batch.tokens, batch.attention_mask, batch.step_ends)
    assert np.isfinite(np.asarray(scores)).all() and not np.asarray(scores)[0].any()
    loss, metrics = prm.step_bce_objective(CFG, _params(), batch)
    assert np.isfinite(float(loss)) and float(metrics["steps"]) == batch.step_ends[1].sum()


def test_prm_sampled_from_a_policy_keeps_every_completion_with_the_judges_labels(tmp_path):
    """`reward_model.sample_from` with objective "process": every one of the policy's G completions of each prompt is
    a training sequence (the same samples as a regeneration with the same key), its steps labelled by the judge; the
    job trains on the pool and reports its counts."""
    from rl4llm.train import batches
    from rl4llm.train import evaluate as evaluate_lib

    c = rm_config(objective="process")
    config, policy, examples, key = sampling_policy(c, tmp_path)
    batch, metrics = process_sequences.policy_step_sequences(config, policy.setup.tokenizer, policy, examples, key)
    prompts = [e.prompt for e in examples for _ in range(4)]
    again = evaluate_lib.generate_scored(
        policy.setup.model_cfg, policy.params, policy.setup.tokenizer, prompts,
        [e.answer for e in examples for _ in range(4)], key, policy.setup.rollout_cfg, policy.setup.eval_spec,
        policy.setup.score_fn)
    policy.close()
    t = config.sampling.max_new_tokens
    expected = prm.encode_steps(policy.setup.tokenizer, JUDGE, prompts, list(again.texts),
                                prompt_bucket=config.sampling.prompt_bucket, completion_len=t)
    for field in ("tokens", "attention_mask", "step_ends", "step_labels"):
        np.testing.assert_array_equal(getattr(batch, field), getattr(expected, field))
    assert metrics["sequences"] == 24
    texts = batches.decode_completions(policy.setup.tokenizer, np.asarray(batch.tokens)[:, -t:],
                                       np.asarray(batch.attention_mask)[:, -t:] > 0)
    labels = [np.asarray(batch.step_labels)[i][np.asarray(batch.step_ends)[i]].tolist() for i in range(24)]
    judged = [[float(v) for v in JUDGE(p, text)] for p, text in zip(prompts, texts)]
    whole = [(row, judge) for row, judge in zip(labels, judged) if len(row) == len(judge)]  # no segment cut off
    assert whole and all(row == judge for row, judge in whole)
    assert metrics["sound_step_frac"] == pytest.approx(np.mean([v for row in labels for v in row]))
    summary = reward_model_job.run(c, str(tmp_path / "prm"))
    assert summary["pool/sequences"] == 24 and summary["held_out/sequences"] == 20 and summary["rm_steps"] == 3
