"""The records of a traces file (`config.teacher.traces_path`, DeepSearch's `deepsearch.replay_path`; format in
`rl4llm/data/trace_file.py`) from a run: its training prompts (`training_examples`) and a policy's own samples of them
that earn the reward, or DeepSearch's replay buffer of them (`sampled_records`). The binary is
`experiments/export_traces.py`."""

from __future__ import annotations

import jax
import numpy as np

from rl4llm.data import trace_file
from rl4llm.train import batches
from rl4llm.train import completions
from rl4llm.train import rollouts


def training_examples(config, setup, steps: int) -> list:
    """The first `rl.num_prompts` examples of each of the first `steps` RL steps' streams, in step order."""
    return [e for s in range(steps) for e in setup.selector.stream_examples(s, config.rl.num_prompts)]


def sampled_records(config, setup, params, examples, samples: int, min_reward: float, seed: int,
                    max_accuracy: float | None = None) -> list[dict]:
    """`samples` completions of each example by `params` at the run's rollout settings (one sampler call), scored by
    the run's reward pipeline, kept when finished with main reward >= `min_reward` (`trace_file.sample_records`), or
    with `max_accuracy` DeepSearch's replay buffer of them (`trace_file.replay_records`)."""
    prompts = [e.prompt for e in examples]
    prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, prompts, config.sampling.prompt_bucket)
    counts = np.full(len(examples), samples)
    drawn = completions.sample_completions(config, setup, params, prompt_tokens, prompt_mask, counts,
                                           jax.random.key(seed), setup.rollout_cfg)
    group = np.repeat(np.arange(len(examples)), counts)
    main = rollouts.score(config, setup, prompt_tokens[group], prompt_mask[group], drawn["completion_tokens"],
                          drawn["completion_mask"], [prompts[i] for i in group], [examples[i].answer for i in group],
                          group)[1]
    texts = batches.decode_completions(setup.tokenizer, drawn["completion_tokens"], drawn["completion_mask"])
    shape = (len(examples), samples)
    texts, main, finished = (np.asarray(texts, object).reshape(shape).tolist(), np.asarray(main).reshape(shape),
                             drawn["finished"].reshape(shape))
    if max_accuracy is not None:
        return trace_file.replay_records(prompts, texts, main > 0.5, finished, max_accuracy)
    return trace_file.sample_records(prompts, texts, main, finished, min_reward)
