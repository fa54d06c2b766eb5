"""Companions of the learner: stateful pieces a method adds to the RL step (critic, PRIME's implicit PRM, EPO) and the controllers run after it."""
