"""Evaluation metrics (pass@k against enumeration, avg@k, maj@k, answer entropy, length statistics) and the
standalone `experiments/evaluate.py` on a tiny trained run."""

import itertools
import math
import subprocess
import sys

import numpy as np
import pytest

from rl4llm.rewards import arithmetic as arithmetic_reward
from rl4llm.train import evaluate
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import runs
from rl4llm.train import job
from tests.test_train import tiny_config


def _pass_at_k_by_enumeration(n: int, c: int, k: int) -> float:
    """The fraction of the C(n, k) k-subsets of n samples (c of them correct) holding a correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_equals_enumeration_over_all_k_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert evaluate.pass_at_k(n, c, k) == pytest.approx(_pass_at_k_by_enumeration(n, c, k), abs=1e-12), (c, k)


def test_mean_pass_at_k_averages_prompts():
    correct = np.array([[1, 0, 0, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 0]], bool)  # c = 2, 0, 4 of n = 5
    for k in (1, 2, 3):
        expected = np.mean([_pass_at_k_by_enumeration(5, c, k) for c in (2, 0, 4)])
        assert evaluate.mean_pass_at_k(correct, k) == pytest.approx(expected)
    # k = 2: prompt 0: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7; prompt 1: 0; prompt 2: 1 (n - c = 1 < 2) -> 1.7 / 3.
    assert evaluate.mean_pass_at_k(correct, 2) == pytest.approx(1.7 / 3)


def test_avg_at_k_hand_case():
    correct = np.array([[1, 0, 1, 1], [0, 0, 0, 1]], bool)
    assert evaluate.avg_at_k(correct, 1) == 0.5  # first samples: 1, 0
    assert evaluate.avg_at_k(correct, 2) == 0.25  # (1 + 0 + 0 + 0) / 4
    assert evaluate.avg_at_k(correct, 4) == 0.5  # (3 + 1) / 8
    with pytest.raises(ValueError, match="k=5"):
        evaluate.avg_at_k(correct, 5)


def test_majority_index_tie_breaking():
    assert evaluate.majority_index(["b", "a", "a", "b"]) == 0  # 2-2 tie: "b" appears first
    assert evaluate.majority_index(["a", "b", "b", "a"]) == 0
    assert evaluate.majority_index(["a", "b", "b"]) == 1  # "b" wins 2-1; its first sample is index 1
    assert evaluate.majority_index([None, None, "x", "y", "y"]) == 3  # None does not vote
    assert evaluate.majority_index([None, "y", "x", None]) == 1  # 1-1 tie between answers: "y" seen first
    assert evaluate.majority_index([None, None]) is None
    assert evaluate.majority_index([]) is None


def test_maj_at_k_hand_case():
    answers = [["3", "5", "5", "3"], ["7", None, None, "8"], [None, None, None, None]]
    correct = np.array([[1, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]], bool)  # references: "3", "8", anything
    # k=4: prompt 0 ties 3:2 vs 5:2 -> "3" (first) -> right; prompt 1 ties 7:1 vs 8:1 -> "7" -> wrong;
    # prompt 2 has no answer -> wrong. 1/3.
    assert evaluate.maj_at_k(answers, correct, 4) == pytest.approx(1 / 3)
    # k=3: prompt 0: "5" 2 vs "3" 1 -> wrong; prompt 1: only "7" -> wrong. 0.
    assert evaluate.maj_at_k(answers, correct, 3) == 0.0
    # k=1: the first sample's answer: right, wrong, none. 1/3.
    assert evaluate.maj_at_k(answers, correct, 1) == pytest.approx(1 / 3)
    # Votes count canonical answers: "#003" and "#03" are the arithmetic extractor's "3", so "3" beats "5"
    # 3-2 although its texts all differ; the vote is judged by the reward of its first sample ("#003").
    texts = ["#5", "#003", "#5", "#03", "#3"]
    extracted = [[arithmetic_reward.extract_answer(t) for t in texts]]
    graded = np.array([[arithmetic_reward.score(t, "3") == 1.0 for t in texts]])
    assert evaluate.maj_at_k(extracted, graded, 5) == 1.0


def test_answer_entropy_hand_case():
    assert evaluate.answer_entropy([["a", "a", "a"]]) == 0.0  # unanimous
    assert evaluate.answer_entropy([[None, None]]) == 0.0  # unanimous: no answer
    assert evaluate.answer_entropy([["a", "b", "c", "d"]]) == pytest.approx(math.log(4))  # all distinct
    # p = (1/2, 1/4, 1/4) with "no answer" its own outcome: H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2.
    assert evaluate.answer_entropy([["a", "a", "b", None]]) == pytest.approx(1.5 * math.log(2))
    rows = [["a", "a", "a", "a"], ["a", "b", "c", "d"], ["a", "a", "b", None]]
    assert evaluate.answer_entropy(rows) == pytest.approx((0 + 2 * math.log(2) + 1.5 * math.log(2)) / 3)


def test_length_stats_hand_case():
    stats = evaluate.length_stats(np.array([2, 4, 6, 8, 10]), np.array([1, 1, 0, 1, 0], bool))
    # p90: position 0.9 * 4 = 3.6 between 8 and 10 -> 8 + 0.6 * 2 = 9.2; two of five cut at the limit.
    assert stats == pytest.approx({"mean": 6.0, "p50": 6.0, "p90": 9.2, "truncated_frac": 0.4})


# ------------------------------------------------------------------------------- on a tiny run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A 2 SFT + 2 RL step run with evaluation (n = 2, k = 1, 2) and checkpoints at steps 2."""
    config = tiny_config()
    config.sft.steps = config.rl.steps = 2
    config.eval.every = config.checkpoint.every = 2
    workdir = str(tmp_path_factory.mktemp("tiny_run"))
    job.run(config, workdir)
    return workdir


