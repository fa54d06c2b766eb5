"""Every registered method RUNS from a config: one real RL step of a nano job per advantage estimator, in the loop
that feeds it (single-turn, or the agent loop for the turn-level estimators), with the policy losses and length
shapers assigned round-robin to the single-turn jobs so that each of them runs in one job too. The step must log a
finite policy loss (test_reachable.py checks that each name validates; this checks that it trains)."""

import math

import pytest

from rl4llm.rewards import length as length_lib
from rl4llm.rl import registry
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from tests.test_multi_turn import agent_config
from tests.test_reachable import NEEDS
from tests.test_train import tiny_config

ADVANTAGES = sorted(registry.ADVANTAGES)
AGENT = [n for n in ADVANTAGES if registry.advantage_inputs(n) & set(registry.MULTI_TURN_ADVANTAGE_INPUTS)]
SINGLE_TURN = [n for n in ADVANTAGES if n not in AGENT]


def _assignment() -> dict:
    """advantage -> (loss, length shaper or "none"): every loss and shaper in at least one single-turn job."""
    losses = [n for n in sorted(registry.POLICY_LOSSES) if n != "gbpo"]  # gbpo runs with its estimator
    shapers = sorted(length_lib.LENGTH_SHAPING)
    free = [n for n in SINGLE_TURN if "rl.loss" not in NEEDS.get(n, {})]
    shaped = [n for n in free if n != "bnpo"]  # bnpo's rewards must stay in [0, 1] (config validation)
    assert len(free) >= len(losses) and len(shaped) >= len(shapers), "more losses or shapers than jobs to run them in"
    shaper_of = dict(zip(shaped, shapers))
    return {n: (losses[i % len(losses)], shaper_of.get(n, "none")) for i, n in enumerate(free)}


ASSIGNED = _assignment()


def _one_step(config, tmp_path) -> dict:
    config.rl.steps = 1
    config.eval.every = 1000
    job.run(config, str(tmp_path))
    (record,) = metrics_lib.read_metrics(str(tmp_path), "rl")
    return record


@pytest.mark.parametrize("name", SINGLE_TURN)
def test_every_single_turn_estimator_loss_and_shaper_trains_one_step(name, tmp_path):
    config = tiny_config()
    config.sft.steps = 2
    config.rl.advantage = name
    if name in ASSIGNED:
        config.rl.loss, config.task.length_shaping = ASSIGNED[name]
    config.update_from_flattened_dict(NEEDS.get(name, {}))
    record = _one_step(config, tmp_path)
    assert math.isfinite(record["loss/pg"]) and math.isfinite(record["grad_norm"]), record


@pytest.mark.parametrize("name", AGENT)
def test_every_turn_level_estimator_trains_one_agent_step(name, tmp_path):
    record = _one_step(agent_config(advantage=name), tmp_path)
    assert math.isfinite(record["loss/pg"]) and math.isfinite(record["grad_norm"]), record


def test_the_assignment_covers_every_loss_and_shaper():
    assert {loss for loss, _ in ASSIGNED.values()} | {"gbpo"} == set(registry.POLICY_LOSSES)
    assert {shaper for _, shaper in ASSIGNED.values()} - {"none"} == set(length_lib.LENGTH_SHAPING)
