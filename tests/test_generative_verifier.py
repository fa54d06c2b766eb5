"""The generative verifier (`rl4llm.verifiers.generative`, `config.generative_verifier`): its P(Yes) equals a
direct forward of the same decoder on the same text, a row's score is independent of the other rows and of its
padding, empty and over-long completions get a defined score (the cut documented: the completion's start first),
and the configs it cannot serve are refused naming the field. A randomly initialised nano decoder written to a tmp
directory is the verifier (no downloads). A recipe's RL run with it is tests/test_recipes.py's
'grpo_soft_verifier'."""

from __future__ import annotations

import dataclasses
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import reward_model
from rl4llm.config import sections
from rl4llm.data import arithmetic
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import rollouts
from rl4llm.verifiers import generative

# Every character in the arithmetic alphabet, so the task's char tokenizer reads the template; "1" / "0" are the
# paper's judgement tokens.
TEMPLATE = "{question}{completion};{reference}#"
VOCAB = 64  # >= the arithmetic char tokenizer's ~20 ids


def write_tiny_verifier(directory: str, seed: int = 0) -> None:
    """A random nano decoder saved as a verifier directory (no tokenizer fingerprint: any run's char tokenizer)."""
    cfg = models.get_config("nano", vocab_size=VOCAB)
    generative.save(directory, cfg, models.init_params(cfg, jax.random.key(seed)))


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("tok"))
    return sentencepiece_tokenizer.get_or_train_task_tokenizer(workdir, arithmetic.ArithmeticConfig())


@pytest.fixture(scope="module")
def verifier_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("verifier") / "v")
    write_tiny_verifier(directory)
    return directory


def section(checkpoint, **fields):
    fields = {"template": TEMPLATE, "yes_token": "1", "no_token": "0", "max_length": 64, **fields}
    return dataclasses.replace(sections.GenerativeVerifier(), checkpoint=checkpoint, **fields)


def make_verifier(verifier_dir, tokenizer, **fields):
    return generative.Verifier.from_config(section(verifier_dir, **fields), tokenizer, arithmetic.ALPHABET)


def direct_distribution(verifier, text: str) -> np.ndarray:
    """softmax of the decoder's logits after [bos] + text, unpadded, computed here with models.apply."""
    ids = jnp.asarray([[verifier.tokenizer.bos_id] + verifier.tokenizer.encode(text)])
    logits, _ = jax.jit(models.apply, static_argnums=0)(verifier.cfg, verifier.params, ids,
                                                         jnp.arange(ids.shape[1])[None], jnp.ones_like(ids))
    z = np.asarray(logits[0, -1], np.float64)
    return np.exp(z - z.max()) / np.exp(z - z.max()).sum()


def test_p_yes_equals_a_direct_forward_of_the_same_text(verifier_dir, tokenizer):
    # texts of one length: one compiled direct forward
    questions, references, completions = ["3+4=", "5+2="], ["7", "7"], ["3+4=7#7", "5+2=8#8"]
    full = make_verifier(verifier_dir, tokenizer)
    yes, no = tokenizer.encode("1")[0], tokenizer.encode("0")[0]
    p_full, mass, truncated = full(questions, references, completions)
    p_pair, _, _ = make_verifier(verifier_dir, tokenizer, normalisation="yes_no")(questions, references, completions)
    for i, (q, r, c) in enumerate(zip(questions, references, completions)):
        p = direct_distribution(full, f"{q}{c};{r}#")
        assert p_full[i] == pytest.approx(p[yes], rel=1e-4, abs=1e-7)
        assert mass[i] == pytest.approx(p[yes] + p[no], rel=1e-4, abs=1e-7)
        assert p_pair[i] == pytest.approx(p[yes] / (p[yes] + p[no]), rel=1e-4)
    assert not truncated.any()
    assert np.all(p_full < p_pair)  # the full softmax spreads mass over the other ~60 ids
    # the training objective on the same texts, labelled correct / wrong: −mean[log P(Yes)_0 + log P(No)_1]
    tokens, mask, _ = full.encode(questions, references, completions)
    batch = reward_model.LabelBatch(tokens=tokens, attention_mask=mask, labels=np.array([1.0, 0.0], np.float32))
    loss, metrics = generative.judge_objective(full.cfg, yes, no, full.params, batch)
    p0, p1 = (direct_distribution(full, f"{q}{c};{r}#") for q, r, c in zip(questions, references, completions))
    assert float(loss) == pytest.approx(-(np.log(p0[yes]) + np.log(p1[no])) / 2, rel=1e-4)
    assert float(metrics["accuracy"]) == ((p0[yes] > p0[no]) + (p1[no] > p1[yes])) / 2


