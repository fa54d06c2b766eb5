"""Multi-turn agent: multi-hop question answering over a synthetic knowledge graph with a search tool."""

from configs import default


def get_config():
    """SFT warm start on the scripted searcher's episodes (10% of turns a random search / answer, kept in context
    without loss), then trajectory-level GRPO on rl4llm.envs.kg_search: 8 entities, 1 relation, 1-2 hop questions,
    at most 4 turns; success = the exact answer. RL samples at temperature 0.5 (the learner's log-probs use the same
    temperature), greedy evaluation on 64 held-out tasks.

    Run:
        python -m experiments.train --config=configs/agent_kg_search.py --workdir=/tmp/rl4llm/kg

    Turn-level credit instead of the trajectory-level baseline (rl4llm.rl.multi_turn):
        --config.rl.advantage=mt_grpo   MT-GRPO (AAE): turn reward R^T_k = agent.turn_reward ("tool_success:1,
                                        gold_in_result:1": MT-GRPO's "tool executed" + "answer in the search
                                        results") on the searches, plus z(R^O) on every turn
        --config.rl.advantage=igpo      IGPO: information gain of the policy's own teacher-forced probability of
                                        "<answer>{gold}</answer>" after each turn, jointly normalised with the
                                        outcome, turn reward-to-go (gamma 1)
        --config.rl.advantage=bilevel_gae   RAGEN's turn-then-token GAE with the critic (config.critic)
        --config.agent.epo.coef=0.001   EPO entropy bonus + per-turn entropy corridor
        --config.agent.over_turn_mask=True   Mini-o3: no loss on episodes cut by the turn cap
        --config.agent.arpo.initial_rollouts=4 --config.agent.max_context=768   ARPO branching after tool calls
    Harder graphs: --config.agent.kg_search.num_relations=3 --config.agent.kg_search.max_hops=3
    --config.agent.kg_search.max_turns=5 (the env's defaults).

    Episode: "Q defa boss boss\\n<search>defa</search>=defa: boss diko\\n<search>diko</search>=diko: boss livi\\n
    <answer>livi</answer>=correct". Model: the arith preset (4 layers, 128 wide) on the env's char tokenizer.

    Measured (2-core CPU, README "Multi-turn agents: kg_search"): the skill this task needs is copying a 4-letter
    entity name out of an observation into the next action, and a 4-layer model learns it slowly.
      - 600 SFT steps (cosine) reach loss 0.08 and greedy held-out success 0.547 (valid actions 0.80, successful
        tool calls 0.68), in 18 min with two runs sharing the 2 cores. With 2 relations: 0.141. With the env's
        defaults (3 relations, 1-3 hops) 300 steps give 0.000: the loss sits at the floor of a policy with the
        right format and schedule but random names (0.40 nats/token) for ~100 steps, and an auxiliary loss on
        observation tokens (agent.sft_observation_weight=1) did not help.
      - Sampling is what RL sees: the same warm start solves 0.23 / 0.20 / 0.16 / 0.06 of tasks at temperature
        0.3 / 0.5 / 0.7 / 1.0 (copying errors compound over ~8 name characters), hence temperature 0.5.
      - GRPO vs MT-GRPO vs IGPO from that one warm start, seeds 0 and 1 (M = grpo | mt_grpo | igpo):

            python -m experiments.train --config=configs/agent_kg_search.py --workdir=$W/kg_sft --config.rl.steps=0
            mkdir -p $W/kg_$M/checkpoints; cp -r $W/kg_sft/checkpoints/sft $W/kg_$M/checkpoints/
            cp -r $W/kg_sft/tokenizer $W/kg_$M/
            python -m experiments.train --config=configs/agent_kg_search.py --workdir=$W/kg_$M --config.seed=$S \
                --config.rl.advantage=$M --config.rl.learning_rate=$LR --config.rl.steps=$N

        From greedy .547: at lr 1e-4 every method lowers held-out success within 30 steps (to .34-.52); at 2e-5
        (40 steps) and 5e-5 (60 steps) all end within noise of the warm start (.47-.58). IGPO ends at .91-1.00
        valid actions at every lr, trajectory GRPO at .70-.89, MT-GRPO at .78-.87. So turn-level credit (IGPO)
        improves tool-call validity here, and no method improves success. Hence lr 5e-5: it does no harm.
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
    c.agent.kg_search.num_relations = 1
    c.agent.kg_search.max_hops = 2
    c.agent.kg_search.max_turns = 4
    c.agent.expert_noise = 0.1
    c.sft.steps = 600
    c.sft.batch_size = 32
    c.sft.lr_schedule = "cosine"
    c.sampling.temperature = 0.5
    c.rl.steps = 60
    c.rl.num_prompts = 8
    c.rl.num_generations = 8
    c.rl.learning_rate = 5e-5
    c.eval.every = 10
    c.log_every = 5
    c.checkpoint.every = 10
    return c
