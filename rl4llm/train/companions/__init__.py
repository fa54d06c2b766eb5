"""Companions of the learner: the stateful pieces a method adds to the RL step (PPO's critic, PRIME's implicit PRM,
EPO's entropy history) and the controllers run after it (adaptive KL / entropy coefficients, reference reset).

Each is a module with the same four functions, called for every run in the order of `train.state.COMPANIONS`
(a companion the run does not use returns `state` unchanged):

* `enabled(config) -> bool`: whether the run uses it;
* `init(config, setup, state) -> state`: the RL stage's initial TrainState with its state in `extras` (`train.state`);
* `update(config, programs, state, rollouts, step, metrics) -> state`: before RL step `step`'s learner updates
  (`train.step.learn_on_rollouts`; `rollouts`: the step's `RolloutBatch`);
* `after_step(config, programs, state, rollouts, step, metrics, updates) -> state`: after them (`updates`: the
  metrics of each learner update, in order).

`update` and `after_step` add their metrics to `metrics`. The jitted programs a companion needs (the critic's step,
the PRM's) are built once by `train.programs`; its inputs come from the rollout source (`train.inputs`).
"""
