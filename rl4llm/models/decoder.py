"""Decoder-only transformer (Llama / Qwen2 / Qwen3 switches) as Flax NNX modules, behind a pure API.

The NNX modules below define the parameters (with logical axis names as `out_sharding` metadata) and the
computation. The rest of the codebase only uses the functional boundary at the bottom of this file:
params are a plain nested dict of arrays (`nnx.State.to_pure_dict()`), and every function takes the
static, hashable `ModelConfig` first, so `jax.jit(functools.partial(apply, cfg))` works.

Parameter layout (logical axis names in brackets):
  embed:                 [vocab, embed]
  layers[i].input_norm.scale, post_attn_norm.scale: [embed]
  layers[i].attn.q_proj.kernel [embed, heads, head_dim],    .bias [heads, head_dim]     (qkv_bias)
  layers[i].attn.k_proj.kernel [embed, kv_heads, head_dim], .bias [kv_heads, head_dim]  (qkv_bias)
  layers[i].attn.v_proj: same as k_proj
  layers[i].attn.o_proj.kernel [heads, head_dim, embed]
  layers[i].attn.q_norm.scale, k_norm.scale: [head_dim]                                 (qk_norm)
  layers[i].mlp.gate_proj.kernel, up_proj.kernel [embed, mlp]; down_proj.kernel [mlp, embed]
  final_norm.scale:      [embed]
  lm_head:               [embed, vocab]                                                  (not tied)
(`layers` is a dict keyed by the int layer index.)
"""
from __future__ import annotations

import functools
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from rl4llm.models import sharding
from rl4llm.models.config import Llama3RopeScaling, ModelConfig

Params = dict[str, Any]
LogicalAxes = tuple[str | None, ...]

# Finite "minus infinity" for masked attention scores: a fully masked row gives a uniform (finite) softmax.
_MASK_VALUE = -1e30


# ----------------------------------------------------------------------------------------------------
# Parameter helpers
# ----------------------------------------------------------------------------------------------------


def _param(value: jax.Array, axes: LogicalAxes) -> nnx.Param:
    """An nnx.Param annotated with logical axis names (lazy: no mesh is needed to create it)."""
    return nnx.Param(value, out_sharding=axes, eager_sharding=False)


class NormalStream:
    """Standard-normal init values handed out as consecutive slices of ONE flat draw.

    One threefry call for the whole model instead of one per weight, so compiling `init_params` takes
    a fraction of a second instead of several (XLA compile time grows with the number of RNG calls).
    With key=None it only counts the values requested (returns zeros; for abstract evaluation).
    """

    def __init__(self, key: jax.Array | None, size: int):
        self.flat = None if key is None else jax.random.normal(key, (size,), jnp.float32)  # [size]
        self.used = 0

    def __call__(self, shape: tuple[int, ...]) -> jax.Array:
        start, self.used = self.used, self.used + math.prod(shape)
        if self.flat is None:
            return jnp.zeros(shape, jnp.float32)
        return self.flat[start:self.used].reshape(shape)


def _normal(normals: NormalStream, shape: tuple[int, ...], axes: LogicalAxes, cfg: ModelConfig
            ) -> nnx.Param:
    """HF initialisation of a weight: N(0, init_std^2)."""
    return _param((cfg.init_std * normals(shape)).astype(cfg.param_dtype), axes)


def _constant(fill: float, shape: tuple[int, ...], axes: LogicalAxes, cfg: ModelConfig) -> nnx.Param:
    return _param(jnp.full(shape, fill, cfg.param_dtype), axes)


# ----------------------------------------------------------------------------------------------------
# NNX modules
# ----------------------------------------------------------------------------------------------------


class RMSNorm(nnx.Module):
    """y = x / sqrt(mean(x^2, -1) + eps) * scale, computed in float32, returned in x's dtype."""

    def __init__(self, dim: int, axis: str, cfg: ModelConfig):
        self.eps = cfg.rms_norm_eps
        self.scale = _constant(1.0, (dim,), (axis,), cfg)

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * self.scale[...].astype(jnp.float32)).astype(x.dtype)


