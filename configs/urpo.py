"""URPO (Lu et al. 2025, "URPO: A Unified Reward & Policy Optimization Framework for Large Language Models", arXiv
2507.17515): one policy is both player and referee, trained by one GRPO loop on a batch that mixes both kinds of
groups."""

from configs import default


def get_config():
    """The main job with a quarter of each step's groups as referee groups (`urpo.referee_share=0.25`: 4 of the 16
    groups, `rl4llm/train/urpo.py`): a referee group's prompt is a problem and a candidate solution in the referee
    template ("{question}{completion}=", the task's alphabet); the policy writes G verdicts, each rewarded 1 when it
    starts with the verifier's label ("1" right / "0" wrong) and 0 otherwise (garbage included). Half of the referee
    groups judge one of the step's own rollouts of their problem (drawn toward a balanced label), half the reference
    solution or a corrupted final answer (`data.arithmetic.wrong_solution`, "final_answer"), 50/50. Player groups
    are rewarded by the rule verifier as in GRPO; `--config.urpo.self_reward=True` rewards them by the policy's own
    greedy verdict instead (the paper's open-ended prompts; monitor `urpo/self_reward_agreement`).

    The paper's settings (Qwen2.5-7B; its abstract and Figure 1 are all we could read): a mixed batch of verifiable
    problems, preference triples with an N-way ranking and open-ended instructions; referee tasks rewarded by
    agreement with ground-truth preferences, open-ended ones by the model's own referee scores. Its prompt formats,
    the mix ratio and how a verdict is parsed were not found: ours are chosen here (README, "URPO").

    Logged every step: `urpo/referee_accuracy`, `urpo/referee_valid_frac`, `urpo/referee_yes_frac`,
    `urpo/referee_share` (0.25), `urpo/player_accuracy`; at each evaluation `eval/referee_accuracy` on 128 held-out
    problems' reference vs corrupted solutions (greedy), beside the player's `eval/greedy_accuracy`.

    Run:
        python -m experiments.train --config=configs/urpo.py --workdir=/tmp/rl4llm/urpo
    Study (vs GRPO, 3 seeds, 40 steps from the main job's warm start):
        python -m experiments.reproduce --study=urpo --workers=1  ->  notebooks/results/urpo.jsonl
    Result: held-out referee accuracy 0.172 -> 0.207 ± 0.008 (GRPO 0.148 ± 0.007), all of it more verdicts that parse
    (0.344 -> 0.423); the parsed verdicts stay at chance (0.49), also after 120 steps (study urpo_long: 0.495; 0.681 of
    the verdicts parse). Greedy 0.723 ± 0.009 vs GRPO's 0.765 ± 0.007 after 40 steps (README, "URPO";
    notebooks/07_reward_loop.ipynb section 6).
    """
    c = default.get_config()
    c.urpo.referee_share = 0.25
    c.urpo.rollout_candidates = 0.5
    c.urpo.corruption = "final_answer"
    c.urpo.eval_pairs = 128
    return c
