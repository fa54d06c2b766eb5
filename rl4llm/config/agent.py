"""The `config.agent` section of a multi-turn agent run (`train.agent`): defaults and validation.

Part of `rl4llm.config`: configs import it without the training stack.
"""

from __future__ import annotations

import ml_collections

from rl4llm import envs as envs_lib
from rl4llm.rewards import combine as combine_lib

def agent_defaults() -> ml_collections.ConfigDict:
    """The `config.agent` section (env "" = not an agent run). Per-env knobs live in `config.agent.<env>`."""
    c = ml_collections.ConfigDict()
    c.env = ""  # rl4llm.envs.ENVS name; "" = the single-turn main job
    for name in envs_lib.ENVS:
        c[name] = ml_collections.ConfigDict(envs_lib.section_defaults(name))
    c.max_action_tokens = 24  # per-turn generation budget (an action stops at the env's closing tag)
    c.max_obs_tokens = 64  # longer observations keep head and tail
    c.max_context = 512  # KV-cache slots of a rollout (prompt + every turn, shared-slot holes included)
    c.obs_bucket = 8
    c.record_bucket = 32  # learner sequence lengths are multiples of this (few compiled shapes)
    c.turn_reward = "valid_action:1"  # "component:weight,...": the turn reward R^T_k of turn-level estimators
    c.outcome_reward = "correct:1"  # "component:weight,...": the trajectory score R^O (env.outcome() keys)
    # G-RA gated reward accumulation (Sun et al. 2025): turn rewards count only in trajectories whose outcome score
    # reaches reward_gate (δ); turn-level estimators get the gated turn rewards, trajectory-level ones the score
    # outcome + Σ gated turn rewards (train.episodes.gate_turn_rewards).
    c.gated_rewards = False
    c.reward_gate = 1.0  # δ
    c.expert_noise = 0.0  # SFT: probability that a turn is the exploration policy's (kept in context, no loss)
    c.sft_observation_weight = 0.0  # SFT: loss weight of the observation tokens (auxiliary next-observation loss)
    c.answer_template = "<answer>{}</answer>"  # IGPO: the teacher-forced ground-truth action ({} = the answer)
    c.eval_tasks = 64  # held-out tasks of each evaluation (greedy)
    # ARPO entropy-based adaptive rollout (sampling.multi_turn.BranchingConfig; Dong et al. 2025): M of the
    # num_generations rollouts of a task start at the prompt, the rest are branched after tool calls or start fresh.
    c.arpo = ml_collections.ConfigDict()
    c.arpo.initial_rollouts = 0  # M; 0 = off (all num_generations start at the prompt); ARPO: 1 <= M < N
    c.arpo.entropy_weight = 0.2  # α
    c.arpo.branch_probability = 0.5  # β
    c.arpo.beam_size = 2  # at most beam_size - 1 copies of a rollout per tool call
    c.arpo.entropy_tokens = 20  # L: the step entropy reads the first L tokens of an action
    c.arpo.entropy_top_k = 10  # k: ... and the k largest log-probs of each
    # Mini-o3 over-turn masking (Lai et al. 2025): trajectories cut by the turn cap or the context limit get no
    # loss (their advantages still enter their groups' statistics), so they are not penalised as failures.
    c.over_turn_mask = False
    # EPO (Xu et al. 2025; train.companions.epo, rl.multi_turn.epo_entropy_loss): L += -coef·(agg(H) - smooth_coef·w·agg(P)),
    # P = alpha·[relu(kappa_low·H̄_k - H) + relu(H - kappa_high·H̄_k)] around turn index k's historical mean
    # entropy H̄_k, w = the phase weight of the RL step over total_epochs. Its entropy bonus adds to
    # config.rl.entropy_coef's.
    c.epo = ml_collections.ConfigDict()
    c.epo.coef = 0.0  # λ; 0 = off (EPO: 0.001)
    c.epo.smooth_coef = 1.0  # c_s
    c.epo.kappa_low = 0.0  # κ_l (the paper's setting)
    c.epo.kappa_high = 2.0  # κ_r
    c.epo.alpha = 0.05  # ScienceWorld; 0.1 ALFWorld
    c.epo.total_epochs = 150  # E of the phase weight (official code: 150); the epoch is the RL step
    return c


def is_agent_config(config) -> bool:
    return "agent" in config and bool(config.agent.env)


