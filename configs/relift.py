"""ReLIFT (Ma et al. 2025, "Learning What RL Can't: Interleaved Online Fine-Tuning for Hardest Questions";
TheRoadQaQ/ReLIFT) on the default GRPO job."""

from configs import default


def get_config():
    """ReLIFT: GRPO, with SFT steps on the questions it cannot solve.

    Every RL step, each prompt whose 16 rollouts all fail joins a buffer with the task's reference solution (ReLIFT
    uses a stronger model's solutions stored with the data; ours are the task's). After the step's RL update, once
    16 questions are buffered (ReLIFT: `sft_data_size` = 128 = its RL batch of prompts; here the step's 16), one SFT
    step on the newest 16 with its own AdamW (lr 1e-4, the RL learning rate, as ReLIFT's equal 1e-6s), loss = token-
    mean NLL - 0.001 x token-mean entropy (ReLIFT's entropy bonus); they leave the buffer. The buffer keeps the
    newest 64 (ReLIFT's is unbounded). Everything else is the default job (`train.companions.relift`).
    Logged: relift/solve_none (share of groups that all failed), relift/buffer, relift/sft_updates, relift/sft_loss,
    relift/sft_entropy, relift/sft_grad_norm.

    Run:
        python -m experiments.train --config=configs/relift.py --workdir=/tmp/rl4llm/relift
    Result (notebooks/05_guidance.ipynb, 6-7-operand chains, 3 seeds): held-out pass@16 0.207 -> 0.174 ± 0.013 after
    40 steps (GRPO 0.228 ± 0.006): the SFT steps lengthen the answers without making them right.
    """
    c = default.get_config()
    c.relift.batch_size = 16
    c.relift.capacity = 64
    c.relift.learning_rate = c.rl.learning_rate
    c.relift.entropy_coef = 0.001
    return c
