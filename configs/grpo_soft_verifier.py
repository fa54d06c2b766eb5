"""GRPO with a model-based soft reward (Su et al. 2025, "Crossing the Reward Bridge: Expanding RL with Verifiable
Rewards Across Diverse Domains", arXiv 2503.23829): the reward is a generative verifier's probability of the
"correct" judgement token, not a rule."""

from configs import grpo

VERIFIER = "/tmp/rl4llm/soft_verifier/reward_model"  # where step 1 of the docstring writes the verifier


def get_config():
    """GRPO (configs/grpo.py) whose reward is P(Yes) of a generative verifier (`rl4llm.verifiers.generative`).

    Each completion is judged by a frozen decoder prompted with `{question}{completion};{reference}#` (the policy's
    prompt, its completion, the reference answer); the reward is the probability of its next token being "1" (the
    paper's judgement token for "correct"; "0" is "wrong") under its whole next-token softmax — the paper's soft
    reward (`generative_verifier.normalisation="full"`; "yes_no" renormalises over the two tokens,
    `generative_verifier.hard=True` is the binary verdict it compares with). All rollouts of a step are judged in
    one jitted forward. Logged: `verifier/p_yes_mean`, `verifier/group_std` (the score's spread within groups, what
    GRPO's advantages are made of), `verifier/yes_no_mass` (P("1") + P("0"): whether the judge answers in the
    format), `verifier/truncated_frac`, and the rule reward `reward/exact_answer` for reference.

    Departures from the paper: the judge is whatever decoder the directory holds (the paper distils Qwen2.5-72B's
    judgements into a 7B verifier, RM-7B; `--config.generative_verifier.hf_checkpoint=<dir>` loads an HF judge
    such as that one, with its own tokenizer, a template in its language and yes/no tokens it emits); the
    template is in the arithmetic task's character vocabulary (no letters), not the paper's instruction prompt;
    the paper's per-batch z-score of the rewards is replaced by GRPO's per-group normalisation; GRPO, not the
    paper's REINFORCE / RLOO. Every other setting is configs/grpo.py's.

    The verifier: step 1 below trains one on the task's reference vs corrupted solutions
    (`experiments/train_reward_model.py` with `reward_model.objective="judge"`: the cross-entropy of the verdict
    token, as the paper distils its verifier from a larger judge's verdicts); any decoder written with
    `verifiers.generative.save`, or an HF judge, serves as well.

    Run:
        python -m experiments.train_reward_model --config=configs/grpo_soft_verifier.py \
            --config.generative_verifier.checkpoint= --workdir=/tmp/rl4llm/soft_verifier
        python -m experiments.train --config=configs/grpo_soft_verifier.py --workdir=/tmp/rl4llm/grpo_soft_verifier
    Result (sanity runs, one seed, a 2-core CPU shared with other jobs, code at 1909d15): step 1's
    judge (the default tiny decoder from random init, 200 updates, 698 s) reaches held-out pairwise accuracy 0.602
    (0.496 at init). 20 GRPO steps on its P(Yes) from the SFT warm start (greedy 0.482): mean P(Yes) 0.520 ->
    0.536, P("1") + P("0") = 0.999 (the judge answers in the format), within-group spread ~0.06, but held-out
    greedy accuracy 0.393, pass@1 0.310, pass@4 0.645: the policy optimises a 60 %-accurate judge and the rule
    accuracy falls (reward hacking of a weak verifier, visible). configs/grpo.py on the rule reward from the same
    warm start, 20 steps: greedy 0.680, pass@1 0.426, pass@4 0.803. A useful soft verifier needs a judge far better
    than this one (the paper's is distilled from a 72B model's verdicts).
    """
    c = grpo.get_config()
    v = c.generative_verifier
    v.checkpoint = VERIFIER
    v.template = "{question}{completion};{reference}#"
    v.yes_token, v.no_token = "1", "0"
    v.normalisation = "full"
    v.max_length = 256
    v.mode = "replace"
    v.weight = 1.0
    c.reward_model.objective = "judge"  # step 1: the verifier's training (experiments/train_reward_model.py)
    return c