def test_resolve_checkpoint(tiny_run, tmp_path):
    assert runs.resolve_checkpoint(tiny_run) == ("rl", 2)
    assert runs.resolve_checkpoint(tiny_run, "sft") == ("sft", 2)
    with pytest.raises(FileNotFoundError, match=r"no rl checkpoint at step 7 .*sft \[2\], rl \[2\]"):
        runs.resolve_checkpoint(tiny_run, "rl", 7)
    with pytest.raises(FileNotFoundError, match=f"no checkpoint in {tmp_path}"):
        runs.resolve_checkpoint(str(tmp_path))


def test_evaluate_checkpoint_reproduces_the_logged_evaluation(tiny_run):
    """With the run's own k and held-out set, the evaluation of RL checkpoint 2 (what experiments/evaluate.py runs)
    equals the in-training evaluation logged at step 2 (same params, key and compiled sampler), maj@k and answer
    entropy included; the result is written where load_evals finds it."""
    result = runs.evaluate_checkpoint(tiny_run, [2, 1])
    assert (result["stage"], result["step"], result["n"], result["k"], result["num_examples"]) == ("rl", 2, 2, [1, 2], 8)
    logged = {k: v for k, v in metrics_lib.read_metrics(tiny_run, "rl")[-1].items() if k.startswith("eval/")}
    assert {"eval/pass@2", "eval/avg@2", "eval/maj@2", "eval/answer_entropy", "eval/truncated_frac"} <= set(logged)
    assert result["metrics"] == logged
    assert runs.load_evals(tiny_run) == [result]
    assert "rl step 2" in runs.format_evaluation(result)
    with pytest.raises(ValueError, match="every k must be an integer >= 1"):
        runs.evaluate_checkpoint(tiny_run, [0, 2])


def test_reproduce_samples_are_the_checkpoints_completions_scored(tiny_run, tmp_path):
    """experiments/reproduce.py --samples: the warm start's (SFT checkpoint, step 0) and each finished run's last RL
    checkpoint's completions of the first held-out prompts, each record scored by the task's reward."""
    import shutil

    from experiments import reproduce
    from rl4llm.analysis import results

    root = str(tmp_path)
    shutil.copytree(tiny_run, reproduce.run_dir(root, "guidance_hard", "grpo", 0))
    path = str(tmp_path / "samples.jsonl")
    earlier = {"prompt": "1+1=", "completion": "2", "answer": "2", "reward": 1.0, "length": 2, "finished": True}
    results.write_results(path, [{"arm": "luffy", "seed": 1, "step": 40, **earlier},  # a run not under root: kept
                                 {"arm": "warm_start", "seed": 0, "step": 0, **earlier}])  # re-sampled: replaced
    assert reproduce.write_samples("guidance_hard", root, path, 3) == 7
    records = [r for r in results.read_results(path) if r["arm"] != "luffy" or r == {"arm": "luffy", "seed": 1,
                                                                                      "step": 40, **earlier}]
    assert len(records) == 7
    records = [r for r in records if r["arm"] != "luffy"]
    assert [(r["arm"], r["seed"], r["step"]) for r in records] == [("grpo", 0, 2)] * 3 + [("warm_start", 0, 0)] * 3
    sft = runs.restore_policy(tiny_run, "sft", num_examples=3)
    expected = runs.sample_completions(sft, 3)
    sft.setup.rewards.close()
    assert [r["completion"] for r in records[3:]] == [c["completion"] for c in expected]
    for r in records:
        assert r["reward"] == arithmetic_reward.score(r["completion"], r["answer"])


def test_binary_without_checkpoint_names_the_workdir(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "experiments.evaluate", f"--workdir={tmp_path}"],
        capture_output=True, text=True, check=False, timeout=300,
    )
    assert out.returncode != 0
    assert f"error: no checkpoint in {tmp_path}" in out.stderr
