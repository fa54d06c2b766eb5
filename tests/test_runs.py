"""Reading a run's files back (rl4llm.train.runs) on hand-written workdirs."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from rl4llm.train import metrics as metrics_lib
from rl4llm.train import runs


def test_load_metrics_aligns_steps_and_takes_the_last_record(tmp_path):
    writer = metrics_lib.MetricsWriter(str(tmp_path))
    writer.write("sft", 1, {"loss": 2.0}, console=False)
    writer.write("rl", 1, {"reward": 0.1, "entropy": 1.5}, console=False)
    writer.write("rl", 2, {"reward": 0.2, "entropy": 1.4, "eval/greedy_accuracy": 0.5, "hist": [1, 2]}, console=False)
    writer.write("rl", 3, {"reward": 0.25, "entropy": float("nan")}, console=False)  # NaN is written as null
    writer.write("rl", 3, {"reward": 0.3, "entropy": 1.2}, console=False)  # a resumed run rewrote step 3
    writer.close()
    m = runs.load_metrics(str(tmp_path), "rl")
    assert sorted(m) == ["entropy", "eval/greedy_accuracy", "reward", "step"]  # the list-valued "hist" is left out
    np.testing.assert_array_equal(m["step"], [1, 2, 3])
    np.testing.assert_array_equal(m["reward"], [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(m["eval/greedy_accuracy"], [np.nan, 0.5, np.nan])
    steps, values = runs.series(m, "eval/greedy_accuracy")
    np.testing.assert_array_equal(steps, [2])
    np.testing.assert_array_equal(values, [0.5])
    assert [len(a) for a in runs.series(m, "kl")] == [0, 0]
    np.testing.assert_array_equal(runs.load_metrics(str(tmp_path), "sft")["loss"], [2.0])


def test_load_evals_in_run_order_and_pass_at_k_curve(tmp_path):
    for stage, step in (("rl", 10), ("sft", 5), ("rl", 2)):
        with open(runs.eval_path(str(tmp_path), stage, step), "w") as f:
            json.dump({"stage": stage, "step": step}, f)
    with open(tmp_path / "eval_notes.json", "w") as f:  # not an evaluation result
        json.dump({}, f)
    assert [(e["stage"], e["step"]) for e in runs.load_evals(str(tmp_path))] == [("sft", 5), ("rl", 2), ("rl", 10)]
    metrics = {"eval/pass@8": 0.9, "eval/pass@1": 0.4, "eval/maj@8": 0.6, "eval/pass@2": 0.6, "eval/avg@8": 0.4}
    k, p = runs.pass_at_k_curve(metrics)
    np.testing.assert_array_equal(k, [1, 2, 8])
    np.testing.assert_array_equal(p, [0.4, 0.6, 0.9])
    k, m = runs.pass_at_k_curve(metrics, "maj")
    np.testing.assert_array_equal(k, [8])
    np.testing.assert_array_equal(m, [0.6])


def test_markdown_table_hand_case():
    table = runs.markdown_table({"a": {"acc": 0.5, "note": "x|y"}, "b": {"acc": 1.0, "steps": 3}}, ["acc", "steps", "note"])
    assert table == "\n".join([
        "| run | acc | steps | note |",
        "|---|---|---|---|",
        "| a | 0.500 |  | x\\|y |",
        "| b | 1.000 | 3 |  |",
    ])
    assert runs.markdown_table({"0": {"r": True}}, ["r"], label="#").startswith("| # | r |\n|---|---|\n| 0 | True |")


def test_missing_files_name_the_workdir(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/config.json does not exist"):
        runs.load_config(str(tmp_path))
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/summary.json does not exist"):
        runs.load_summary(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="metrics.jsonl does not exist"):
        runs.load_metrics(str(tmp_path))
    assert runs.checkpoint_steps(str(tmp_path), "rl") == [] and not os.path.exists(tmp_path / "checkpoints")
    with pytest.raises(ValueError, match="stage='best'"):
        runs.resolve_checkpoint(str(tmp_path), "best")


def test_load_config_round_trips_the_trainer_json_and_fills_new_fields(tmp_path):
    from configs import default

    config = default.get_config()
    config.rl.num_generations = 3
    config.eval.pass_k = (1, 3)
    saved = json.loads(config.to_json_best_effort())
    del saved["eval"]["every"]  # a run written before the field existed
    with open(tmp_path / "config.json", "w") as f:
        json.dump(saved, f)
    loaded = runs.load_config(str(tmp_path))
    assert loaded.rl.num_generations == 3
    assert loaded.eval.pass_k == (1, 3)  # a tuple again, as the field is
    assert loaded.eval.every == default.get_config().eval.every
    assert math.isclose(loaded.rl.learning_rate, config.rl.learning_rate)


def test_checkpoint_restore_entry_reads_one_entry_and_names_mismatches(tmp_path):
    import jax
    import jax.numpy as jnp

    from rl4llm.train import checkpointing

    ckpt = checkpointing.Checkpointer(str(tmp_path / "checkpoints" / "rl"))
    params = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    ckpt.save(5, {"params": params, "opt_state": {"mu": jnp.zeros((2, 3))}}, {"data_step": 5})
    target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    restored, meta = ckpt.restore_entry(5, "params", target)
    assert meta == {"data_step": 5}
    jax.tree.map(np.testing.assert_array_equal, restored, params)
    bad = {"w": jax.ShapeDtypeStruct((3, 3), jnp.float32), "b": target["b"]}
    with pytest.raises(checkpointing.CheckpointMismatchError, match=r"params.w: shape \(2, 3\) in the checkpoint, \(3, 3\)"):
        ckpt.restore_entry(5, "params", bad)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint step 4 .*\(steps: \[5\]\)"):
        ckpt.restore_entry(4, "params", target)
    ckpt.close()
    assert runs.checkpoint_steps(str(tmp_path), "rl") == [5]
    assert runs.resolve_checkpoint(str(tmp_path)) == ("rl", 5)


def test_metrics_writer_writes_tensorboard_events_without_importing_torch(tmp_path):
    # tensorboardX imports torch when it is installed (the test extra has it): the writer hides it (5 s per start).
    program = f"""
import glob, sys
from rl4llm.train import metrics
writer = metrics.MetricsWriter({str(tmp_path)!r})
writer.write("rl", 3, {{"reward": 0.5}}, console=False)
writer.close()
events = glob.glob({str(tmp_path / "tensorboard" / "events.*")!r})
print("torch" in sys.modules, len(events))
import torch  # still importable afterwards
"""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "1"]
    assert b"rl/reward" in open(next((tmp_path / "tensorboard").glob("events.*")), "rb").read()
