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


def main(argv):
    del argv
    from rl4llm import config as config_lib
    from rl4llm.data import trace_file
    from rl4llm.train import runs
    from rl4llm.train import setup as setup_lib
    from rl4llm.train.trace_export import sampled_records, training_examples

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
