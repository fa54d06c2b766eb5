"""The critique judge (`rl4llm.verifiers.critique`, `config.generative_verifier.kind="critique"`, DeepSeek-GRM): the
strict score parser, the vote and the procedural critique by hand; sampled critiques at temperature 0 are a direct
greedy generation and do not depend on the batch or the padding; bad input gets a defined score; the reward-model job
trains a judge the RL run loads (`reward_model.objective="critique"`), whose voted scores vary and are the RL reward;
the recipe runs RL steps with it; the configs it cannot serve are refused naming the field. A random nano decoder
(tests/test_generative_verifier.py's) and a nano judge trained here for 80 updates are the judges (no downloads)."""

from __future__ import annotations

import dataclasses
import math
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm.config import sections
from rl4llm.data import arithmetic
from rl4llm.data import tasks as tasks_lib
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib
from rl4llm.verifiers import critique
from rl4llm.verifiers import generative
from tests.test_generative_verifier import TEMPLATE, nano_job, tokenizer, verifier_dir  # noqa: F401 (fixtures)


def section(checkpoint, **fields):
    fields = {"kind": "critique", "template": TEMPLATE, "max_length": 64, "max_critique_length": 16, **fields}
    return dataclasses.replace(sections.GenerativeVerifier(), checkpoint=checkpoint, **fields)


def make_judge(directory, tokenizer, alphabet=arithmetic.ALPHABET, **fields):  # noqa: F811
    return critique.CritiqueVerifier.from_config(section(directory, **fields), tokenizer, alphabet)


# ------------------------------------------------------------------------------ pure functions by hand


@pytest.mark.parametrize("text, finished, expected", [
    ("+5-1=0;1;1#4", True, 4),  # a whole critique
    ("#1", True, 1), ("#10", True, 10),  # the range's ends
    ("+5-1=1;1;1#10", False, None),  # cut at max_critique_length (no stop token): not parsable
    ("#0", True, None), ("#11", True, None), ("#-3", True, None), ("#07", True, None),  # out of range / not canonical
    ("+5-1=1;1;1", True, None), ("", True, None), ("=;;0*", True, None),  # missing score, empty, garbage
    ("#7#8", True, None), ("=1#4;1#4", True, None),  # two score markers: ambiguous, neither counts
    ("#7 ", True, None), ("#7;", True, None), ("# 7", True, None),  # anything after / inside the score
])
def test_the_parser_reads_exactly_one_score_in_range_at_the_end(text, finished, expected):
    assert critique.parse_score(text, finished) == expected