def contract_leading(x: jax.Array, kernel: jax.Array, n_in: int) -> jax.Array:
    """y[..., out] = sum_in x[..., in] kernel[in, out]: x's last `n_in` dims against the kernel's first `n_in`.

    The einsum of every projection here ("ble,ei->bli", "ble,ehd->blhd", "blhd,hde->ble"), computed as ONE
    2-D matmul [rows, in] @ [in, out] between reshapes. Same arithmetic; what changes is the backward pass on
    XLA CPU: the weight gradient of a 3-D einsum contracts two dims (b, l) and compiles to a plain dot with a
    transposed operand, while the 2-D form's is a [in, rows] @ [rows, out] matmul (tiny model, 64 x 96 tokens,
    gate projection: its forward + weight gradient 67 ms as an einsum, 37 ms as a 2-D matmul; the tiny trunk's
    forward + backward 2.04 s -> 1.49 s).
    """
    batch_shape, out_shape = x.shape[:x.ndim - n_in], kernel.shape[n_in:]
    rows = x.reshape(math.prod(batch_shape), -1)
    return jnp.dot(rows, kernel.reshape(rows.shape[1], -1)).reshape(*batch_shape, *out_shape)


class DenseGeneral(nnx.Module):
    """y = einsum(equation, x, kernel) (+ bias) (+ LoRA: scale * (x A) B), in the compute dtype.

    `equation` contracts x's trailing dims with the kernel's leading ones (computed by `contract_leading`)."""

    def __init__(self, equation: str, kernel_shape: tuple[int, ...], kernel_axes: LogicalAxes,
                 bias_ndim: int, cfg: ModelConfig, normals: NormalStream, name: str = ""):
        """`bias_ndim` trailing kernel dims carry a (zero-initialised) bias; 0 = no bias.

        `name` in cfg.lora_targets adds zero LoRA params lora_a [in..., r] and lora_b [r, out...] (the
        kernel's leading dims are the ones contracted with x).
        """
        self.equation = equation
        self.dtype = jnp.dtype(cfg.dtype)
        self.kernel = _normal(normals, kernel_shape, kernel_axes, cfg)
        self.bias = (_constant(0.0, kernel_shape[-bias_ndim:], kernel_axes[-bias_ndim:], cfg)
                     if bias_ndim else None)
        rank = cfg.lora_rank if name in cfg.lora_targets else 0
        x_dims, kernel_dims = equation.split("->")[0].split(",")
        n_in = sum(c in x_dims for c in kernel_dims)
        self.n_in = n_in  # x's trailing dims contracted with the kernel's leading ones
        batch_dims = "".join(c for c in x_dims if c not in kernel_dims)
        self.lora_scale = cfg.lora_alpha / rank if rank else 0.0
        self.lora_equations = (f"{x_dims},{kernel_dims[:n_in]}r->{batch_dims}r",
                               f"{batch_dims}r,r{kernel_dims[n_in:]}->{equation.split('->')[1]}")
        self.lora_a = (_constant(0.0, kernel_shape[:n_in] + (rank,), kernel_axes[:n_in] + (None,), cfg)
                       if rank else None)
        self.lora_b = (_constant(0.0, (rank,) + kernel_shape[n_in:], (None,) + kernel_axes[n_in:], cfg)
                       if rank else None)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x.astype(self.dtype)
        y = contract_leading(x, self.kernel[...].astype(self.dtype), self.n_in)
        if self.bias is not None:
            y = y + self.bias[...].astype(self.dtype)
        if self.lora_a is not None:
            xa = jnp.einsum(self.lora_equations[0], x, self.lora_a[...].astype(self.dtype))  # [..., r]
            y = y + self.lora_scale * jnp.einsum(self.lora_equations[1], xa, self.lora_b[...].astype(self.dtype))
        return y


