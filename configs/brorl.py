"""BroRL ("BroRL: Scaling Reinforcement Learning via Broadened Exploration", 2025): many more rollouts per prompt."""

from configs import default

ROLLOUTS_PER_PROMPT = 128  # 8x the default's 16
ROWS_PER_CALL = 256  # the default step's 16 x 16 rows: the sampler's KV cache stays the default's


def get_config():
    """BroRL: GRPO with N = 128 rollouts per prompt instead of the default's 16, at the default's rollout budget.

    The paper's argument (its mass-balance analysis of one policy-gradient step): the change of the correct tokens'
    probability mass has a term from tokens the step did not sample, of either sign, whose weight vanishes as N grows,
    so with N in the hundreds every update raises the correct mass with probability -> 1; it revives runs whose
    progress saturated at small N (ProRL's N = 16 -> BroRL's N = 512). tests/test_brorl.py checks that property on
    this library's GRPO advantages and PPO-clip loss on a toy softmax policy: the fraction of steps that raise it is
1 - (1 - Q_pos)^N (the steps whose group holds a correct token), 1.0 at N = 512; no step lowered it there (with GRPO's
zero-sum advantages the paper's negative unsampled-token term did not appear).

    Departures, at our scale: N = 128 (the paper's 512) with the default's 16 prompts per step, so a step has 2,048
    rows; 12 steps (24,576 rollouts, 96% of the default's 100 x 256) instead of 100 -- the same sampling budget in
    fewer, broader updates; the sampler takes `sampling.rows_per_call` = 256 rows (2 prompts' groups) per call, so its
    memory is the default step's; the learner accumulates gradients over micro-batches of 256 rows. The rest (one
    on-policy update per step, token-mean, no KL) is the default job's.

    Run:
        python -m experiments.train --config=configs/brorl.py --workdir=/tmp/rl4llm/brorl
    No result at our scale yet (no seeds run).
    """
    c = default.get_config()
    c.rl.steps = c.rl.steps * c.rl.num_generations // ROLLOUTS_PER_PROMPT  # the default's rollouts per prompt
    c.rl.num_generations = ROLLOUTS_PER_PROMPT
    c.rl.micro_batch_size = ROWS_PER_CALL
    c.sampling.rows_per_call = ROWS_PER_CALL
    return c
