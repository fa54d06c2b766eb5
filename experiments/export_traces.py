r"""Writes a traces file (`config.teacher.traces_path`; format in `rl4llm/data/trace_file.py`) for a run's training
prompts: the task's reference solutions, or a checkpoint's own samples that earn the reward.

    python -m experiments.export_traces --workdir=/tmp/rl4llm/luffy --out=/tmp/traces.jsonl
    python -m experiments.export_traces --workdir=/tmp/rl4llm/strong --source=samples --samples=4 \
        --min_reward=1 --out=/tmp/traces.jsonl

The prompts are the first `rl.num_prompts` of each of the first `--steps` RL steps' streams (default the run's
rl.steps) of `--workdir`'s config (`<workdir>/config.json`: task, seed, selection), so a student run with that task and
seed finds each of them. `--source=reference`: one record per prompt, its reference solution as the one trace (the
same rows as `rl.off_policy_traces` alone). `--source=samples`: the workdir's checkpoint (`--stage`; newest RL, else
SFT) samples `--samples` completions of each prompt at the run's rollout settings, scored by the run's reward
pipeline; those that finished with main reward >= `--min_reward` are kept (a prompt with none is left out).
`--source=replay`: DeepSearch's replay buffer (`config.deepsearch.replay_path`, `rl4llm/train/search_replay.py`) from
the same samples: a prompt whose samples are correct (main reward > 1/2, as the search's verifier) at a rate
0 < acc <= `--max_accuracy` (the official 0.25), with its finished correct samples.

    python -m experiments.export_traces --workdir=/tmp/rl4llm/deepsearch --source=replay --samples=8 \
        --out=/tmp/replay.jsonl
"""

from absl import app
from absl import flags
from absl import logging

_WORKDIR = flags.DEFINE_string("workdir", None, "A run's workdir (its config.json; checkpoints for samples).",
                               required=True)
_OUT = flags.DEFINE_string("out", None, "The traces file written (JSONL).", required=True)
_SOURCE = flags.DEFINE_enum("source", "reference", ["reference", "samples", "replay"], "Where the traces come from.")
_STEPS = flags.DEFINE_integer("steps", None, "RL steps whose prompts are exported (default: the run's rl.steps).",
                              lower_bound=1)
_SAMPLES = flags.DEFINE_integer("samples", 4, "source=samples: completions per prompt.", lower_bound=1)
_MIN_REWARD = flags.DEFINE_float("min_reward", 1.0, "source=samples: the main reward a kept completion reaches.")
_MAX_ACCURACY = flags.DEFINE_float("max_accuracy", 0.25, "source=replay: the highest accuracy of a registered prompt.")
_STAGE = flags.DEFINE_enum("stage", "auto", ["auto", "rl", "sft"], "source=samples: checkpoint stage.")
_SEED = flags.DEFINE_integer("seed", 0, "source=samples: the sampling key.")


def training_examples(config, setup, steps: int) -> list:
    """The first `rl.num_prompts` examples of each of the first `steps` RL steps' streams, in step order."""
    return [e for s in range(steps) for e in setup.selector.stream_examples(s, config.rl.num_prompts)]


def sampled_records(config, setup, params, examples, samples: int, min_reward: float, seed: int,
                    max_accuracy: float | None = None) -> list[dict]:
    """`samples` completions of each example by `params` at the run's rollout settings (one sampler call), scored by
    the run's reward pipeline, kept when finished with main reward >= `min_reward` (`trace_file.sample_records`), or
    with `max_accuracy` DeepSearch's replay buffer of them (`trace_file.replay_records`)."""
    import jax
    import numpy as np

    from rl4llm.data import trace_file
    from rl4llm.train import batches
    from rl4llm.train import completions
    from rl4llm.train import rollouts

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


def main(argv):
    del argv
    from rl4llm import config as config_lib
    from rl4llm.data import trace_file
    from rl4llm.train import runs
    from rl4llm.train import setup as setup_lib

    if _SOURCE.value in ("samples", "replay"):
        with runs.restore_policy(_WORKDIR.value, _STAGE.value) as policy:
            examples = training_examples(policy.config, policy.setup, _STEPS.value or policy.config.rl.steps)
            records = sampled_records(policy.config, policy.setup, policy.params, examples, _SAMPLES.value,
                                      _MIN_REWARD.value, _SEED.value,
                                      _MAX_ACCURACY.value if _SOURCE.value == "replay" else None)
    else:
        config = config_lib.parse(runs.load_config(_WORKDIR.value))
        setup = setup_lib.build_setup(config, _WORKDIR.value)
        try:
            records = trace_file.reference_records(training_examples(config, setup, _STEPS.value or config.rl.steps))
        finally:
            setup.rewards.close()
    print(f"{trace_file.write(_OUT.value, records)} records -> {_OUT.value}")


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)
    app.run(main)
