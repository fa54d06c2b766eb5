"""Default recipe: SFT warm start, then GRPO on built-in multi-step arithmetic, on CPU in minutes.

Run:
    python -m experiments.train --workdir=/tmp/rl4llm/default

Reaches (2-core CPU, idle, 199 s in all, commit deb3fae): held-out greedy accuracy 0.379 after the SFT warm start,
0.611 after 100 GRPO steps (+23.2 points); pass@1 0.286 -> 0.393, pass@4 0.635 -> 0.762. The warm start varies with
the seed and with float rounding (0.37-0.57 greedy; README, "What the main job ...").

Override any field from the command line, e.g.
    python -m experiments.train --workdir=/tmp/rl4llm/g16 --config.rl.num_generations=16

Every other recipe in configs/ starts from this one and changes only what differs. Every field, its default, bound
and meaning: rl4llm/config/sections.py, or `python -m rl4llm.config`.
"""

import ml_collections

from rl4llm import config as config_lib


def get_config() -> ml_collections.ConfigDict:
    """Returns the default config: every field of `rl4llm.config.RunConfig` at its default."""
    return config_lib.defaults()