def test_the_vote_sums_the_k_scores_and_counts_an_unparsable_one_as_the_minimum():
    # k = 1: the score itself; (S - 1) / 9
    votes = critique.vote(np.array([[1], [6], [10]]), np.array([[True], [True], [False]]))
    np.testing.assert_array_equal(votes, [1, 6, 1])
    np.testing.assert_allclose(critique.normalised_reward(votes, 1), [0.0, 5 / 9, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(critique.vote_verdict(votes, 1), [False, True, False])
    # k = 3: 7 + 9 + 1 (unparsable: its 5 is not read) = 17 in [3, 30]; (17 - 3) / 27
    scores, parsed = np.array([[7, 9, 5], [10, 10, 10], [5, 6, 6]]), np.array([[1, 1, 0], [1, 1, 1], [1, 1, 1]], bool)
    votes = critique.vote(scores, parsed)
    np.testing.assert_array_equal(votes, [17, 30, 17])
    np.testing.assert_allclose(critique.normalised_reward(votes, 3), [14 / 27, 1.0, 14 / 27], rtol=1e-6)
    np.testing.assert_array_equal(critique.vote_verdict(votes, 3), [True, True, True])  # 17 > 16.5
    np.testing.assert_array_equal(critique.vote_verdict(np.array([16]), 3), [False])
    # order-invariant, and k identical samples order completions as one does (the digest's unit test)
    assert critique.vote(scores[:, ::-1], parsed[:, ::-1]).tolist() == votes.tolist()
    one = np.array([[3], [8], [5]])
    np.testing.assert_array_equal(np.argsort(critique.vote(np.repeat(one, 4, 1), np.ones((3, 4), bool))),
                                  np.argsort(critique.vote(one, np.ones((3, 1), bool))))


@pytest.mark.parametrize("completion, reference, text, score", [
    ("7+5=12;12-1=11;#11", "11", "+5-1=1;1;1#10", 10),  # sound and right: 1 + 4 + 5
    ("7+5=13;13-1=12;#12", "11", "+5-1=0;1;1#4", 4),  # a wrong step carried on, wrong answer: f = 2/3, 1 + 3
    ("7+5=13;13-1=12;#11", "11", "+5-1=0;1;0#7", 7),  # a right answer from flawed steps: f = 1/3, 1 + 1 + 5
    ("7+5=12;12-1=11;#12", "11", "+5-1=1;1;0#4", 4),  # the final answer off by one: f = 2/3 rounds to 3
    ("7+5=12;#11", "11", "+5-1=1;0#8", 8),  # a skipped step: f = 1/2, 1 + 2 + 5 (round half up)
    ("", "11", "+5-1=0#1", 1),  # empty: one unsound segment, no answer
    ("garbage#11", "11", "+5-1=0#6", 6),  # no steps but the right answer
])
def test_the_procedural_critique_by_hand(completion, reference, text, score):
    assert critique.critique_text("7+5-1=", completion, reference) == (text, score)
    assert critique.parse_score(text) == score


def test_critique_score_formula():
    assert critique.critique_score([], False) == 1 and critique.critique_score([True] * 4, True) == 10
    assert critique.critique_score([True, False], False) == 3  # 1 + round(2) + 0
    assert critique.critique_score([True, True, True, False], True) == 9  # 1 + 3 + 5


# ------------------------------------------------------------------------------ sampling


GREEDY_LENGTH = 96  # >= [bos] + the longest judge text here (64) + the critique budget (16)


def greedy_direct(judge, text: str) -> str:
    """The judge's greedy continuation of [bos] + text, one full models.apply (no cache) per token, until a stop
    token. The sequence is right-padded to one length (`GREEDY_LENGTH`, so one compiled forward serves every token):
    the attention is causal, so the logits at the last real token do not see the padding after it."""
    ids = [judge.tokenizer.bos_id] + judge.tokenizer.encode(text)
    out = []
    assert len(ids) + judge.sampling_cfg.max_new_tokens <= GREEDY_LENGTH
    apply = jax.jit(models.apply, static_argnums=0)
    for _ in range(judge.sampling_cfg.max_new_tokens):
        n = len(ids) + len(out)
        x = jnp.asarray([ids + out + [judge.tokenizer.pad_id] * (GREEDY_LENGTH - n)])
        mask = (jnp.arange(GREEDY_LENGTH) < n)[None].astype(jnp.int32)
        logits, _ = apply(judge.cfg, judge.params, x, jnp.arange(GREEDY_LENGTH)[None], mask)
        out.append(int(jnp.argmax(logits[0, n - 1])))
        if out[-1] in judge.sampling_cfg.stop_token_ids:
            return judge.tokenizer.decode(out[:-1])
    return judge.tokenizer.decode(out)


def test_greedy_critiques_are_a_direct_greedy_generation(verifier_dir, tokenizer):  # noqa: F811
    judge = make_judge(verifier_dir, tokenizer)
    rows = (["3+4=", "12+9="], ["7", "21"], ["3+4=7#7", "12+9=21;#21"])
    out = judge(*rows, jax.random.key(0))
    for i, (q, r, c) in enumerate(zip(*rows)):
        assert out.texts[i] == greedy_direct(judge, f"{q}{c};{r}#")
    # the random judge writes garbage: every critique is unparsable and votes the minimum
    assert not out.parsed.any() and out.votes.tolist() == [1, 1] and out.rewards.tolist() == [0.0, 0.0]


def test_a_rows_critiques_do_not_depend_on_the_other_rows_or_its_padding(verifier_dir, tokenizer):  # noqa: F811
    judge = make_judge(verifier_dir, tokenizer)
    row = ("3+4=", "7", "3+4=7#7")
    alone = judge(*[[x] for x in row], jax.random.key(0)).texts
    others = [("12+9=", "21", "12+9=21;" * 4 + "#21"), ("1+1=", "2", ""), ("9+9=", "18", "9+9=17#17")]
    for batch in ([row] + others, others[1:] + [row] + others[:1]):
        assert judge(*map(list, zip(*batch)), jax.random.key(1)).texts[batch.index(row)] == alone[0]
    tokens, mask, _ = judge.encode(*[[x] for x in row])
    wide = np.pad(tokens, ((0, 0), (32, 0)), constant_values=tokenizer.pad_id), np.pad(mask, ((0, 0), (32, 0)))
    texts, _, _ = critique.sample_critiques(judge.cfg, judge.params, judge.tokenizer, *wide, 1, judge.sampling_cfg,
                                            jax.random.key(2))
    assert texts == alone
    # k samples at temperature > 0: row n·k + j is text n's j-th; the k rows of one text may differ
    hot = dataclasses.replace(judge, samples=3, sampling_cfg=dataclasses.replace(judge.sampling_cfg, temperature=1.0))
    out = hot(*map(list, zip(row, others[0])), jax.random.key(3))
    assert len(out.texts) == 6 and out.scores.shape == (2, 3) and np.all(out.votes == 3)


def test_bad_input_gets_a_defined_score(verifier_dir, tokenizer):  # noqa: F811
    judge = make_judge(verifier_dir, tokenizer, max_length=16)
    long = "1+2=3;" * 200 + "#3"
    out = judge(["1+2=", "1+2=", "1+2="], ["3", "3", "3"], ["", long, "1+2=3#3"], jax.random.key(0))
    assert out.truncated.tolist() == [False, True, False]
    assert np.all(out.votes == critique.MIN_SCORE) and np.all(out.rewards == 0.0)
    # garbage, two scores, an unfinished critique and a row without a judge text: each votes the minimum
    texts = ["=1#9", "#x", "#3#9", "=1#10", "=0#2", "#5", "#7", "#8"]  # 4 completions x k = 2
    read = critique.read_critiques(texts, np.array([1, 1, 1, 0, 1, 1, 1, 1], bool), np.full(8, 5),
                                   np.array([True, True, True, False]), np.zeros(4, bool), 2)
    assert read.scores.tolist() == [[9, 1], [1, 1], [2, 5], [1, 1]]
    assert read.votes.tolist() == [10, 2, 7, 2] and read.parsed.sum() == 3
    metrics = critique.critique_metrics(read, np.array([1.0, 0.0, 0.0, 1.0]))
    assert metrics["verifier/parse_failures"] == 5 and metrics["verifier/parse_fail_frac"] == 5 / 8
    assert metrics["verifier/agreement"] == 0.5  # every vote <= 11 = 5.5 k says "wrong": rows 1 and 2 agree
    assert metrics["verifier/unfinished_frac"] == 1 / 8


# ------------------------------------------------------------------------------ the job, the RL reward, configs


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A nano critique judge trained by the reward-model job (80 updates): its summary, workdir, and the job's
    tokenizer with the alphabet of its fingerprint (what an RL run on the same task reads it with)."""
    from rl4llm.train import reward_model_job

    workdir = tmp_path_factory.mktemp("critique_rm")
    c = nano_job("")  # the RL test's task, so its run's tokenizer is the judge's
    c.reward_model.update(dict(objective="critique", steps=80, batch_size=32, learning_rate=1e-2, eval_pairs=16,
                               eval_every=80, corruption="final_answer"))
    c.log_every = 40
    c.generative_verifier.update({"template": TEMPLATE, "max_length": 64, "max_critique_length": 16})
    summary = reward_model_job.run(c, str(workdir))
    parsed = config_lib.parse(c)
    task = tasks_lib.build(parsed.task, 0)
    return types.SimpleNamespace(summary=summary, workdir=workdir, alphabet=task.source.corpus(0)[0],
                                 tokenizer=setup_lib.model_tokenizer(parsed, str(workdir), task))


def test_the_reward_model_job_trains_a_critique_judge_the_rl_run_loads(trained):
    summary, workdir, tokenizer = trained.summary, trained.workdir, trained.tokenizer
    records = metrics_lib.read_metrics(str(workdir), "rm")
    evals = [r for r in records if "eval/verdict_accuracy" in r]
    assert [r["step"] for r in evals] == [0, 80]
    assert evals[0]["eval/parse_fail_frac"] == 1.0  # at init it writes no critique
    assert evals[-1]["eval/parse_fail_frac"] < 0.2 and evals[-1]["eval/score_exact"] > 0.3
    assert evals[-1]["eval/loss"] < evals[0]["eval/loss"] / 4
    assert summary["objective"] == "critique" and summary["rm_eval_verdict_accuracy"] == evals[-1][
        "eval/verdict_accuracy"]
    judge = make_judge(summary["checkpoint"], tokenizer, trained.alphabet)
    out = judge(["3+4="], ["7"], ["3+4=7;#7"], jax.random.key(0))
    # the critique's form: a principle (an operation), a verdict per segment, a score
    assert out.parsed.all() and re.fullmatch(r"[-+*][0-9]+=[01](;[01])*#[0-9]+", out.texts[0]), out.texts
    with pytest.raises(config_lib.ConfigError, match="generative_verifier.kind='p_yes'.*objective='critique'"):
        generative.Verifier.from_config(dataclasses.replace(section(summary["checkpoint"]), kind="p_yes",
                                                            yes_token="1", no_token="0"), tokenizer,
                                        trained.alphabet)


def test_the_voted_scores_vary_and_are_the_rl_reward(trained):
    """`rollouts.with_verifier` (what the RL step calls) with kind critique: the reward is weight x (S_vote - k)/9k
    of the judge's own critiques, 'add' adds the rule reward, and the scores differ between completions."""
    summary = trained.summary
    judge = make_judge(summary["checkpoint"], trained.tokenizer, trained.alphabet, samples=3, temperature=1.0)
    questions, answers = ["3+4="] * 3 + ["5+2="] * 3, ["7"] * 3 + ["7"] * 3
    texts = ["3+4=7;#7", "3+4=8;#8", "3+4=7;#9", "5+2=7;#7", "5+2=6;#6", "5+2=7;#7"]
    rule, groups = np.array([1.0, 0, 0, 1, 0, 1]), np.repeat([0, 1], 3)
    key = jax.random.key(4)
    direct = judge(questions, answers, texts, key)
    assert len(set(direct.votes.tolist())) > 1, direct.texts  # the mechanism: scores vary ...

    def rewards(**fields):
        config = config_lib.parse(nano_job(summary["checkpoint"], kind="critique", samples=3, temperature=1.0,
                                           max_critique_length=16, **fields))
        metrics = {}
        out = rollouts.with_verifier(config, types.SimpleNamespace(verifier=judge), questions, answers, texts, rule,
                                     rule, groups, metrics, key)
        return out, metrics

    out, metrics = rewards(weight=2.0)
    np.testing.assert_allclose(out, 2 * (direct.votes - 3) / 27, rtol=1e-6)  # ... and enter the reward
    assert metrics["verifier/group_std"] > 0 and metrics["reward/exact_answer"] == 0.5
    assert metrics["verifier/score_mean"] == pytest.approx(direct.scores.mean())
    assert 0 <= metrics["verifier/agreement"] <= 1 and metrics["verifier/parse_failures"] == (~direct.parsed).sum()
    np.testing.assert_allclose(rewards(mode="add", weight=0.5)[0], rule + 0.5 * direct.rewards, rtol=1e-6)


def test_the_recipe_runs_rl_steps_with_the_trained_judge(trained, tmp_path):
    from configs import grpo_critique_verifier

    summary = trained.summary
    c = nano_job(summary["checkpoint"])
    c.rl.steps = 2
    recipe = grpo_critique_verifier.get_config().generative_verifier
    c.generative_verifier.update({k: recipe[k] for k in ("kind", "samples", "temperature", "mode", "weight")})
    c.generative_verifier.max_critique_length = 16
    job.run(c, str(tmp_path / "job"))
    records = metrics_lib.read_metrics(str(tmp_path / "job"), "rl")
    assert [r["step"] for r in records] == [1, 2]
    for r in records:  # logged every step, finite
        for key in ("verifier/parse_failures", "verifier/score_mean", "verifier/agreement", "verifier/reward_mean",
                    "verifier/group_std"):
            assert key in r and math.isfinite(r[key]), key
        assert 1 <= r["verifier/score_mean"] <= 10
        assert r["reward"] == pytest.approx(r["verifier/reward_mean"], abs=1e-5)  # mode replace, weight 1


def test_configs_the_critique_judge_cannot_serve_are_refused(verifier_dir, tokenizer):  # noqa: F811
    def errors(**fields):
        with pytest.raises(config_lib.ConfigError) as e:
            config_lib.parse(nano_job(verifier_dir, **fields))
        return str(e.value)

    assert "config.generative_verifier.samples=4: at temperature 0" in errors(kind="critique", samples=4)
    assert "config.generative_verifier.hard=True" in errors(kind="critique", hard=True)
    assert "config.generative_verifier.samples=2: samples critiques" in errors(samples=2)  # kind p_yes
    assert "config.generative_verifier.temperature=0.5" in errors(temperature=0.5)
    assert "config.generative_verifier.kind" in errors(kind="critic")
    assert "config.generative_verifier.max_critique_length" in errors(kind="critique", max_critique_length=0)
    config_lib.parse(nano_job(verifier_dir, kind="critique", samples=4, temperature=1.0, yes_token="x",
                              no_token="x"))  # the P(Yes) tokens are not read
    with pytest.raises(config_lib.ConfigError, match="generative_verifier.template"):
        make_judge(verifier_dir, tokenizer, template="Is {completion} right?")  # letters: unk
