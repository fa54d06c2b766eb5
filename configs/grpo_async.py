"""GRPO with asynchronous (one-step off-policy) rollouts: the default job with the sampler one step ahead."""

from configs import default


def get_config():
    """Async GRPO: batch s+1 is generated (in a background thread) by the params the learner starts step s from,
    while the learner trains on batch s (`rl.async_rollouts`, `rl.max_staleness` = 1; the pipeline is flushed at
    every checkpoint so that resuming is exact). Decoupled PPO (AReaL): the ratio is against the params the step
    starts from, and the sampler mismatch is corrected by truncated IS min(pi_prox / pi_behav, 2) per token.

    Run:
        python -m experiments.train --config=configs/grpo_async.py --workdir=/tmp/rl4llm/grpo_async
    Result: not yet recorded.
    """
    c = default.get_config()
    c.rl.async_rollouts = True
    c.rl.max_staleness = 1
    c.rl.tis_cap = 2.0
    return c
