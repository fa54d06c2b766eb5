"""Off-policy traces from a file (`config.teacher.traces_path`): LUFFY's guidance (Yan et al. 2025) from whatever wrote
the texts -- the task's reference solutions, a stronger model's outputs, a run's samples.

Format: JSONL (UTF-8), one record per line, blank lines skipped:

    {"prompt": "<the prompt as the task renders it: Example.prompt>", "traces": ["<completion>", ...]}

`prompt` is the text the policy is fed (with task.name='local', the question inside the task's template), matched up
to whitespace (`prompt_key`: runs of whitespace become one space, the ends are stripped), so a reformatted file still
matches; `traces` is a non-empty list of completion texts without the stop token (re-encoding appends it). Records of
one prompt pool their traces in file order; other fields (answer, reward, ...) are kept by `write` and ignored by
`read`. `experiments.export_traces` writes such a file from the task's reference solutions or a checkpoint's samples.

Each step the k traces of a prompt with m traces in the file are `draw`n from the step's key:

    traces(x) = (t_{σ(1)}, ..., t_{σ(m)}, t_{σ(1)}, ...)[:k],   σ a uniform permutation of the m traces

k distinct traces when m >= k; with m = 1 (one reference solution) k copies, exactly the reference-solution rows of
`rl.off_policy_traces`. Departure from LUFFY: its traces are fixed in the training data (one per prompt, DeepSeek-R1's,
filtered for correctness); here a prompt may have several, drawn afresh each step, and none are filtered.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Record:
    """One line of a traces file: its 1-based line number, the prompt key and its traces."""

    line: int
    key: str
    traces: tuple[str, ...]


def prompt_key(prompt: str) -> str:
    """The prompt as a file's records are matched: whitespace runs -> one space, ends stripped."""
    return " ".join(prompt.split())


def parse_line(text: str, line: int) -> Record:
    """The record of one non-blank line; ValueError naming the line when it is not {"prompt": str, "traces": [str,
    ...]} with at least one trace."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"line {line}: not JSON ({e.msg})") from e
    prompt = record.get("prompt") if isinstance(record, dict) else None
    traces = record.get("traces") if isinstance(record, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"line {line}: needs a non-empty string \"prompt\" (the prompt as the task renders it)")
    if not isinstance(traces, list) or not traces or not all(isinstance(t, str) for t in traces):
        raise ValueError(f"line {line}: needs \"traces\", a non-empty list of completion strings")
    return Record(line, prompt_key(prompt), tuple(traces))


def read(path: str) -> list[Record]:
    """The records of the traces file at `path`, in file order; OSError when it cannot be read, ValueError naming the
    line of the first malformed record, or when it holds none."""
    with open(path, encoding="utf-8") as f:
        records = [parse_line(text, i) for i, text in enumerate(f, start=1) if text.strip()]
    if not records:
        raise ValueError("holds no record (one JSON object per line: {\"prompt\": ..., \"traces\": [...]})")
    return records


def index(records: Iterable[Record]) -> dict[str, tuple[str, ...]]:
    """{prompt key: its traces}, the records of one prompt pooled in file order."""
    pooled: dict[str, tuple[str, ...]] = {}
    for r in records:
        pooled[r.key] = pooled.get(r.key, ()) + r.traces
    return pooled


def draw(traces: Mapping[str, Sequence[str]], prompts: Sequence[str], counts: Sequence[int],
         seed: Sequence[int]) -> list[list[str]]:
    """`counts[i]` traces of each `prompts[i]` (module docstring: a permutation of its traces cycled to the count),
    [] for a prompt the file does not hold; one generator seeded by `seed` draws the prompts in order."""
    rng = np.random.default_rng(list(seed))
    drawn = []
    for prompt, k in zip(prompts, counts):
        pool = traces.get(prompt_key(prompt), ())
        drawn.append([pool[j] for j in np.resize(rng.permutation(len(pool)), k)] if pool else [])
    return drawn


def write(path: str, records: Iterable[dict]) -> int:
    """Writes `records` (dicts with "prompt" and "traces", any other fields kept) as a traces file; returns how many.
    Each record is checked as `read` will check it."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    for i, text in enumerate(lines, start=1):
        parse_line(text, i)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(text + "\n" for text in lines)
    return len(lines)


def reference_records(examples: Iterable) -> list[dict]:
    """A traces file's records holding each example's reference solution (`Example.solution`) as its one trace: the
    file that gives the same rows as `rl.off_policy_traces` alone."""
    return [{"prompt": e.prompt, "traces": [e.solution]} for e in examples]


def sample_records(prompts: Sequence[str], texts: Sequence[Sequence[str]], rewards: Sequence[Sequence[float]],
                   finished: Sequence[Sequence[bool]], min_reward: float) -> list[dict]:
    """A traces file's records of sampled completions: for each prompt its `texts` that finished (stopped before the
    budget: re-encoded with eos, an unfinished one would not fit) with a reward >= `min_reward`, their rewards kept
    beside them; a prompt with none is left out."""
    records = []
    for prompt, group, scores, stopped in zip(prompts, texts, rewards, finished):
        kept = [(t, float(r)) for t, r, f in zip(group, scores, stopped) if f and r >= min_reward]
        if kept:
            records.append({"prompt": prompt, "traces": [t for t, _ in kept], "rewards": [r for _, r in kept]})
    return records


def replay_records(prompts: Sequence[str], texts: Sequence[Sequence[str]], correct: Sequence[Sequence[bool]],
                   finished: Sequence[Sequence[bool]], max_accuracy: float) -> list[dict]:
    """DeepSearch's replay buffer as a traces file's records (`train.search_replay`; the official
    `register_replay_buffer.py`): a prompt whose samples are correct at a rate 0 < acc <= `max_accuracy` (official:
    0.25) is registered with its correct samples (those that finished: re-encoded with eos they fit the budget)."""
    records = []
    for prompt, group, right, stopped in zip(prompts, texts, correct, finished):
        accuracy = float(np.mean(right))
        cached = [t for t, ok, f in zip(group, right, stopped) if ok and f]
        if 0 < accuracy <= max_accuracy and cached:
            records.append({"prompt": prompt, "traces": cached, "accuracy": accuracy})
    return records
