"""LoRA adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on decoder params.

A config with `lora_rank = r > 0` gives every projection named in `lora_targets` two extra params,
`lora_a` [in..., r] and `lora_b` [r, out...], and computes y = x W + (alpha / r) (x A) B (decoder.DenseGeneral).
The params stay ONE tree (base weights + adapters), so the sampler, evaluation and checkpoints take it as
they take any params; what changes is what is trained:

- `trainable(params)` is the adapters alone when the tree has any (else the whole tree): the learner
  differentiates and the optimizer holds state for these only; the base is frozen and never copied.
- `adapters_off(params)` is the same tree with B = 0: exactly the base model (x A 0 = 0), the KL reference
  without a second copy of the base weights.
- `merge(cfg, params)` folds W + (alpha / r) A B into plain base params for export (`hf_checkpoint`).

Initialisation follows PEFT: A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5)),
B = 0, so a freshly adapted model computes exactly the base model.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from rl4llm.models.config import ModelConfig
from rl4llm.models.decoder import Params, init_params

ADAPTER_KEYS = ("lora_a", "lora_b")


def base_config(cfg: ModelConfig) -> ModelConfig:
    """`cfg` without adapters (the architecture the merged params are; LoRA fields at their defaults)."""
    return dataclasses.replace(cfg, lora_rank=0, lora_alpha=ModelConfig.lora_alpha, lora_targets=())


def split(params: Params) -> tuple[Params, Params]:
    """(base params, adapters): two trees of nested dicts; adapters hold only `lora_a` / `lora_b` leaves."""
    base, adapters = {}, {}
    for key, value in params.items():
        if key in ADAPTER_KEYS:
            adapters[key] = value
        elif isinstance(value, dict):
            sub_base, sub_adapters = split(value)
            base[key] = sub_base
            if sub_adapters:
                adapters[key] = sub_adapters
        else:
            base[key] = value
    return base, adapters


def combine(base: Params, adapters: Params) -> Params:
    """Inverse of `split`: base params with the adapters put back in place."""
    out = dict(base)
    for key, value in adapters.items():
        out[key] = combine(base[key], value) if key not in ADAPTER_KEYS else value
    return out


def has_adapters(params: Params) -> bool:
    return bool(split(params)[1])


def trainable(params: Params) -> Params:
    """What the learner trains: the adapters when `params` has any, else all of `params`."""
    adapters = split(params)[1]
    return adapters if adapters else params


def with_trainable(params: Params, new_trainable: Params) -> Params:
    """`params` with its `trainable(params)` part replaced by `new_trainable` (inverse of `trainable`)."""
    base, adapters = split(params)
    return combine(base, new_trainable) if adapters else new_trainable


def adapters_off(params: Params) -> Params:
    """`params` with every lora_b = 0: computes exactly the base model (the KL reference of LoRA training)."""
    base, adapters = split(params)
    zero_b = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if path[-1].key == "lora_b" else x, adapters
    )
    return combine(base, zero_b)


def init_adapters(cfg: ModelConfig, key: jax.Array) -> Params:
    """Adapters of `cfg` (PEFT init: A ~ U(±1/sqrt(fan_in)), B = 0), in cfg.param_dtype."""
    shapes = split(jax.eval_shape(init_params, cfg, key))[1]
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes)
    keys = jax.random.split(key, len(leaves))
    values = []
    for (path, shape), leaf_key in zip(leaves, keys):
        if path[-1].key == "lora_a":
            bound = 1.0 / math.sqrt(math.prod(shape.shape[:-1]))
            values.append(jax.random.uniform(leaf_key, shape.shape, jnp.float32, -bound, bound).astype(shape.dtype))
        else:
            values.append(jnp.zeros(shape.shape, shape.dtype))
    return jax.tree.unflatten(treedef, values)


def add_adapters(cfg: ModelConfig, base: Params, key: jax.Array) -> Params:
    """Base params (of `base_config(cfg)`, e.g. an imported checkpoint) with fresh adapters of `cfg`."""
    return combine(base, init_adapters(cfg, key))


def merge(cfg: ModelConfig, params: Params) -> tuple[ModelConfig, Params]:
    """(base config, base params with W <- W + (alpha / r) A B folded in), computed in float32."""
    scale = cfg.lora_alpha / cfg.lora_rank if cfg.lora_rank else 0.0

    def fold(module: dict) -> dict:
        out = {k: fold(v) if isinstance(v, dict) else v for k, v in module.items() if k not in ADAPTER_KEYS}
        if "lora_a" in module:
            a, b = module["lora_a"].astype(jnp.float32), module["lora_b"].astype(jnp.float32)
            delta = jnp.tensordot(a, b, axes=1)  # [in..., out...]
            out["kernel"] = (module["kernel"].astype(jnp.float32) + scale * delta).astype(module["kernel"].dtype)
        return out

    return base_config(cfg), fold(params)