def arpo_config_errors(arpo, num_generations: int) -> list[str]:
    """Errors of `config.agent.arpo` (initial_rollouts 0 = off)."""
    m, errors = arpo.initial_rollouts, []
    if not isinstance(m, int) or m < 0:
        return [f"config.agent.arpo.initial_rollouts={m!r}: must be an integer >= 0 (0 = off)"]
    if m == 0:
        return []
    if m >= num_generations:
        errors.append(f"config.agent.arpo.initial_rollouts={m}: must be < config.rl.num_generations="
                      f"{num_generations} (the free rollouts are the branching budget)")
    for field in ("beam_size", "entropy_tokens", "entropy_top_k"):
        low = 2 if field == "beam_size" else 1
        if not isinstance(arpo[field], int) or arpo[field] < low:
            errors.append(f"config.agent.arpo.{field}={arpo[field]!r}: must be an integer >= {low}")
    if not 0.0 <= arpo.branch_probability <= 1.0:
        errors.append(f"config.agent.arpo.branch_probability={arpo.branch_probability}: must be in [0, 1]")
    if arpo.entropy_weight < 0:
        errors.append(f"config.agent.arpo.entropy_weight={arpo.entropy_weight}: must be >= 0")
    return errors


def epo_config_errors(epo) -> list[str]:
    """Errors of `config.agent.epo` (coef 0 = off; ml_collections keeps the fields' types)."""
    errors = [f"config.agent.epo.{field}={epo[field]!r}: must be >= 0"
              for field in ("coef", "smooth_coef", "kappa_low", "kappa_high", "alpha") if epo[field] < 0]
    if errors or epo.coef == 0:
        return errors
    if epo.kappa_high <= epo.kappa_low:
        errors.append(f"config.agent.epo.kappa_high={epo.kappa_high}: must be > config.agent.epo.kappa_low="
                      f"{epo.kappa_low} (the corridor is (kappa_low·H̄, kappa_high·H̄))")
    if epo.total_epochs < 1:
        errors.append(f"config.agent.epo.total_epochs={epo.total_epochs}: must be >= 1")
    return errors


def agent_config_errors(config) -> list[str]:
    """Errors of the `config.agent` section (`validate` reports them with the rest)."""
    agent, errors = config.agent, []
    for field in ("max_action_tokens", "max_obs_tokens", "max_context", "obs_bucket", "record_bucket", "eval_tasks"):
        if not isinstance(agent[field], int) or agent[field] < 1:
            errors.append(f"config.agent.{field}={agent[field]!r}: must be a positive integer")
    errors += arpo_config_errors(agent.arpo, config.rl.num_generations)
    errors += epo_config_errors(agent.epo)
    if not 0.0 <= agent.expert_noise <= 1.0:
        errors.append(f"config.agent.expert_noise={agent.expert_noise}: must be in [0, 1]")
    if not isinstance(agent.sft_observation_weight, (int, float)) or agent.sft_observation_weight < 0:
        errors.append(f"config.agent.sft_observation_weight={agent.sft_observation_weight!r}: must be a number >= 0")
    if agent.answer_template.count("{}") != 1:
        errors.append(f"config.agent.answer_template={agent.answer_template!r}: must contain one '{{}}'")
    if "selection" in config and config.selection.method != "uniform":
        errors.append(f"config.selection.method={config.selection.method!r}: agent runs draw tasks uniformly; "
                      "set it to 'uniform'")
    if agent.env not in envs_lib.ENVS:
        return errors + [f"config.agent.env={agent.env!r}: unknown env; known: {', '.join(sorted(envs_lib.ENVS))}"]
    try:  # the env's own checks name the field (config.agent.<env>.<knob>)
        env = envs_lib.ENVS[agent.env].env_cls(envs_lib.build_config(agent.env, agent[agent.env], config.seed))
    except (TypeError, ValueError) as e:
        return errors + [str(e) if str(e).startswith("config.") else f"config.agent.{agent.env}: {e}"]
    for field, keys in (("turn_reward", env.turn_reward_keys), ("outcome_reward", env.outcome_keys)):
        try:
            unknown = set(combine_lib.parse_weights(agent[field])) - set(keys)
            if unknown:
                errors.append(f"config.agent.{field}: unknown component(s) {sorted(unknown)} of env {agent.env!r}; "
                              f"known: {', '.join(keys)}")
        except ValueError as e:
            errors.append(f"config.agent.{field}={agent[field]!r}: {e}")
    return errors
