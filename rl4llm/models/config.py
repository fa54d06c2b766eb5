"""Decoder configuration and named presets (shapes only; nothing is downloaded)."""
from __future__ import annotations

import dataclasses

REMAT_MODES = ("none", "full", "dots")
# Projections that can carry LoRA adapters (ModelConfig.lora_targets).
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclasses.dataclass(frozen=True)
class Llama3RopeScaling:
    """Llama 3.1+ RoPE frequency scaling (HF `rope_type: "llama3"`; Meta's `apply_scaling`).

    With wavelength w_j = 2*pi / inv_freq_j and L = original_max_position_embeddings:
    w_j < L / high_freq_factor keeps inv_freq_j; w_j > L / low_freq_factor divides it by `factor`;
    in between, inv_freq_j <- (1 - s) * inv_freq_j / factor + s * inv_freq_j, s = (L / w_j - low) / (high - low).
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self):
        if not self.high_freq_factor > self.low_freq_factor > 0 or self.factor <= 0:
            raise ValueError(
                "Llama3RopeScaling needs factor > 0 and high_freq_factor > low_freq_factor > 0, got "
                f"{self}.")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a decoder-only transformer (Llama / Qwen2 / Qwen3 family).

    Frozen (hashable) so it can be a static argument of `jax.jit`.

    Attributes:
        vocab_size: number of token ids (rows of the embedding table).
        hidden_size: model width E.
        num_layers: number of decoder blocks.
        num_heads: query heads H.
        num_kv_heads: key/value heads Hkv (grouped-query attention; H % Hkv == 0).
        head_dim: per-head width D (even, for RoPE).
        intermediate_size: SwiGLU hidden width I: down(silu(gate(x)) * up(x)).
        rope_theta: RoPE base; inv_freq_j = theta^(-2j/D).
        rope_scaling: None, or the Llama 3.1+ rescaling of those frequencies (`Llama3RopeScaling`).
        rms_norm_eps: epsilon inside RMSNorm's rsqrt.
        qkv_bias: q/k/v projections carry a bias (Qwen2); o_proj never does.
        qk_norm: RMSNorm over head_dim on q and k, before RoPE (Qwen3).
        tie_embeddings: the lm head is the transposed input embedding.
        init_std: HF init, every linear/embedding weight ~ N(0, init_std^2); biases 0; norm scales 1.
        dtype: activation/compute dtype (softmax and norms always run in float32).
        param_dtype: storage dtype of the parameters.
        remat: what the backward pass keeps of each decoder block of a cache-free forward (training):
            "none" keeps every intermediate; "full" keeps only the block's input and recomputes the
            rest (`jax.checkpoint`, one extra block forward in the backward pass); "dots" keeps the
            outputs of the weight matmuls and recomputes the rest (attention included). Forward-only
            passes and cached decoding compute the same thing under every setting.
        attention_query_chunk: a cache-free forward longer than this many tokens computes attention
            for this many queries at a time (each chunk against all its keys, so the softmax is exact),
            so [B, H, chunk, S] float32 scores exist at once instead of [B, H, L, S]; each chunk is
            recomputed in the backward pass. 0 = never chunk.
        lora_rank: r > 0 adds LoRA adapters (Hu et al. 2021) to the projections named in `lora_targets`:
            y = x W + (lora_alpha / r) (x A) B with A [in..., r], B [r, out...] (params `lora_a`, `lora_b`;
            created zero by `init_params`, drawn by `rl4llm.models.lora.init_adapters`). 0 = no adapters.
        lora_alpha: LoRA scale numerator (scale = lora_alpha / lora_rank, as in PEFT).
        lora_targets: names from LORA_TARGETS.
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rope_scaling: Llama3RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = True
    qk_norm: bool = False
    tie_embeddings: bool = True
    init_std: float = 0.02
    dtype: str = "float32"
    param_dtype: str = "float32"
    remat: str = "full"
    attention_query_chunk: int = 128
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = ()

    def __post_init__(self):
        if self.remat not in REMAT_MODES:
            raise ValueError(f"ModelConfig.remat must be one of {REMAT_MODES}, got {self.remat!r}.")
        if self.attention_query_chunk < 0:
            raise ValueError(f"ModelConfig.attention_query_chunk must be >= 0 (0 = no chunking), got "
                             f"{self.attention_query_chunk}.")
        if (self.lora_rank < 0 or not isinstance(self.lora_targets, tuple)
                or set(self.lora_targets) - set(LORA_TARGETS)):
            raise ValueError(f"ModelConfig.lora_rank must be >= 0 and lora_targets a tuple of names from "
                             f"{LORA_TARGETS}, got lora_rank={self.lora_rank}, lora_targets={self.lora_targets!r}.")
        if self.lora_rank and not self.lora_targets:
            raise ValueError(f"ModelConfig.lora_rank={self.lora_rank} needs lora_targets (names from {LORA_TARGETS}).")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "head_dim", "intermediate_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"ModelConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention.")
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}.")


PRESETS: dict[str, ModelConfig] = {
    # Benchmark models of ../shared/bench/WORKLOADS.md (Qwen2 architecture).
    "tiny": ModelConfig(vocab_size=1024, hidden_size=256, num_layers=4, num_heads=4,
                        num_kv_heads=2, head_dim=64, intermediate_size=1024),
    "small": ModelConfig(vocab_size=8192, hidden_size=512, num_layers=8, num_heads=8,
                         num_kv_heads=4, head_dim=64, intermediate_size=2048),
    # Smallest useful decoder, for tests and smoke runs; override vocab_size with the tokenizer's.
    "nano": ModelConfig(vocab_size=256, hidden_size=32, num_layers=2, num_heads=2,
                        num_kv_heads=1, head_dim=16, intermediate_size=64),
    # Default model of the built-in arithmetic task; override vocab_size with the tokenizer's.
    "arith": ModelConfig(vocab_size=256, hidden_size=128, num_layers=4, num_heads=4,
                         num_kv_heads=2, head_dim=32, intermediate_size=512),
    # Real checkpoint shapes.
    "qwen2.5-0.5b": ModelConfig(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14,
                                num_kv_heads=2, head_dim=64, intermediate_size=4864,
                                rope_theta=1e6, rms_norm_eps=1e-6),
    "llama3.2-1b": ModelConfig(vocab_size=128256, hidden_size=2048, num_layers=16, num_heads=32,
                               num_kv_heads=8, head_dim=64, intermediate_size=8192,
                               rope_theta=500000.0, rms_norm_eps=1e-5, qkv_bias=False,
                               rope_scaling=Llama3RopeScaling(32.0, 1.0, 4.0, 8192)),
    # Real-scale shapes (the checkpoints' config.json: Qwen/Qwen2.5-{1.5B,7B,32B}, meta-llama/Llama-3.1-{8B,70B}),
    # for ahead-of-time compilation and memory planning (experiments/compile_for_tpu.py, configs/scale/).
    "qwen2.5-1.5b": ModelConfig(vocab_size=151936, hidden_size=1536, num_layers=28, num_heads=12,
                                num_kv_heads=2, head_dim=128, intermediate_size=8960,
                                rope_theta=1e6, rms_norm_eps=1e-6),
    "qwen2.5-7b": ModelConfig(vocab_size=152064, hidden_size=3584, num_layers=28, num_heads=28,
                              num_kv_heads=4, head_dim=128, intermediate_size=18944,
                              rope_theta=1e6, rms_norm_eps=1e-6, tie_embeddings=False),
    "qwen2.5-32b": ModelConfig(vocab_size=152064, hidden_size=5120, num_layers=64, num_heads=40,
                               num_kv_heads=8, head_dim=128, intermediate_size=27648,
                               rope_theta=1e6, rms_norm_eps=1e-5, tie_embeddings=False),
    "llama3.1-8b": ModelConfig(vocab_size=128256, hidden_size=4096, num_layers=32, num_heads=32,
                               num_kv_heads=8, head_dim=128, intermediate_size=14336,
                               rope_theta=500000.0, rms_norm_eps=1e-5, qkv_bias=False, tie_embeddings=False,
                               rope_scaling=Llama3RopeScaling(8.0, 1.0, 4.0, 8192)),
    "llama3.1-70b": ModelConfig(vocab_size=128256, hidden_size=8192, num_layers=80, num_heads=64,
                                num_kv_heads=8, head_dim=128, intermediate_size=28672,
                                rope_theta=500000.0, rms_norm_eps=1e-5, qkv_bias=False, tie_embeddings=False,
                                rope_scaling=Llama3RopeScaling(8.0, 1.0, 4.0, 8192)),
}


def get_config(name: str, **overrides) -> ModelConfig:
    """Returns preset `name` with dataclass fields replaced by `overrides`."""
    if name not in PRESETS:
        raise ValueError(f"Unknown model preset {name!r}; available presets: {sorted(PRESETS)}.")
    return dataclasses.replace(PRESETS[name], **overrides)
