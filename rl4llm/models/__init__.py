"""Decoder-only language models: configs/presets and the functional (pure-pytree) API."""
from rl4llm.models.config import LORA_TARGETS, PRESETS, REMAT_MODES, ModelConfig, get_config
from rl4llm.models.decoder import (
    KVCache,
    Params,
    apply,
    completion_hidden,
    fork_rows,
    forward,
    init_cache,
    init_params,
    param_logical_axes,
    positions_from_mask,
    unembed,
)

__all__ = [
    "LORA_TARGETS", "PRESETS", "REMAT_MODES", "ModelConfig", "get_config", "KVCache", "Params", "apply", "completion_hidden", "fork_rows", "forward", "init_cache",
    "init_params", "param_logical_axes", "positions_from_mask", "unembed",
]
