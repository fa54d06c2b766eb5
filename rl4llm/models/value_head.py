"""Value models (critics) for PPO: a scalar head on a decoder's final-norm hidden states.

Two layouts, chosen by `config.critic.shared_trunk`:

* separate critic: its own decoder ("trunk", initialised from the policy params or from a critic
  checkpoint) plus a head: params `{"trunk": decoder params, "head": head params}`;
* shared trunk: only a head on the policy's decoder: params `{"head": head params}`, values computed
  from the policy params (the policy's trunk also gets the value-loss gradient).

The value of completion token t is read, like its log-prob, from the hidden state that predicts it
(position P+t−1 of `[prompt (P) | completion (T)]`): `V_t = h_{P+t−1}·w + b` in float32 (verl's
critic: `values[:, -T-1:-1]` of a `num_labels=1` token-classification head). The head starts at zero
(`w = 0, b = 0`: V ≡ 0 before the first critic update, so the first GAE returns are Monte-Carlo returns).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp

from rl4llm.models.config import ModelConfig
from rl4llm.models.decoder import Params, completion_hidden, param_logical_axes


def init_head(cfg: ModelConfig) -> Params:
    """Zero scalar head: kernel [E], bias [] in the param dtype."""
    return {"kernel": jnp.zeros((cfg.hidden_size,), cfg.param_dtype), "bias": jnp.zeros((), cfg.param_dtype)}


def head_logical_axes() -> Any:
    return {"kernel": ("embed",), "bias": ()}


def init_critic(cfg: ModelConfig, policy_params: Params, *, shared_trunk: bool) -> Params:
    """Critic params initialised from the policy: a copy of its decoder plus a zero head, or (shared
    trunk) the head alone."""
    if shared_trunk:
        return {"head": init_head(cfg)}
    return {"trunk": jax.tree.map(jnp.copy, policy_params), "head": init_head(cfg)}


def critic_logical_axes(cfg: ModelConfig, *, shared_trunk: bool) -> Any:
    """Same tree as `init_critic`; leaves are tuples of logical axis names."""
    if shared_trunk:
        return {"head": head_logical_axes()}
    return {"trunk": param_logical_axes(cfg), "head": head_logical_axes()}


def values_from_hidden(head: Params, hidden: jax.Array) -> jax.Array:  # [..., E] -> [...]
    """`V = h·w + b` in float32."""
    kernel = head["kernel"].astype(hidden.dtype)
    return jnp.einsum("...e,e->...", hidden, kernel, preferred_element_type=jnp.float32) + head["bias"].astype(
        jnp.float32
    )


def completion_values(
    cfg: ModelConfig,
    critic_params: Params,
    policy_params: Params | None,
    tokens: jax.Array,  # [N, P+T] int32, prompt left-padded
    attention_mask: jax.Array,  # [N, P+T] 0/1
    completion_len: int,
) -> jax.Array:  # [N, T] float32
    """Values of the last `completion_len` tokens' states (finite garbage at masked positions).

    The trunk is `critic_params["trunk"]` when present, else the policy's (`policy_params`, shared trunk).
    """
    trunk = critic_params.get("trunk", policy_params)
    if trunk is None:
        raise ValueError("completion_values: a shared-trunk critic needs the policy params")
    hidden = completion_hidden(cfg, trunk, tokens, attention_mask, completion_len)  # [N, T, E]
    return values_from_hidden(critic_params["head"], hidden)


def save_critic(path: str, critic_params: Params) -> None:
    """Writes critic params (a separate critic's `{"trunk", "head"}`) as an Orbax checkpoint at `path`."""
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(path, critic_params)


def load_critic(path: str, abstract_params: Any) -> Params:
    """Critic params saved by `save_critic`, restored onto `abstract_params` (shapes, dtypes, shardings).

    A checkpoint of another structure raises ValueError naming the path."""
    with ocp.StandardCheckpointer() as checkpointer:
        try:
            return checkpointer.restore(path, abstract_params)
        except (ValueError, KeyError) as e:
            raise ValueError(f"critic checkpoint {path!r} does not match this critic: {e}") from e
