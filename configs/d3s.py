"""D³S (Wang et al. 2025, "Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient
Policy Optimization", arXiv 2509.22115) on the default GRPO job."""

from configs import default


def get_config():
    """D³S: GRPO trained on a down-sampled batch, the down-sampling relaxed over training.

    - Sample level (`rl.rollout_selection="max_variance"`): of the step's 16 x 16 rollouts, the half whose
      advantages have the largest variance, chosen across groups (D³S; `rl.rollout_selection_scope="group"` is
      D³S-I). With 0/1 rewards it keeps right and wrong rollouts as evenly as their counts allow.
    - Token level (`rl.token_selection="advantage_entropy"`): within the kept rollouts, the half of the tokens with
      the largest |A_{i,t}|·H_{i,t} (H from the rollout policy's behaviour pass) get a gradient.
    - Schedule: both kept shares rise linearly from 0.5 to 1 over the first 50 of the 100 RL steps
      (`rl.downsample_anneal_steps`), then no down-sampling.
    Only the paper's abstract was available: the kept shares, the linear schedule and its length, and that the loss
    normaliser counts the unselected tokens (as 80/20) are this recipe's choices, not the paper's published values
    (`rl4llm/rl/downsampling.py`). The advantages are the full groups' (GRPO), the dropped rollouts get no loss.

    Run:
        python -m experiments.train --config=configs/d3s.py --workdir=/tmp/rl4llm/d3s
    """
    c = default.get_config()
    c.rl.rollout_selection = "max_variance"
    c.rl.rollout_selection_frac = 0.5
    c.rl.rollout_selection_scope = "batch"
    c.rl.token_selection = "advantage_entropy"
    c.rl.token_selection_rho = 0.5
    c.rl.downsample_anneal_steps = 50
    return c
