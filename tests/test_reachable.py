"""Every registered method can be named in a config: each advantage estimator, policy loss (with its token
statistics) and length shaper passes config validation in the loop that provides its inputs -- the single-turn
main job, or the agent loop for the turn-level estimators -- so no kernel is rejected for an input the trainer does
not supply. Validation traces the method on the loop's inputs (`rl4llm.config.validation._check_values`), so the kernel
is also called with the config's hyper-parameters. tests/test_runs_every_name.py then trains one RL step with each."""

import pytest

from configs import default
from rl4llm.rewards import length as length_lib
from rl4llm.rl import registry
from rl4llm import config as config_lib
from tests.test_multi_turn import agent_config


# What an estimator needs beside its name: GBPO's weights need its loss (the targets come with it); GDPO normalises
# each reward component, so it needs a second one. (Also used by tests/test_runs_every_name.py.)
# TreeRL's segment advantages (and Tree-OPO's, CURE's) need tree rollouts: groups of 4 = trees of 2 paths with one
# fork each.
_TREE = {"tree.enabled": True, "tree.initial_paths": 2, "tree.branch_points": 1, "tree.branches": 1,
         "tree.iterations": 1, "rl.num_generations": 4}
NEEDS = {"gbpo": {"rl.loss": "gbpo"}, "gdpo": {"task.extra_rewards": "format_think_answer:0.5"},
         "treerl": _TREE, "tree_opo": _TREE, "cure": {**_TREE, "tree.criterion": "critical"},
         # DeepSearch's search trees: groups of 4 = 2 expansions of 2 children
         "deepsearch": {"deepsearch.enabled": True, "deepsearch.candidates": 2, "deepsearch.expansions": 2,
                        "deepsearch.step_tokens": 6, "rl.num_generations": 4},
         # step rewards from the exact step judge (TP-GRPO's thoughts)
         "process_grpo": {"task.flaw_judge": "arithmetic_steps", "task.step_reward": "thought"}}


@pytest.mark.parametrize("name", sorted(registry.ADVANTAGES))
def test_every_advantage_estimator_is_accepted_by_the_loop_that_feeds_it(name):
    agent = bool(registry.advantage_inputs(name) & set(registry.MULTI_TURN_ADVANTAGE_INPUTS))
    config = agent_config(advantage=name) if agent else default.get_config()
    config.rl.advantage = name
    config.update_from_flattened_dict(NEEDS.get(name, {}))
    config_lib.parse(config)


@pytest.mark.parametrize("name", sorted(registry.POLICY_LOSSES))
def test_every_policy_loss_is_accepted_by_the_main_job(name):
    config = default.get_config()
    config.rl.loss = name
    config_lib.parse(config)


@pytest.mark.parametrize("name", sorted(length_lib.LENGTH_SHAPING))
def test_every_length_shaper_is_accepted_by_the_main_job(name):
    config = default.get_config()
    config.task.length_shaping = name
    config_lib.parse(config)