def test_a_rows_score_does_not_depend_on_the_other_rows_or_its_padding(verifier_dir, tokenizer):
    verifier = make_verifier(verifier_dir, tokenizer)
    row = ("3+4=", "7", "3+4=7#7")
    alone = verifier(*[[x] for x in row])[0][0]
    others = [("12+9=", "21", "12+9=21;" * 5 + "#21"), ("1+1=", "2", ""), ("9+9=", "18", "9+9=17#17")]
    # three compositions of 4 rows with the long one (one compiled width), the row in three places
    for batch in ([row] + others, others[1:] + [row] + others[:1], [others[2], others[0], row, others[2]]):
        scores = verifier(*map(list, zip(*batch)))[0]
        assert scores[batch.index(row)] == pytest.approx(alone, rel=1e-5)
    tokens, mask, _ = verifier.encode(*[[x] for x in row])
    real = tokens[0][mask[0] == 1]
    wide = (np.pad(tokens, ((0, 0), (40, 0)), constant_values=tokenizer.pad_id), np.pad(mask, ((0, 0), (40, 0))))
    right = (np.full((1, 72), tokenizer.pad_id, np.int32), np.zeros((1, 72), np.int32))
    right[0][0, :real.size], right[1][0, :real.size] = real, 1
    for padded in (wide, right):
        assert verifier.probabilities(*padded)[0][0] == pytest.approx(alone, rel=1e-5)


def test_truncation_cuts_the_completions_start_then_the_texts_left(tokenizer):
    pieces = [("", "question"), ("=", "completion"), ("#", "reference")]
    ids, cut = generative.judge_ids(tokenizer, pieces, "12", "5", "3456789", max_length=9)
    # [bos] 1 2 = 3 4 5 6 7 8 9 # 5 is 13 tokens: the completion loses its first 4
    assert cut and len(ids) == 9 and ids[0] == tokenizer.bos_id and tokenizer.decode(ids) == "12=789#5"
    ids, cut = generative.judge_ids(tokenizer, pieces, "123456789", "5", "34", max_length=5)
    # without the completion still 13 tokens: its last 5 are kept
    assert cut and tokenizer.decode(ids) == "89=#5" and ids[0] != tokenizer.bos_id
    ids, cut = generative.judge_ids(tokenizer, pieces, "12", "5", "", max_length=9)
    assert not cut and tokenizer.decode(ids) == "12=#5" and len(ids) == 6


def test_empty_and_over_long_completions_get_a_defined_score(verifier_dir, tokenizer):
    verifier = make_verifier(verifier_dir, tokenizer, max_length=16)
    long = "1+2=3;" * 200 + "#3"
    p, mass, truncated = verifier(["1+2=", "1+2=", "1+2="], ["3", "3", "3"], ["", long, "1+2=3#3"])
    assert np.all(np.isfinite(p)) and np.all((p > 0) & (p < 1)) and np.all(mass <= 1 + 1e-6)
    assert truncated.tolist() == [False, True, False]
    tokens, mask, _ = verifier.encode(["1+2="], ["3"], [long])
    assert tokens.shape[1] == 16 and mask.all()  # cut to max_length: the completion's end and the template's tail
    assert tokenizer.decode(tokens[0].tolist()) == "1+2=" + long[-8:] + ";3#"  # 16 - bos - 7 template tokens
    nothing = verifier.probabilities(np.full((1, 32), tokenizer.pad_id, np.int32), np.zeros((1, 32), np.int32))
    assert nothing[0][0] == 0.0 and nothing[1][0] == 0.0  # a row without any token scores 0


