"""Off-policy traces sampled from a teacher model (config.teacher): LUFFY's guidance from a stronger policy.

LUFFY (Yan et al. 2025) mixes k off-policy traces into each group of G rows; the paper's are DeepSeek-R1's solutions,
fixed in the data, and `rl.off_policy_traces` alone mixes in the task's reference solutions. With a teacher, the k
traces of each prompt are sampled from the teacher every step instead (fresh ones each step, from the step key):

    traces(x) = decode_teacher(y_1..y_k),   y_j ~ π_teacher(· | encode_teacher(x)) at teacher.temperature

decoded to text and re-encoded with the policy's tokenizer (`rollouts.with_traces`), so the teacher may be any
checkpoint: an rl4llm run's workdir (its newest RL checkpoint, else SFT) or an HF model directory with its own
tokenizer. The traces are scored like the policy's rows and keep LUFFY's convention π_b := 1 (the teacher's own
log-probs are not the behaviour policy's of the re-encoded tokens). A trace the teacher did not finish within
sampling.max_new_tokens (or longer than that in the policy's tokens) is cut there without its stop token and counts
as unfinished. Departure: LUFFY's traces were filtered for correctness offline; a teacher's are not (a wrong trace
gets its reward, and so its advantage, like any row; `off_policy/trace_reward` is logged).
Logged: teacher/finished_frac (traces that ended with the teacher's stop token), teacher/response_length (its tokens).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rl4llm import models
from rl4llm import sampling
from rl4llm.config import ConfigError
from rl4llm.train import batches


@dataclasses.dataclass(frozen=True)
class Teacher:
    """A frozen model that samples the traces: its config, params, tokenizer and sampling settings."""

    model_cfg: models.ModelConfig
    params: object
    tokenizer: object
    sampling_cfg: sampling.SamplingConfig
    prompt_bucket: int


def load(config) -> Teacher | None:
    """The teacher of `config.teacher` (None when unset); ConfigError naming the field when it cannot be read."""
    t = config.teacher
    if not (t.checkpoint or t.hf_checkpoint):
        return None
    field = f"config.teacher.{'checkpoint' if t.checkpoint else 'hf_checkpoint'}={t.checkpoint or t.hf_checkpoint!r}"
    try:
        if t.hf_checkpoint:
            from rl4llm.models import hf_checkpoint  # the `hf` extra
            from rl4llm.tokenizers import hf_tokenizer

            tokenizer = hf_tokenizer.HFTokenizer.load(t.hf_checkpoint)
            model_cfg, params = hf_checkpoint.load_hf_checkpoint(t.hf_checkpoint, dtype=config.model.dtype,
                                                                 param_dtype=config.model.param_dtype)
        else:
            from rl4llm.train import runs

            policy = runs.restore_policy(t.checkpoint, num_examples=1)
            policy.close()  # only its model and tokenizer are used
            model_cfg, params, tokenizer = policy.setup.model_cfg, policy.params, policy.setup.tokenizer
    except (OSError, ValueError) as e:
        raise ConfigError(f"{field}: {e}") from e
    sampling_cfg = sampling.SamplingConfig(max_new_tokens=config.sampling.max_new_tokens, temperature=t.temperature,
                                           stop_token_ids=tokenizer.stop_token_ids, pad_id=tokenizer.pad_id)
    return Teacher(model_cfg, params, tokenizer, sampling_cfg, config.sampling.prompt_bucket)


def sample_traces(teacher: Teacher, prompts: list, counts: list, key) -> tuple[list, np.ndarray, dict]:
    """`counts[i]` teacher completions of each `prompts[i]` as texts ([[str] * counts[i]] in prompt order), whether
    each one stopped (flat [sum(counts)] bool: the teacher emitted a stop token) and their metrics, in one sampler
    call of sum(counts) rows."""
    tokens, mask = batches.encode_prompts(teacher.tokenizer, prompts, teacher.prompt_bucket)
    rows = np.repeat(np.arange(len(prompts)), counts)
    rollout = sampling.generate(teacher.model_cfg, teacher.params, tokens[rows], mask[rows], key, teacher.sampling_cfg)
    completion_tokens, completion_mask, finished = jax.device_get(
        (rollout.completion_tokens, rollout.completion_mask, rollout.finished))
    texts = batches.decode_completions(teacher.tokenizer, completion_tokens, completion_mask)
    bounds = np.cumsum([0, *counts])
    traces = [texts[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    metrics = {"teacher/finished_frac": float(finished.mean()),
               "teacher/response_length": float(completion_mask.sum(-1).mean())}
    return traces, finished, metrics
