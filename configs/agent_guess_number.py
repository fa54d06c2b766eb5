"""Multi-turn agent: guess the number with higher / lower feedback (rl4llm.envs.guess_number)."""

from configs import default


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
    c = default.get_config()
    c.agent.env = "guess_number"
    c.agent.max_action_tokens = 20  # "<guess>63</guess>" is 17 characters
    c.agent.max_obs_tokens = 32
    c.agent.max_context = 384
    c.agent.record_bucket = 64  # few learner / SFT shapes (each one compiles)
    c.agent.obs_bucket = 16
    c.agent.turn_reward = "info_gain:1"
    c.agent.answer_template = "<guess>{}</guess>"
    c.agent.expert_noise = 0.2
    c.sft.steps = 300
    c.sft.batch_size = 32
    c.rl.steps = 60
    c.rl.num_prompts = 8
    c.rl.num_generations = 8
    c.rl.learning_rate = 1e-4
    c.eval.every = 10
    c.log_every = 5
    c.checkpoint.every = 10
    return c
