"""Multi-turn agent: multi-hop question answering over a synthetic knowledge graph with a search tool."""

from configs import default


def get_config():
    """SFT warm start on the scripted searcher's episodes (20% of turns a random search / answer, kept in context
    without loss), then trajectory-level GRPO on rl4llm.envs.kg_search (8 entities, 3 relations, 1-3 hops, at
    most 5 turns; success = exact answer).

    Run:
        python -m experiments.train --config=configs/agent_kg_search.py --workdir=/tmp/rl4llm/kg

    Turn-level credit instead of the trajectory-level baseline (rl4llm.rl.multi_turn):
        --config.rl.advantage=mt_grpo   MT-GRPO (AAE): turn reward R^T_k = agent.turn_reward ("tool_success:1,
                                        gold_in_result:1": MT-GRPO's "tool executed" + "answer in the search
                                        results") on the searches, plus z(R^O) on every turn
        --config.rl.advantage=igpo      IGPO: information gain of the policy's own teacher-forced probability of
                                        "<answer>{gold}</answer>" after each turn, jointly normalised with the
                                        outcome, turn reward-to-go (gamma 1)

    Episode: "Q kavo boss pet\\n<search>kavo</search>=kavo: boss lumi, pal tize, pet sora\\n<search>lumi</search>
    =lumi: ...\\n<answer>bine</answer>". Model: the arith preset (4 layers, 128 wide) on the env's char tokenizer.

    Measured (seed 0, a loaded 2-core CPU; README "Multi-turn agents"): the warm start does not learn to copy entity
    names within ~100 SFT steps. Its loss stalls at 0.40 nats/token from step ~50 on (81-step run with
    record_bucket 128; 100 steps of a 1-relation variant, where every name sits a fixed distance back, 0.40 too),
    which is exactly the loss of an agent that has the format and the search / answer schedule right but draws each
    4-letter name uniformly (2 ln 14 + 2 ln 5 = 8.5 nats a name; 0.405 nats/token over these episodes' loss
    tokens). The greedy 81-step warm start solves 0 of 64 held-out tasks with 19% valid actions, so GRPO and MT-GRPO
    get zero gradient from it (30 RL steps of 2 x 8 episodes: igpo's normalised information gains drove validity to
    0; mt_grpo with "valid_action:1,tool_success:1,gold_in_result:1" raised it to 0.65 by answering early; success
    stayed 0). The whole 300-step budget (~3 s/step under load at batch 32) has not been run, so
    whether copying emerges by then is still open. The measured GRPO / MT-GRPO / IGPO comparison is on guess_number
    instead (configs/agent_guess_number.py).
    """
    c = default.get_config()
    c.agent.env = "kg_search"
    c.agent.max_action_tokens = 24  # "<search>kavo</search>" is 21 characters
    c.agent.max_obs_tokens = 48
    c.agent.max_context = 384
    c.agent.record_bucket = 64  # few learner / SFT shapes (each one compiles); 128 padded 147-token rows to 384
    c.agent.obs_bucket = 16
    c.agent.turn_reward = "tool_success:1,gold_in_result:1"
    c.agent.answer_template = "<answer>{}</answer>"
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
