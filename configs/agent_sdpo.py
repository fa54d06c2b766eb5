"""SDPO (Kong et al. 2025, "SDPO: Segment-Level Direct Preference Optimization for Social Agents", arXiv 2501.01821)
on the guess-the-number agent: DPO on a segment of turns of each task's best-vs-worst episode."""

from configs import agent_dmpo


def get_config():
    """configs/agent_dmpo.py's runs and pairs (each task's best vs worst episode by return), with SDPO's loss
    −log σ(β·Σ_{t∈seg_c} log(π/π_ref)(a_c,t) − β·Σ_{t∈seg_r} log(π/π_ref)(a_r,t)) (`rl.preference.sdpo_loss`, β = 0.1):
    the segments are the turns [e, e + k') of both episodes, e the first turn where the two episodes part
    (`rl.preference.first_divergent_turn`), k' = `preference.segment_turns` = 2 truncated to the turns both
    episodes have (`sdpo_segments`); every other token gets no gradient, and a pair without a common turn from e
    on gives no pair.

    Run (the SFT warm start and the env as configs/agent_guess_number.py):
        python -m experiments.train --config=configs/agent_sdpo.py --workdir=/tmp/rl4llm/agent_sdpo

    Departures from the paper: SDPO locates e with a GPT-4o judge (the first erroneous turn of a negative session),
    re-samples positive continuations from the shared history before e, and lets the judge pick the segment's
    length; here the pair is two episodes the sampler already produced for the same task (same env seed), e is
    where their tokens first differ (they share the history before it), and k is a fixed setting. The pairs are
    on-policy and re-drawn every step (the paper trains offline on 1,019 segment pairs).
    Logged every step: `sdpo/loss`, `sdpo/rewards/*`, `sdpo/logps/*` (the segment sums), `sdpo/valid_pair_frac`,
    `sdpo/first_turn` and `sdpo/segment_turns` (the means of e and k' over the pairs) and `episode_return`.
    """
    c = agent_dmpo.get_config()
    c.preference.loss = "sdpo"
    c.preference.segment_turns = 2
    return c
