"""GRPO with a critique judge's voted score as the reward (DeepSeek-GRM / SPCT: Liu et al. 2025, "Inference-Time
Scaling for Generalist Reward Modeling", arXiv 2504.02495): the judge writes principles, a verdict per step and an
integer score in [1, 10]; k sampled critiques are summed."""

from configs import grpo

VERIFIER = "/tmp/rl4llm/critique_verifier/reward_model"  # where step 1 of the docstring writes the judge


def get_config():
    """GRPO (configs/grpo.py) whose reward is a critique judge's vote (`rl4llm.verifiers.critique`).

    Each completion's judge text `{question}{completion};{reference}#` (the policy's prompt, its completion, the
    reference answer) is continued by a frozen decoder, k = `generative_verifier.samples` = 4 times at temperature
    1.0 (one jitted sampling call for the step's N x k critiques), each critique at most 48 tokens:
    `{principle}={v_0};...;{v_m}#{S}` — the problem's operations, 1 / 0 for each step and the final answer, then the
    score S in [1, 10] (S >= 6 iff the answer is right; within a half, the share of sound steps). Each critique's
    score is parsed strictly (exactly one `#`, then an integer in [1, 10], then the stop token); an unparsable one
    (garbage, two scores, out of range, no stop within 48 tokens) counts the minimum score 1. The k scores are
    summed (S_vote in [k, 10k], the paper's voting) and the reward is (S_vote - k) / 9k in [0, 1]. Logged every step:
    `verifier/parse_failures` (count), `verifier/parse_fail_frac`, `verifier/unfinished_frac`,
    `verifier/score_mean`, `verifier/reward_mean`, `verifier/agreement` (the vote's verdict, S_vote > 5.5k, equals
    the exact reward's), `verifier/group_std` (what GRPO's advantages are made of), `verifier/critique_length`,
    `verifier/truncated_frac`, and the rule reward `reward/exact_answer` for reference.

    The judge: step 1 below fine-tunes one on procedural critiques of the task's reference and corrupted solutions
    (`experiments/train_reward_model.py` with `reward_model.objective="critique"`, `train.critique_job`): the step
    judge's verdicts and the score built from them are exactly the critiques whose verdict agrees with the ground
    truth, the set the paper's rejective fine-tuning keeps from its own samples. Held-out: the greedy critique's
    verdict accuracy, its score's exact match, its parse failures.

    Departures from the paper: the critique is in the task's character vocabulary and its principles are the
    problem's operations, not generated free text; the critiques come from the procedural judge, not from
    rejection-sampling the judge's own; no online RL of the judge after fine-tuning; no meta-RM (all k samples
    vote); pointwise scoring of one response (the paper scores a query's responses together); an unparsable critique
    votes the minimum instead of being left out; GRPO's group normalisation of the [0, 1] reward.

    Run:
        python -m experiments.train_reward_model --config=configs/grpo_critique_verifier.py \
            --config.generative_verifier.checkpoint= --workdir=/tmp/rl4llm/critique_verifier
        python -m experiments.train --config=configs/grpo_critique_verifier.py \
            --workdir=/tmp/rl4llm/grpo_critique_verifier
    """
    c = grpo.get_config()
    v = c.generative_verifier
    v.kind = "critique"
    v.checkpoint = VERIFIER
    v.template = "{question}{completion};{reference}#"
    v.max_length = 256
    v.samples = 4
    v.temperature = 1.0
    v.max_critique_length = 48
    v.mode = "replace"
    v.weight = 1.0
    c.reward_model.objective = "critique"  # step 1: the judge's training (experiments/train_reward_model.py)
    return c
