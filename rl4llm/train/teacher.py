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

With `config.teacher.traces_path` the traces come from a file instead (`rl4llm.data.trace_file`: format and draw):
`load_file_traces` reads it once at startup, `file_traces` draws each step's k traces of a prompt from the key, so the
draws are a pure function of (seed, step, prompts) and a resumed run draws what the uninterrupted one did (no state
to checkpoint). They are re-encoded with the policy's tokenizer and treated as the reference solutions are (+ eos,
finished, π_b := 1). A prompt the file does not hold gets no trace: its group is G sampled rows, all on-policy
(a different sampler shape than the k-trace groups', so a step with another covered share compiles its own program);
`off_policy/file_coverage` logs the share of a call's prompts with traces.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from rl4llm import models
from rl4llm import sampling
from rl4llm.config import ConfigError
from rl4llm.data import trace_file
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


def load_file_traces(config, setup, name: str = "teacher.traces_path") -> dict | None:
    """{prompt key: traces} of the traces file `config.<name>` (None when unset; also DeepSearch's replay buffer,
    deepsearch.replay_path), checked at startup: ConfigError naming the field and the line when the file is
    unreadable, empty or malformed, or a trace is longer than `sampling.max_new_tokens` in the policy's tokens (with
    eos); or naming the field when none of its prompts is among the run's training prompts (the first
    `rl.num_prompts` of each step's stream, `Selector.stream_examples`)."""
    section, key = name.split(".")
    path = getattr(getattr(config, section), key)
    if not path:
        return None
    field = f"config.{name}={path!r}"
    try:
        records = trace_file.read(path)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{field}: {e}") from e
    budget = config.sampling.max_new_tokens
    for r in records:
        for j, text in enumerate(r.traces):
            if len(setup.tokenizer.encode(text)) + 1 > budget:
                raise ConfigError(f"{field}: line {r.line}: trace {j} has more than {budget} tokens with eos in the "
                                  "policy's tokenizer; raise config.sampling.max_new_tokens or shorten it")
    traces = trace_file.index(records)
    steps = range(config.rl.steps)
    if steps and not any(trace_file.prompt_key(e.prompt) in traces for s in steps
                         for e in setup.selector.stream_examples(s, config.rl.num_prompts)):
        raise ConfigError(f"{field}: none of its {len(traces)} prompts is a training prompt of the run's "
                          f"{config.rl.steps} steps; its \"prompt\" must be the prompt as the task renders it "
                          "(python -m experiments.export_traces writes one)")
    return traces


def file_traces(traces: dict, prompts: list, counts: np.ndarray, num_traces: list, key
                ) -> tuple[np.ndarray, list, dict]:
    """The file's traces of the step's `prompts` (`num_traces[i]` asked of prompt i, drawn from `key`:
    `trace_file.draw`), the sampled rows `counts` [B] with a prompt the file lacks given its traces' rows back (its
    group all on-policy), and `off_policy/file_coverage` (the share of prompts with traces)."""
    drawn = trace_file.draw(traces, prompts, num_traces, np.asarray(jax.random.key_data(key)).ravel().tolist())
    covered = np.array([len(d) > 0 for d in drawn])
    counts = np.asarray(counts) + np.where(covered, 0, num_traces)
    return counts, drawn, {"off_policy/file_coverage": float(covered.mean())}