def test_hard_verdict_thresholds_p_yes():
    np.testing.assert_array_equal(generative.hard_verdict(np.array([0.2, 0.5, 0.9]), 0.5), [0.0, 1.0, 1.0])


def test_what_the_verifier_cannot_read_is_refused_naming_the_field(verifier_dir, tokenizer, tmp_path):
    with pytest.raises(ValueError, match="generative_verifier.yes_token='Yes'"):
        make_verifier(verifier_dir, tokenizer, yes_token="Yes")  # the char vocabulary has no letters
    with pytest.raises(ValueError, match="generative_verifier.no_token='00'"):
        make_verifier(verifier_dir, tokenizer, no_token="00")  # two tokens
    with pytest.raises(ValueError, match="generative_verifier.template"):
        make_verifier(verifier_dir, tokenizer, template="Is {completion} right?")  # letters: unk
    outcome_rm = str(tmp_path / "rm")
    cfg = models.get_config("nano", vocab_size=VOCAB)
    reward_model.save(outcome_rm, cfg, reward_model.init_params(cfg, jax.random.key(0)))
    with pytest.raises(ValueError, match="generative_verifier.checkpoint=.*holds no generative verifier"):
        make_verifier(outcome_rm, tokenizer)
    with pytest.raises(ValueError, match="generative_verifier.checkpoint.*reward_model.json missing"):
        make_verifier(str(tmp_path), tokenizer)


def nano_job(verifier_dir: str, **fields):
    """The nano job of tests/test_reward_model_rl.py (no RM), one RL step, scored by the verifier in `verifier_dir`."""
    from tests.test_reward_model_rl import nano_job as rm_nano_job

    c = rm_nano_job("")
    c.rl.steps = 1
    c.generative_verifier.update({"checkpoint": verifier_dir, "template": TEMPLATE, "yes_token": "1",
                                  "no_token": "0", "max_length": 64, **fields})
    return c


def test_configs_the_verifier_cannot_serve_are_refused(verifier_dir, tmp_path):
    c = nano_job(str(tmp_path / "missing"))
    with pytest.raises(config_lib.ConfigError, match="config.generative_verifier.checkpoint"):
        config_lib.parse(c)
    c = nano_job(verifier_dir, template="{question}{answer}", hf_checkpoint=verifier_dir)
    c.reward_model.checkpoint = verifier_dir
    c.task.extra_rewards = "format_arithmetic:0.5"
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    for text in ("config.generative_verifier.template", "unknown: ['answer']", "unset the other",
                 "config.reward_model.checkpoint", "config.generative_verifier.mode='replace'"):
        assert text in str(e.value), text


def test_the_rl_reward_is_the_verifiers_score_with_its_metrics(verifier_dir, tokenizer):
    """`rollouts.with_verifier` (what the RL step calls): 'replace' with weight 2 is 2 x P(Yes), 'add' the rule
    reward plus it, hard the thresholded verdict; the metrics are the batch's, the group spread by hand."""
    v = make_verifier(verifier_dir, tokenizer)
    questions, answers = ["3+4="] * 2 + ["5+5="] * 2, ["7", "7", "10", "10"]
    texts, rule, groups = ["3+4=7#7", "3+4=8#8", "5+5=10#10", "5+5=10#10"], np.array([1.0, 0.0, 1.0, 1.0]), \
        np.array([0, 0, 1, 1])
    p, mass, _ = v(questions, answers, texts)

    def rewards(**fields):
        config = config_lib.parse(nano_job(verifier_dir, **fields))
        metrics = {}
        out = rollouts.with_verifier(config, types.SimpleNamespace(verifier=v), questions, answers, texts, rule,
                                     rule, groups, metrics)
        return out, metrics

    out, metrics = rewards(weight=2.0)
    np.testing.assert_allclose(out, 2 * p, rtol=1e-5)
    assert metrics["verifier/p_yes_mean"] == pytest.approx(p.mean(), rel=1e-5)
    assert metrics["verifier/group_std"] == pytest.approx(abs(p[0] - p[1]) / 4, rel=1e-4)  # group 2: equal texts
    assert metrics["verifier/group_std"] > 0 and metrics["verifier/yes_no_mass"] == pytest.approx(mass.mean())
    assert metrics["verifier/truncated_frac"] == 0.0 and metrics["reward/exact_answer"] == 0.75
    np.testing.assert_allclose(rewards(mode="add", weight=0.5)[0], rule + 0.5 * p, rtol=1e-5)
    threshold = float(np.sort(p)[1]) + 1e-9  # two rows' P(Yes) above it
    np.testing.assert_array_equal(rewards(hard=True, threshold=threshold)[0], (p >= threshold).astype(np.float32))


