"""Roofline phases of an RL run's programs (`train.aot`): analytic FLOPs (`models.flops`) and the HBM bytes each
chip streams, for `parallel.tpu.Phase`.

Bytes counted per chip: every matmul weight once per pass of each micro-batch, in its stored dtype, split over the
`tensor` axis only (FSDP all-gathers a layer's full width before multiplying: each chip streams all of it); the
gradient accumulator read and written per micro-batch; the optimizer update reading params, gradients and both
Adam moments and writing params and moments (its shards); decoding reads every weight and the whole KV cache
([rows, Hkv, P+T, D] per layer: the attention reads all slots, masked) once per generated token. Activations are
not counted, nor are collectives: the time is a lower bound.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from rl4llm.models import flops as flops_lib
from rl4llm.models import lora
from rl4llm.models.config import ModelConfig
from rl4llm.parallel.tpu import Phase
from rl4llm.rl import registry


def per_device_bytes(tree: Any) -> float:
    """Bytes of one device's shards of a tree of ShapeDtypeStructs carrying NamedShardings."""
    return float(sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(tree)))


class Costs:
    """Phases of the programs of one mesh (`mesh_shape`: axis name -> size) for `model_cfg`."""

    def __init__(self, model_cfg: ModelConfig, mesh_shape: dict):
        self.cfg = model_cfg
        self.tensor = mesh_shape.get("tensor", 1)
        self.batch_shards = mesh_shape.get("data", 1) * mesh_shape.get("fsdp", 1)

    def weights_read(self) -> float:
        """Bytes of matmul weights one chip streams in one pass: (N_trunk + E·V)·itemsize(param_dtype) / tensor."""
        n = flops_lib.trunk_matmul_params(self.cfg) + flops_lib.unembed_params(self.cfg)
        return n * jnp.dtype(self.cfg.param_dtype).itemsize / self.tensor

    def recompute_flops(self, rows: int, length: int, logit_tokens: int, prompt_group: int = 1) -> float:
        """What the backward pass recomputes: "full" the blocks' forward, "dots" (weight matmuls' outputs saved)
        the attention's q.k and p.v, "none" nothing (each group's prompt once with `prompt_group` > 1)."""
        if self.cfg.remat == "full":
            return flops_lib.trunk_forward_flops(self.cfg, rows, length, logit_tokens, prompt_group)
        if self.cfg.remat == "dots":
            return flops_lib.learner_attention_flops(self.cfg, rows, length, logit_tokens, prompt_group)
        return 0.0

    def _trained(self, name: str, params, opt_state, rows: int, length: int, logit_tokens: int,
                 micro_batch_size: int, prompt_group: int = 1) -> list[Phase]:
        """Forward + backward (2x the forward) + rematerialisation of a decoder over `rows` x `length` tokens in
        micro-batches (each group's prompt once with `prompt_group` > 1), then the optimizer update of `params`
        (trained leaves) with `opt_state`."""
        n_micro = rows // (micro_batch_size or rows)
        fwd = flops_lib.learner_forward_flops(self.cfg, rows, length, logit_tokens, prompt_group)
        remat = self.recompute_flops(rows, length, logit_tokens, prompt_group)
        passes = 2 + (self.cfg.remat == "full")
        grads = per_device_bytes(params)
        streamed = n_micro * (passes * self.weights_read() + 2 * grads)
        return [Phase(f"{name} fwd+bwd", 3 * fwd + remat, 3 * fwd, streamed),
                Phase(f"{name} optimizer", 0.0, 0.0, 2 * per_device_bytes(opt_state) + 3 * grads)]

    def learner(self, lcfg, state, batch) -> list[Phase]:
        """The learner step on `batch`: policy forward + backward (+ remat) and update, the KL reference's forward,
        and the extra forward of losses that read whole-minibatch token statistics (`registry.TOKEN_STATISTICS`)."""
        rows, length = batch.tokens.shape
        t = batch.completion_mask.shape[1]
        n_micro = rows // (lcfg.micro_batch_size or rows)
        phases = self._trained("policy", lora.trainable(state.params), state.opt_state, rows, length, t,
                               lcfg.micro_batch_size, lcfg.prompt_group)
        fwd = flops_lib.learner_forward_flops(self.cfg, rows, length, t, lcfg.prompt_group)
        if lcfg.kl_coef > 0:
            phases.append(Phase("reference fwd", fwd, fwd, n_micro * self.weights_read()))
        if lcfg.loss in registry.TOKEN_STATISTICS and n_micro > 1:
            phases.append(Phase("token statistics fwd", fwd, fwd, n_micro * self.weights_read()))
        return phases

    def critic(self, lcfg, critic_state, batch) -> list[Phase]:
        """A separate critic's step: its decoder's forward + backward (+ remat) and update (no logits)."""
        rows, length = batch.tokens.shape
        return self._trained("critic", critic_state.params, critic_state.opt_state, rows, length, 0,
                             lcfg.micro_batch_size)

    def forward(self, name: str, batch, micro_batch_size: int, prompt_group: int = 1) -> list[Phase]:
        """One forward pass over the batch (log-probs of the completion tokens), the weights streamed once per
        micro-batch (`train.programs`' behaviour pass runs micro-batches of `rl.micro_batch_size` rows; each group's
        prompt once with `prompt_group` > 1)."""
        rows, length = batch.tokens.shape
        n_micro = rows // micro_batch_size if micro_batch_size and rows % micro_batch_size == 0 else 1
        fwd = flops_lib.learner_forward_flops(self.cfg, rows, length, batch.completion_mask.shape[1], prompt_group)
        return [Phase(f"{name} fwd", fwd, fwd, n_micro * self.weights_read())]

    def kv_cache_read(self, rows: int, slots: int) -> float:
        """Bytes of one chip's KV cache: rows over the batch axes, kv heads over `tensor` where they divide."""
        cfg = self.cfg
        local_rows = rows // self.batch_shards if rows % self.batch_shards == 0 else rows
        heads = cfg.num_kv_heads // self.tensor if cfg.num_kv_heads % self.tensor == 0 else cfg.num_kv_heads
        return 2.0 * cfg.num_layers * local_rows * heads * slots * cfg.head_dim * jnp.dtype(cfg.dtype).itemsize

    def prefill_mlp_bytes(self, rows: int, length: int) -> float:
        """Bytes of one chip's SwiGLU gate and up outputs ([rows, length, I] each, compute dtype) in a forward over
        `rows` x `length` tokens: live at once in every block, so a floor on that forward's temporaries."""
        cfg = self.cfg
        local_rows = rows // self.batch_shards if rows % self.batch_shards == 0 else rows
        width = cfg.intermediate_size // self.tensor if cfg.intermediate_size % self.tensor == 0 else \
            cfg.intermediate_size
        return 2.0 * local_rows * length * width * jnp.dtype(cfg.dtype).itemsize

    def generate(self, rows: int, prompt_len: int, new_tokens: int, prefill_rows: int | None = None) -> list[Phase]:
        """Prefill of the prompts (logits of the last token only; `prefill_rows` distinct prompts forked to the
        `rows` when given, else one per row), then `new_tokens - 1` decode steps, each reading every weight and
        the whole cache (the loop runs that many when no row stops early)."""
        prefill = flops_lib.sequence_forward_flops(self.cfg, prefill_rows or rows, prompt_len, 1)
        decode = flops_lib.decode_flops(self.cfg, rows, prompt_len, new_tokens)
        step_bytes = self.weights_read() + self.kv_cache_read(rows, prompt_len + new_tokens)
        return [Phase("prefill", prefill, prefill, self.weights_read()),
                Phase("decode", decode, decode, max(new_tokens - 1, 0) * step_bytes)]

    def transfer(self, params, sampler_params) -> list[Phase]:
        """The learner -> sampler reshard: each chip reads its learner shards and writes its sampler shards."""
        return [Phase("reshard", 0.0, 0.0, per_device_bytes(params) + per_device_bytes(sampler_params))]
