"""The checks across fields of a multi-turn agent run's `config.agent` section (`train.agent`); its fields and
their bounds are `rl4llm.config.sections.Agent`."""

from __future__ import annotations

from rl4llm import envs as envs_lib
from rl4llm.rewards import combine as combine_lib


def is_agent_config(config) -> bool:
    """Whether `config` (a `sections.RunConfig`) is a multi-turn agent run: `config.agent.env` names an env."""
    return bool(config.agent.env)


def arpo_config_errors(arpo, num_generations: int) -> list[str]:
    """ARPO's initial rollouts leave a branching budget (initial_rollouts 0 = off)."""
    m = arpo.initial_rollouts
    if 0 < m and m >= num_generations:
        return [f"config.agent.arpo.initial_rollouts={m}: must be < config.rl.num_generations={num_generations} "
                "(the free rollouts are the branching budget)"]
    return []


def epo_config_errors(epo) -> list[str]:
    """EPO's entropy corridor is not empty (coef 0 = off)."""
    if epo.coef > 0 and epo.kappa_high <= epo.kappa_low:
        return [f"config.agent.epo.kappa_high={epo.kappa_high}: must be > config.agent.epo.kappa_low="
                f"{epo.kappa_low} (the corridor is (kappa_low·H̄, kappa_high·H̄))"]
    return []


def agent_config_errors(config) -> list[str]:
    """Errors of the `config.agent` section against the run (`rl4llm.config.validation.errors` reports them)."""
    agent = config.agent
    if not is_agent_config(config):
        return []
    errors = arpo_config_errors(agent.arpo, config.rl.num_generations) + epo_config_errors(agent.epo)
    if config.selection.method != "uniform":
        errors.append(f"config.selection.method={config.selection.method!r}: agent runs draw tasks uniformly; "
                      "set it to 'uniform'")
    if agent.env not in envs_lib.ENVS:
        return errors + [f"config.agent.env={agent.env!r}: unknown env; known: {', '.join(sorted(envs_lib.ENVS))}"]
    try:  # the env's own checks name the field (config.agent.<env>.<knob>)
        env = envs_lib.ENVS[agent.env].env_cls(envs_lib.build_config(agent.env, getattr(agent, agent.env), config.seed))
    except (TypeError, ValueError) as e:
        return errors + [str(e) if str(e).startswith("config.") else f"config.agent.{agent.env}: {e}"]
    for field, keys in (("turn_reward", env.turn_reward_keys), ("outcome_reward", env.outcome_keys)):
        try:
            unknown = set(combine_lib.parse_weights(getattr(agent, field))) - set(keys)
            if unknown:
                errors.append(f"config.agent.{field}: unknown component(s) {sorted(unknown)} of env {agent.env!r}; "
                              f"known: {', '.join(keys)}")
        except ValueError as e:
            errors.append(f"config.agent.{field}={getattr(agent, field)!r}: {e}")
    return errors