def test_the_reward_model_job_trains_a_judge_the_rl_run_can_load(tmp_path):
    """objective='judge': the nano decoder learns the verdict token of reference vs corrupted solutions (held-out
    P(Yes | reference) − P(Yes | wrong) grows), and the directory it writes is a verifier on the run's tokenizer."""
    from rl4llm.data import tasks as tasks_lib
    from rl4llm.train import reward_model_job
    from rl4llm.train import setup as setup_lib
    from tests.test_train_reward_model import rm_config

    c = rm_config(objective="judge", steps=40, eval_every=40, learning_rate=1e-2)
    c.log_every = 20
    c.generative_verifier.update({"template": TEMPLATE, "yes_token": "1", "no_token": "0", "max_length": 64})
    summary = reward_model_job.run(c, str(tmp_path))
    records = metrics_lib.read_metrics(str(tmp_path), "rm")
    evals = [r for r in records if "eval/margin" in r]
    assert [r["step"] for r in evals] == [0, 40]
    assert evals[-1]["eval/margin"] > evals[0]["eval/margin"] + 0.01
    losses = [r["loss"] for r in records if "loss" in r]
    assert len(losses) == 2 and losses[-1] < losses[0]
    parsed = config_lib.parse(c)
    task = tasks_lib.build(parsed.task, 0)
    run_tokenizer = setup_lib.model_tokenizer(parsed, str(tmp_path), task)
    verifier = generative.Verifier.from_config(section(summary["checkpoint"]), run_tokenizer,
                                               task.source.corpus(0)[0])
    p, _, _ = verifier(["3+4="], ["7"], ["3+4=7;#7"])
    assert 0 < p[0] < 1


def test_an_hf_judge_scores_with_its_own_tokenizer(tmp_path):
    """hf_checkpoint: the judge's params come from its safetensors and its text from its tokenizer.json (a BPE one,
    other than the run's): P(Yes) equals the original params' forward on the ids of its pieces."""
    from tests.test_hf_train import _hf_model_dir

    directory = _hf_model_dir(tmp_path / "hf")
    v = dataclasses.replace(sections.GenerativeVerifier(), hf_checkpoint=directory, yes_token="1", no_token="0",
                            template="{question} {completion}\n#### {reference}\nIs the answer correct? Answer:")
    verifier = generative.Verifier.from_config(v, None, "")
    question, completion, reference = "Tom has 3 apples and buys 4 more.", "3 + 4 = 7", "7"
    p, _, _ = verifier([question], [reference], [completion])
    tok = verifier.tokenizer
    ids = [i for text in (question, " ", completion, "\n#### ", reference, "\nIs the answer correct? Answer:")
           for i in tok.encode(text)]  # no bos in this tokenizer: the pieces one by one
    params = models.init_params(verifier.cfg, jax.random.key(3))  # what _hf_model_dir saved
    logits, _ = jax.jit(models.apply, static_argnums=0)(verifier.cfg, params, jnp.asarray([ids]),
                                                     jnp.arange(len(ids))[None], jnp.ones((1, len(ids)), jnp.int32))
    z = np.asarray(logits[0, -1], np.float64)
    expected = np.exp(z[tok.encode("1")[0]] - z.max()) / np.exp(z - z.max()).sum()
    assert p[0] == pytest.approx(expected, rel=1e-4)
    with pytest.raises(config_lib.ConfigError, match="generative_verifier.yes_token='Yes'"):
        generative.Verifier.from_config(dataclasses.replace(v, yes_token="Yes"), None, "")