def rope_inv_freq(head_dim: int, theta: float, scaling: Llama3RopeScaling | None = None) -> jax.Array:
    """HF RoPE inverse frequencies inv_freq_j = theta^(-2j/D), j < D/2, float32 [D/2].

    With `scaling`, the Llama 3.1+ rescaling (HF `_compute_llama3_parameters`; see `Llama3RopeScaling`).
    """
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)  # [D/2]
    if scaling is None:
        return inv_freq
    old_len = scaling.original_max_position_embeddings
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > old_len / scaling.low_freq_factor, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    medium = (wavelen >= old_len / scaling.high_freq_factor) & (wavelen <= old_len / scaling.low_freq_factor)
    return jnp.where(medium, smoothed, scaled)


def rope_cos_sin(positions: jax.Array, head_dim: int, theta: float,
                 scaling: Llama3RopeScaling | None = None) -> tuple[jax.Array, jax.Array]:
    """HF RoPE tables: angle = pos * inv_freq (`rope_inv_freq`), tables = cat(angle, angle).

    positions: [B, L] int. Returns cos, sin: [B, L, D] float32.
    """
    angles = positions.astype(jnp.float32)[..., None] * rope_inv_freq(head_dim, theta, scaling)  # [B, L, D/2]
    angles = jnp.concatenate([angles, angles], axis=-1)  # [B, L, D]
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """HF "rotate_half" RoPE: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).

    x: [B, L, heads, D]; cos, sin: [B, L, D]. Computed in float32, returned in x's dtype.
    """
    x32 = x.astype(jnp.float32)
    x1, x2 = jnp.split(x32, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return (x32 * cos[:, :, None] + rotated * sin[:, :, None]).astype(x.dtype)


def attention_mask_for(query_slots: jax.Array, key_mask: jax.Array) -> jax.Array:
    """Causal + key-padding mask: query at slot s sees key slot t iff t <= s and key_mask[t].

    query_slots: [L] int; key_mask: [B, S] bool. Returns [B, L, S] bool.
    """
    key_slots = jnp.arange(key_mask.shape[-1])
    causal = key_slots[None, :] <= query_slots[:, None]  # [L, S]
    return causal[None] & key_mask[:, None, :]


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """softmax(q k^T / sqrt(D) masked) v with grouped-query heads; scores and softmax in float32.

    q: [B, L, H, D]; k, v: [B, Hkv, S, D] (the KV cache's layout); mask: [B, L, S] bool. Returns [B, L, H, D].
    Query head h uses kv head h // (H / Hkv) (HF `repeat_kv` order). Both dots keep the batch dims (B, Hkv, G)
    leading in operands and output, the layout XLA CPU runs fastest (tiny, one decode step of 64 rows: the
    probs @ v dot took 629 us with the output as [B, L, Hkv, G, D], 80 us as [B, Hkv, G, L, D]).
    """
    b, l, h, d = q.shape
    hkv = k.shape[1]
    q = jnp.moveaxis(q.reshape(b, l, hkv, h // hkv, d), 1, 3)  # [B, Hkv, G, L, D]
    scores = jnp.einsum("bkgld,bksd->bkgls", q, k, preferred_element_type=jnp.float32)
    scores = scores * (d ** -0.5)  # [B, Hkv, G, L, S]
    scores = jnp.where(mask[:, None, None], scores, _MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgls,bksd->bkgld", probs, v)  # [B, Hkv, G, L, D]
    return jnp.moveaxis(out, 3, 1).reshape(b, l, h, d)


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                          query_chunk: int = 0) -> jax.Array:
    """`_attend` (softmax(q k^T / sqrt(D) masked) v, GQA), `query_chunk` queries at a time when L > query_chunk.

    q: [B, L, H, D]; k, v: [B, Hkv, S, D]; mask: [B, L, S] bool. Returns [B, L, H, D].
    Every query chunk sees all S keys, so each softmax is exact and the result equals the unchunked
    one; only [B, H, query_chunk, S] float32 scores exist at once. Each chunk runs under
    `jax.checkpoint`, so the backward pass recomputes its probabilities instead of storing
    [B, H, L, S] of them. L is padded to a multiple of the chunk with queries that see no key (their
    finite outputs are dropped). query_chunk=0: one chunk.
    """
    b, l, h, d = q.shape
    if not query_chunk or l <= query_chunk:
        return _attend(q, k, v, mask)
    num_chunks = -(-l // query_chunk)
    pad = num_chunks * query_chunk - l
    q = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0)))  # [B, n*c, H, D]
    mask = jnp.pad(mask, ((0, 0), (0, pad), (0, 0)))  # [B, n*c, S], padded queries see nothing
    q_chunks = jnp.moveaxis(q.reshape(b, num_chunks, query_chunk, h, d), 1, 0)  # [n, B, c, H, D]
    mask_chunks = jnp.moveaxis(mask.reshape(b, num_chunks, query_chunk, -1), 1, 0)  # [n, B, c, S]
    attend_chunk = jax.checkpoint(lambda chunk: _attend(chunk[0], k, v, chunk[1]))
    out = jax.lax.map(attend_chunk, (q_chunks, mask_chunks))  # [n, B, c, H, D]
    return jnp.moveaxis(out, 0, 1).reshape(b, num_chunks * query_chunk, h, d)[:, :l]


class Attention(nnx.Module):
    """Multi-head attention with GQA, RoPE, optional q/k/v bias and optional per-head QK RMSNorm."""

    def __init__(self, cfg: ModelConfig, normals: NormalStream):
        e, h, hkv, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        bias = 2 if cfg.qkv_bias else 0
        self.q_proj = DenseGeneral("ble,ehd->blhd", (e, h, d), ("embed", "heads", "head_dim"),
                                   bias, cfg, normals, "q_proj")
        self.k_proj = DenseGeneral("ble,ehd->blhd", (e, hkv, d), ("embed", "kv_heads", "head_dim"),
                                   bias, cfg, normals, "k_proj")
        self.v_proj = DenseGeneral("ble,ehd->blhd", (e, hkv, d), ("embed", "kv_heads", "head_dim"),
                                   bias, cfg, normals, "v_proj")
        self.o_proj = DenseGeneral("blhd,hde->ble", (h, d, e), ("heads", "head_dim", "embed"),
                                   0, cfg, normals, "o_proj")
        self.q_norm = RMSNorm(d, "head_dim", cfg) if cfg.qk_norm else None
        self.k_norm = RMSNorm(d, "head_dim", cfg) if cfg.qk_norm else None
        self.query_chunk = cfg.attention_query_chunk

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 cache_kv: tuple[jax.Array, jax.Array] | None,
                 cache_index: jax.Array | None) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """x: [B, L, E]; cos, sin: [B, L, D]; mask: [B, L, L] without a cache, [B, L, S] with one.

        cache_kv: None, or this layer's cache (k, v), each [B, Hkv, S, D]; this call writes its k, v at
        [:, :, cache_index:cache_index+L] and attends to the whole cache.
        Returns the output [B, L, E] and the updated (k, v) cache (None without one).
        """
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)  # [B, L, H|Hkv, D]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        k, v = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)  # [B, Hkv, L, D]
        if cache_kv is None:
            return self.o_proj(dot_product_attention(q, k, v, mask, self.query_chunk)), None
        cache_k, cache_v = (jax.lax.dynamic_update_slice(c, new.astype(c.dtype), (0, 0, cache_index, 0))
                            for c, new in zip(cache_kv, (k, v)))
        out = dot_product_attention(q, cache_k, cache_v, mask, self.query_chunk)
        return self.o_proj(out), (cache_k, cache_v)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig, normals: NormalStream):
        e, i = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = DenseGeneral("ble,ei->bli", (e, i), ("embed", "mlp"), 0, cfg, normals, "gate_proj")
        self.up_proj = DenseGeneral("ble,ei->bli", (e, i), ("embed", "mlp"), 0, cfg, normals, "up_proj")
        self.down_proj = DenseGeneral("bli,ie->ble", (i, e), ("mlp", "embed"), 0, cfg, normals, "down_proj")

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nnx.Module):
    """Pre-norm block: x += attn(norm(x)); x += mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, normals: NormalStream):
        self.input_norm = RMSNorm(cfg.hidden_size, "embed", cfg)
        self.attn = Attention(cfg, normals)
        self.post_attn_norm = RMSNorm(cfg.hidden_size, "embed", cfg)
        self.mlp = MLP(cfg, normals)

    def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, mask: jax.Array,
                 cache_kv: tuple[jax.Array, jax.Array] | None,
                 cache_index: jax.Array | None) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """See `Attention.__call__`; returns the block output [B, L, E] and the updated cache (k, v)."""
        attn_out, cache_kv = self.attn(self.input_norm(x), cos, sin, mask, cache_kv, cache_index)
        x = x + attn_out
        return x + self.mlp(self.post_attn_norm(x)), cache_kv


_REMAT_POLICIES = {"full": jax.checkpoint_policies.nothing_saveable,
                   "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable}


def _block_without_cache(layer: DecoderLayer, x: jax.Array, cos: jax.Array, sin: jax.Array,
                         mask: jax.Array) -> jax.Array:
    """One decoder block of a cache-free forward: x [B, L, E] -> [B, L, E] (rows kept batch-sharded under a mesh)."""
    return sharding.constrain_rows(layer(x, cos, sin, mask, None, None)[0])


def _run_blocks(layers: nnx.List, remat: str, x: jax.Array, cos: jax.Array, sin: jax.Array,
                 mask: jax.Array) -> jax.Array:
    """x [B, L, E] through every block of a cache-free forward.

    remat "none": an unrolled loop of bare blocks (fastest: no stacking of the params, no loop carry; the
    default config's whole RL step, arith model, 256 x 48 tokens, random params: 2.53 s with the scan below,
    2.32 s unrolled, medians of 5 steps on 2 CPU cores).
    Otherwise one `lax.scan` over the blocks' stacked params, each step under `jax.checkpoint` with the
    `ModelConfig.remat` policy. The scan makes the backward pass run block by block, so it holds one block's
    recomputed intermediates at a time. (With an unrolled loop of checkpointed blocks, XLA's CPU scheduler
    hoists the recomputations and keeps nearly all of them: small, 1 x 1056 tokens, 450 MB of temp
    buffers against 308 MB with the scan.)
    """
    if remat == "none":
        for layer in layers:
            x = _block_without_cache(layer, x, cos, sin, mask)
        return x
    graphdef, stacked = _stacked_layers(layers)

    def block(x, state):
        return _block_without_cache(nnx.merge(graphdef, state), x, cos, sin, mask), None

    block = jax.checkpoint(block, policy=_REMAT_POLICIES[remat], prevent_cse=False)
    return jax.lax.scan(block, x, stacked)[0]


def _stacked_layers(layers: nnx.List) -> tuple[nnx.GraphDef, Any]:
    """The blocks' graphdef and their params stacked along a new leading [layers] axis (a scan's xs)."""
    graphdef, _ = nnx.split(layers[0])
    return graphdef, jax.tree.map(lambda *xs: jnp.stack(xs), *(nnx.state(layer) for layer in layers))


def _run_cached_blocks_remat(layers: nnx.List, remat: str, x: jax.Array, cos: jax.Array, sin: jax.Array,
                             mask: jax.Array, cache: "KVCache", cache_index: jax.Array
                             ) -> tuple[jax.Array, tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """x [B, L, E] through every block of a cached forward that is differentiated (the learner's shared-prompt
    path, `completion_hidden`), as `_run_blocks` does without a cache: one `lax.scan` over the stacked params and
    the stacked per-layer cache, each step under `jax.checkpoint` with the `remat` policy, so the backward pass
    holds one block's recomputed intermediates at a time. Returns x and the updated per-layer (k, v) caches. The
    sampler's decode never takes this path (it is not differentiated, and stacking the cache copies it)."""
    graphdef, stacked = _stacked_layers(layers)

    def block(x, layer_state_kv):
        state, k, v = layer_state_kv
        x, kv = nnx.merge(graphdef, state)(x, cos, sin, mask, (k, v), cache_index)
        return sharding.constrain_rows(x), kv

    block = jax.checkpoint(block, policy=_REMAT_POLICIES[remat], prevent_cse=False)
    x, (new_k, new_v) = jax.lax.scan(block, x, (stacked, jnp.stack(cache.k), jnp.stack(cache.v)))
    return x, tuple(new_k), tuple(new_v)


