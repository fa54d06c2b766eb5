"""The sampler: jitted prefill + while-loop decode with a KV cache, returning a Rollout."""
from rl4llm.sampling.sampler import (
    Rollout,
    SamplingConfig,
    bucket_length,
    categorical_by_blocks,
    entropy_temperature,
    filter_min_p,
    filter_top_k,
    filter_top_p,
    generate,
    pad_prompts,
    sample_tokens,
)

__all__ = [
    "Rollout", "SamplingConfig", "bucket_length", "categorical_by_blocks", "entropy_temperature", "filter_min_p",
    "filter_top_k", "filter_top_p", "generate", "pad_prompts", "sample_tokens",
]
