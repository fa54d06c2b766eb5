"""Multi-turn agent: guess the number with higher / lower feedback (rl4llm.envs.guess_number)."""

from configs import agent_kg_search


def get_config():
    """SFT warm start on binary-search episodes (20% of turns a random guess, kept in context without loss), then
    trajectory-level GRPO on the env (success = the number was found within 7 guesses).

    Run:
        python -m experiments.train --config=configs/agent_guess_number.py --workdir=/tmp/rl4llm/guess

    Turn-level credit instead of the trajectory-level baseline (rl4llm.rl.multi_turn):
        --config.rl.advantage=mt_grpo   turn reward R^T_k = agent.turn_reward ("info_gain:1": the fraction of the
                                        candidates the feedback ruled out) on intermediate turns, plus z(R^O)
        --config.rl.advantage=igpo      information gain of the policy's own teacher-forced probability of the
                                        number ("<guess>{n}</guess>" after each turn), jointly normalised with the
                                        outcome, turn reward-to-go

    Episode: "guess 12..40\\n<guess>26</guess>=higher 27..40\\n<guess>33</guess>=correct". Model: the arith
    preset (4 layers, 128 wide) on the env's char tokenizer.

    Result: not measured yet (the recipe is exercised for 2 RL steps by tests/test_multi_turn.py).
    """
    c = agent_kg_search.get_config()  # the same budgets and schedule; the env and its settings differ
    c.agent.env = "guess_number"
    c.agent.max_action_tokens = 20  # "<guess>63</guess>" is 17 characters
    c.agent.max_obs_tokens = 32
    c.agent.record_bucket = 64
    c.agent.turn_reward = "info_gain:1"
    c.agent.answer_template = "<guess>{}</guess>"
    return c