class KVCache(flax.struct.PyTreeNode):
    """Static-size key/value cache.

    k, v:     one [B, Hkv, S, D] array per layer: post-RoPE keys and values per slot, in the layout the
              attention dots read, so a decode step neither slices nor transposes the cache (with one
              [layers, B, S, Hkv, D] array, those copies took 26 % of decode time).
    key_mask: [B, S] bool, True where the slot holds a real (non-padding) token.
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    key_mask: jax.Array


class Decoder(nnx.Module):
    """Token embedding, `num_layers` decoder blocks, final RMSNorm, tied or untied lm head."""

    def __init__(self, cfg: ModelConfig, normals: NormalStream):
        self.cfg = cfg
        self.embed = _normal(normals, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), cfg)
        self.layers = nnx.List([DecoderLayer(cfg, normals) for _ in range(cfg.num_layers)])
        self.final_norm = RMSNorm(cfg.hidden_size, "embed", cfg)
        self.lm_head = (None if cfg.tie_embeddings else
                        _normal(normals, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), cfg))

    def __call__(self, tokens: jax.Array, positions: jax.Array, attention_mask: jax.Array,
                 cache: KVCache | None, cache_index: jax.Array | int | None, cache_remat: bool = False
                 ) -> tuple[jax.Array, KVCache | None]:
        """tokens, positions, attention_mask: [B, L]. Returns hidden [B, L, E] (after the final norm).
        cache_remat: apply `cfg.remat` to the cached blocks too (`_run_cached_blocks_remat`)."""
        cfg = self.cfg
        attention_mask = attention_mask.astype(bool)
        x = sharding.constrain_rows(jnp.take(self.embed[...], tokens, axis=0).astype(cfg.dtype))  # [B, L, E]
        cos, sin = rope_cos_sin(positions, cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        length = tokens.shape[1]
        if cache is None:
            mask = attention_mask_for(jnp.arange(length), attention_mask)  # [B, L, L]
            x = _run_blocks(self.layers, cfg.remat, x, cos, sin, mask)
            return self.final_norm(x), None

        cache_index = jnp.asarray(cache_index, jnp.int32)
        key_mask = jax.lax.dynamic_update_slice(cache.key_mask, attention_mask, (0, cache_index))
        mask = attention_mask_for(cache_index + jnp.arange(length), key_mask)  # [B, L, S]
        if cache_remat and cfg.remat != "none":
            x, new_k, new_v = _run_cached_blocks_remat(self.layers, cfg.remat, x, cos, sin, mask, cache, cache_index)
            return self.final_norm(x), KVCache(k=new_k, v=new_v, key_mask=key_mask)
        new_k, new_v = [], []
        for layer, layer_k, layer_v in zip(self.layers, cache.k, cache.v):
            x, (layer_k, layer_v) = layer(x, cos, sin, mask, (layer_k, layer_v), cache_index)
            new_k.append(layer_k)
            new_v.append(layer_v)
        return self.final_norm(x), KVCache(k=tuple(new_k), v=tuple(new_v), key_mask=key_mask)

    def unembed(self, hidden: jax.Array) -> jax.Array:
        """logits = hidden @ W_out in float32; W_out = embed^T (tied) or lm_head. [..., E] -> [..., V]."""
        if self.lm_head is None:
            return jnp.einsum("...e,ve->...v", hidden, self.embed[...].astype(hidden.dtype),
                              preferred_element_type=jnp.float32)
        return jnp.einsum("...e,ev->...v", hidden, self.lm_head[...].astype(hidden.dtype),
                          preferred_element_type=jnp.float32)


# ----------------------------------------------------------------------------------------------------
# Functional API
# ----------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _abstract(cfg: ModelConfig) -> tuple[nnx.GraphDef, nnx.State, int]:
    """Graph definition, abstract (shape-only, metadata-carrying) state, number of N(0, 1) init values."""
    counter = NormalStream(None, 0)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Decoder(cfg, counter)))
    return graphdef, state, counter.used


def _model(cfg: ModelConfig, params: Params) -> Decoder:
    graphdef, _, _ = _abstract(cfg)
    return nnx.merge(graphdef, params)


@functools.partial(jax.jit, static_argnums=0)
def init_params(cfg: ModelConfig, key: jax.Array) -> Params:
    """Randomly initialised params (HF init: weights ~ N(0, init_std^2), biases 0, norm scales 1).

    Jitted; all random weights are slices of one N(0, 1) draw of `key` (see `NormalStream`).
    """
    _, _, size = _abstract(cfg)
    return nnx.to_pure_dict(nnx.state(Decoder(cfg, NormalStream(key, size))))


def param_logical_axes(cfg: ModelConfig) -> Any:
    """Same tree structure as `init_params`; each leaf is the tuple of the param's logical axis names."""
    _, state, _ = _abstract(cfg)
    axes = jax.tree.map(lambda v: v.get_metadata()["out_sharding"], state,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))
    return nnx.to_pure_dict(axes)


