r"""Can a linear head predict a rollout's success from the policy's hidden state after its first k tokens? The
offline check behind ARRoL's pruning (`configs/arrol.py`, `rl4llm/analysis/quality_probe.py`).

    python -m experiments.pruning_probe --workdir=/tmp/rl4llm/reproduce/warm_start --k=4,8,12,16

Restores the run's policy (newest RL checkpoint, else SFT; `--stage`), samples `--generations` rollouts of
`--prompts` training prompts of the RL stream with the run's rollout settings, scores them, and for each k fits a
logistic-regression probe on the hidden state at the k-th completion token (`completions.checkpoint_features`) on the
first 3/4 of the prompts; reports on the other 1/4 its accuracy against the majority class and its within-group AUC
(0.5: no signal to prune by), and the within-group AUC of a probe fitted on the group-centred features (each row's
hidden state minus its group's mean: only what tells a group's rollouts apart). Writes one JSON line per k to --out.
"""

import json

from absl import app
from absl import flags
from absl import logging

from rl4llm.train import host_memory

_WORKDIR = flags.DEFINE_string("workdir", None, "A run's workdir (written by experiments/train.py).", required=True)
_STAGE = flags.DEFINE_enum("stage", "auto", ["auto", "rl", "sft"], "Checkpoint stage; auto: RL if any, else SFT.")
_K = flags.DEFINE_list("k", ["4", "8", "12", "16"], "Completion tokens before the probe reads the hidden state.")
_PROMPTS = flags.DEFINE_integer("prompts", 256, "Training prompts (3/4 fit the probe, 1/4 test it).", lower_bound=4)
_GENERATIONS = flags.DEFINE_integer("generations", 8, "Rollouts per prompt.", lower_bound=2)
_SEED = flags.DEFINE_integer("seed", 0, "Sampling key and the stream step of the prompts.")
_OUT = flags.DEFINE_string("out", "notebooks/results/pruning_probe.jsonl", "JSONL written (one record per k).")


def main(argv):
    del argv
    host_memory.reuse_freed_memory()  # before JAX starts its threads
    import jax
    import numpy as np

    from rl4llm.analysis import quality_probe
    from rl4llm.train import batches
    from rl4llm.train import completions
    from rl4llm.train import rollouts
    from rl4llm.train import runs

    with runs.restore_policy(_WORKDIR.value, _STAGE.value) as policy:
        config, setup, params = policy.config, policy.setup, policy.params
        examples = setup.task.source.train_examples(10_000_000 + _SEED.value, _PROMPTS.value)
        prompt_tokens, prompt_mask = batches.encode_prompts(setup.tokenizer, [e.prompt for e in examples],
                                                            config.sampling.prompt_bucket)
        counts = np.full(len(examples), _GENERATIONS.value)
        drawn = completions.sample_completions(config, setup, params, prompt_tokens, prompt_mask, counts,
                                               jax.random.key(_SEED.value), setup.rollout_cfg)
        group = np.repeat(np.arange(len(examples)), counts)
        _, main, *_ = rollouts.score(config, setup, prompt_tokens[group], prompt_mask[group],
                                     drawn["completion_tokens"], drawn["completion_mask"],
                                     [examples[i].prompt for i in group], [examples[i].answer for i in group], group)
        labels = (main >= 1.0).astype(np.float64)
        train, test = group < (3 * len(examples)) // 4, group >= (3 * len(examples)) // 4
        records = []
        for k in sorted(int(k) for k in _K.value):
            tokens, mask = batches.join_sequences(prompt_tokens[group], prompt_mask[group],
                                                  drawn["completion_tokens"][:, :k], drawn["completion_mask"][:, :k])
            features = np.asarray(completions.checkpoint_features(setup.model_cfg, params, tokens, mask))
            predict, _, _ = quality_probe.fit_logistic(features[train], labels[train])
            p = predict(features[test])
            within = quality_probe.group_centred(features, group)  # only what differs between a group's rollouts
            predict_within, _, _ = quality_probe.fit_logistic(within[train], labels[train])
            records.append({
                "k": k, "workdir": _WORKDIR.value, "stage": policy.stage, "step": policy.step,
                "rollouts": int(labels.size), "success_rate": float(labels.mean()),
                "test_accuracy": float(np.mean((p > 0.5) == (labels[test] > 0.5))),
                "test_majority": float(max(labels[test].mean(), 1.0 - labels[test].mean())),
                "test_within_group_auc": quality_probe.within_group_auc(p, labels[test], group[test]),
                "train_within_group_auc": quality_probe.within_group_auc(predict(features[train]), labels[train],
                                                                         group[train]),
                "centred_test_within_group_auc": quality_probe.within_group_auc(predict_within(within[test]),
                                                                                labels[test], group[test]),
                "centred_train_within_group_auc": quality_probe.within_group_auc(predict_within(within[train]),
                                                                                 labels[train], group[train]),
            })
            print(json.dumps(records[-1]), flush=True)
    with open(_OUT.value, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)
    print(f"wrote {_OUT.value}")


if __name__ == "__main__":
    logging.set_verbosity(logging.WARNING)
    app.run(main)
