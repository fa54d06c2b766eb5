"""ExIt, Exploratory Iteration (Jiang, Lupu and Bachrach 2025, "Bootstrapping Task Spaces for Self-Improvement"):
GRPO whose task space grows from the policy's own partial solutions, replayed by learnability."""

from configs import default


def get_config():
    """The main job with ExIt's selection (`selection.method="exit"`): half of each step's 16 groups
    (`selection.exit_resume_fraction`) resume instances from a buffer of partial histories, a problem followed by
    the first steps (up to a ';') of one of the policy's earlier solutions, drawn with probability proportional to
    the return variance of the group last rolled out from it; the policy writes the rest, and the whole solution is
    scored. Every group whose returns vary adds one new instance (one of its rollouts, cut after a uniformly chosen
    step), and an instance whose group had equal returns leaves the buffer (`rl4llm/data/partial_histories.py`,
    `train.curricula.collect_exit`). Departures: the paper's "improve this solution" and self-divergence prompts
    and its diversity bonus need natural-language prompts, which the character-level arithmetic task does not have;
    here a partial history is continued, not revised; a fixed fraction of the groups is replayed (the paper: PLR's
    replay probability and rank priorities).
    Run:
        python -m experiments.train --config=configs/exit.py --workdir=/tmp/rl4llm/exit
    Logged per step: selection/exit_resumed_groups, exit_new_instances, exit_buffer_size, exit_buffer_priority,
    and exit_resumed_reward / exit_history_chars when groups were resumed. Measured (`--study=exit`, 3 seeds, 100
    steps from the main job's warm start): greedy 0.693 +- 0.014 against GRPO's 0.784 +- 0.011, behind at every
    evaluation (notebooks/08_exit_and_pruning.ipynb).
    """
    c = default.get_config()
    c.selection.method = "exit"
    c.selection.exit_resume_fraction = 0.5
    return c