def init_cache(cfg: ModelConfig, batch_size: int, max_len: int) -> KVCache:
    """Empty cache of `max_len` slots: zeros, key_mask all False."""
    shape = (batch_size, cfg.num_kv_heads, max_len, cfg.head_dim)
    zeros = lambda: tuple(jnp.zeros(shape, cfg.dtype) for _ in range(cfg.num_layers))  # noqa: E731
    return KVCache(k=zeros(), v=zeros(), key_mask=jnp.zeros((batch_size, max_len), bool))


def fork_rows(rows_state: Any, source: jax.Array) -> Any:
    """Row j of every array of `rows_state` becomes a copy of row source[j]: a `KVCache` (every slot of every
    layer and its key_mask) together with the per-row state that goes with it (next-token logits, RoPE positions,
    prompt tokens), forked in one call.

    rows_state: a pytree of arrays whose first axis is the row, [B, ...]; source: [N] int32 in [0, B). Returns the
    same tree with [N, ...] arrays: N > B forks a prefilled prompt into the G rows of its group (`sampling.generate`
    with prompt_index), N = B copies a row over another (ARPO branching, `sampling.multi_turn`). Decoding from
    row j then continues exactly as from row source[j] (tested against prefilling each row's prefix from scratch).
    """
    return jax.tree.map(lambda x: jnp.take(x, source, axis=0), rows_state)


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """RoPE positions: cumsum(mask) - 1 clipped at 0, so left padding does not shift them. [B, L] int32."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


def forward(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array,
            attention_mask: jax.Array, *, cache: KVCache | None = None,
            cache_index: jax.Array | int | None = None, cache_remat: bool = False
            ) -> tuple[jax.Array, KVCache | None]:
    """Final-norm hidden states [B, L, E] of tokens [B, L] at RoPE `positions` [B, L].

    Without a cache: causal self-attention over the L tokens; keys where attention_mask == 0 are
    masked. With a cache: the L tokens are written to slots [cache_index, cache_index + L),
    key_mask of those slots := attention_mask, and each query at slot s attends to the slots <= s whose
    key_mask is True; the updated cache is returned. A query with no visible key yields finite garbage.
    `cfg.remat` applies to a cache-free forward; with a cache only when `cache_remat` (a differentiated cached
    forward: the learner's shared prompt), since the sampler's decode loop is never differentiated.
    """
    if (cache is None) != (cache_index is None):
        raise ValueError("forward: pass both `cache` and `cache_index`, or neither.")
    return _model(cfg, params)(tokens, positions, attention_mask, cache, cache_index, cache_remat)


def completion_hidden(cfg: ModelConfig, params: Params, tokens: jax.Array, attention_mask: jax.Array,
                      completion_len: int, prompt_group: int = 1) -> jax.Array:
    """Final-norm hidden states [B, T, E] that predict the last T = `completion_len` tokens of `tokens` [B, P+T]
    (`[prompt (left-padded) | completion]`): completion token t is predicted by position P+t−1. Positions follow
    the mask (`positions_from_mask`). Log-probs (`train.logprobs`) and values (`value_head`) read these.

    prompt_group = g > 1: the rows come in consecutive groups of g with the same prompt (tokens and mask of the
    first P columns), as a GRPO group does. Each prompt is then forwarded once into a KV cache that is forked to
    its g rows (`fork_rows`), and the completions are forwarded against it: the same function (up to rounding)
    for (g−1)/g of the prompt's FLOPs less, in the forward and the backward pass (the gradient reaches the prompt
    through the forked cache). `cfg.remat` applies to both cached forwards (`forward(cache_remat=True)`). B must be
    a multiple of g; the caller guarantees the shared prompts.
    """
    length = tokens.shape[1]
    if prompt_group == 1:
        hidden, _ = forward(cfg, params, tokens, positions_from_mask(attention_mask), attention_mask)
        return hidden[:, length - completion_len - 1 : length - 1]
    rows, prompt_len = tokens.shape[0], length - completion_len
    if rows % prompt_group:
        raise ValueError(f"completion_hidden: {rows} rows are not groups of prompt_group={prompt_group}.")
    positions = positions_from_mask(attention_mask)
    first_row = lambda x: x.reshape(rows // prompt_group, prompt_group, *x.shape[1:])[:, 0, :prompt_len]  # noqa: E731
    prompt_hidden, cache = forward(
        cfg, params, first_row(tokens), first_row(positions), first_row(attention_mask),
        cache=init_cache(cfg, rows // prompt_group, length), cache_index=0, cache_remat=True)
    # Each group's cache row (and last prompt state) repeated to its rows: `fork_rows` with source = row // g, as a
    # broadcast, which SPMD partitioners split along the rows (a gather made the TPU compiler fail on a data mesh).
    cache, last_prompt = jax.tree.map(lambda x: jnp.repeat(x, prompt_group, axis=0),
                                      (cache, prompt_hidden[:, prompt_len - 1 : prompt_len]))
    hidden, _ = forward(cfg, params, tokens[:, prompt_len:], positions[:, prompt_len:],
                        attention_mask[:, prompt_len:], cache=cache, cache_index=prompt_len, cache_remat=True)
    return jnp.concatenate([last_prompt, hidden[:, :completion_len - 1]], axis=1)  # last prompt state: token 0


def unembed(cfg: ModelConfig, params: Params, hidden: jax.Array) -> jax.Array:
    """Logits [..., V] float32 from final-norm hidden states [..., E]."""
    return _model(cfg, params).unembed(hidden)


def apply(cfg: ModelConfig, params: Params, tokens: jax.Array, positions: jax.Array,
          attention_mask: jax.Array, *, cache: KVCache | None = None,
          cache_index: jax.Array | int | None = None) -> tuple[jax.Array, KVCache | None]:
    """unembed(forward(...)): logits [B, L, V] float32 and the updated cache (None without one)."""
    hidden, cache = forward(cfg, params, tokens, positions, attention_mask, cache=cache,
                            cache_index=cache_index)
    return unembed(cfg, params, hidden), cache


def init_param_shardings(cfg: ModelConfig, mesh: jax.sharding.Mesh, rules=sharding.DEFAULT_RULES) -> Any:
    """NamedSharding of every param of `init_params(cfg, key)` (same tree), from `param_logical_axes(cfg)` and
    `rules` (`sharding.partition_spec`). For any other params tree (e.g. with LoRA adapters):
    `parallel.rules.param_shardings`."""
    shapes = jax.eval_shape(init_params, cfg, jax.random.key(0))
    return jax.tree.map(
        lambda a, s: jax.sharding.NamedSharding(mesh, sharding.partition_spec(a, s.shape, mesh, rules)),
        param_logical_axes(cfg),
        shapes,
        is_leaf=lambda x: isinstance(x, tuple),
    )
