"""Off-policy traces in the groups (`config.rl.off_policy_traces`, LUFFY): the config checks, the rows a group gets
(sampled rows, then the reference-solution traces), and the learner's off-policy token mask. The recipe's run
(`configs/luffy.py`) is in tests/test_recipes.py."""

import types

import numpy as np
import pytest

from configs import default
from rl4llm import config as config_lib
from rl4llm.data import tasks as tasks_lib
from rl4llm.train import inputs as inputs_lib
from rl4llm.train import rollouts
from rl4llm.train import setup as setup_lib
from rl4llm.train import single_turn


def _messages(**fields) -> str:
    c = default.get_config()
    c.update_from_flattened_dict(fields)
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.parse(c)
    return str(e.value)


def test_invalid_combinations_name_the_field():
    message = _messages(**{"rl.off_policy_traces": 16, "rl.loss": "ppo_clip", "selection.method": "dots",
                           "rl.tis_cap": 2.0})
    for expected in ("config.rl.off_policy_traces=16: must be < config.rl.num_generations=16",
                     "config.rl.off_policy_traces=16: config.rl.loss='ppo_clip' does not take off_policy_mask",
                     "config.rl.off_policy_traces=16: needs config.selection.method in",
                     "config.rl.off_policy_traces=16: config.rl.tis_cap=2.0 divides by sampler log-probs"):
        assert expected in message, (expected, message)
    assert "needs config.selection.method" in _messages(
        **{"rl.off_policy_traces": 2, "rl.loss": "luffy", "selection.hints": True})


def test_valid_combinations_parse():
    for fields in ({"rl.off_policy_traces": 2, "rl.loss": "luffy"},
                   {"rl.off_policy_traces": 15, "rl.loss": "luffy", "selection.method": "dynamic_sampling"},
                   {"rl.off_policy_traces": 0, "rl.loss": "luffy"}):
        c = default.get_config()
        c.update_from_flattened_dict(fields)
        assert config_lib.parse(c).rl.off_policy_traces == fields["rl.off_policy_traces"]


def test_traces_follow_each_groups_sampled_rows(tmp_path):
    config = config_lib.parse(default.get_config())
    task = tasks_lib.build(config.task, config.seed)
    tokenizer = setup_lib.task_tokenizer(str(tmp_path), task)
    setup = types.SimpleNamespace(tokenizer=tokenizer)
    t = config.sampling.max_new_tokens
    counts = np.array([2, 1, 3])  # sampled rows of each prompt; row r's tokens are all r + 1
    sampled = {
        "completion_tokens": np.repeat(np.arange(1, 7, dtype=np.int32)[:, None], t, axis=1),
        "completion_mask": np.ones((6, t), bool),
        "logprobs": np.full((6, t), -0.5, np.float32),
        "finished": np.zeros(6, bool),
        "off_policy": np.zeros(6, bool),
    }
    traces = [["1+2=3;#3"], ["4+4=8;#8"], ["9-1=8;#8"]]
    rows, sizes = rollouts.with_traces(config, setup, sampled, counts, traces)
    np.testing.assert_array_equal(sizes, [3, 2, 4])
    np.testing.assert_array_equal(rows["off_policy"], [0, 0, 1, 0, 1, 0, 0, 0, 1])
    np.testing.assert_array_equal(rows["completion_tokens"][~rows["off_policy"], 0], [1, 2, 3, 4, 5, 6])
    trace_rows = np.flatnonzero(rows["off_policy"])
    for row, (text,) in zip(trace_rows, traces):
        ids = tokenizer.encode(text) + [tokenizer.eos_id]
        np.testing.assert_array_equal(rows["completion_tokens"][row, : len(ids)], ids)
        assert rows["completion_mask"][row].sum() == len(ids)
        assert tokenizer.decode(rows["completion_tokens"][row, : len(ids) - 1].tolist()) == text
    assert np.all(rows["logprobs"][trace_rows] == 0.0) and rows["finished"][trace_rows].all()
    assert rows["completion_mask"].dtype == bool and rows["logprobs"].dtype == np.float32


def test_learner_batch_masks_the_trace_tokens():
    c = default.get_config()
    c.rl.loss, c.rl.off_policy_traces, c.rl.num_generations, c.rl.num_prompts = "luffy", 1, 2, 1
    config = config_lib.parse(c)
    mask = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    data = inputs_lib.StepData(config, None, None, None, 0, None, np.zeros(2), np.zeros((2, 1)), mask,
                               np.zeros((2, 5), np.int32), np.ones((2, 5), np.int32), np.zeros(2, np.int32),
                               behaviour=None, off_policy=np.array([[True, False, False], [True, True, True]]))
    rollout = types.SimpleNamespace(logprobs=np.zeros((2, 3), np.float32))
    batch = single_turn.learner_batch(config, data, rollout, np.zeros(2), np.zeros((2, 3)))
    # row 0: a hint's first token (Guide), then sampled ones; row 1: a trace; padding never counts
    np.testing.assert_array_equal(batch.off_policy_mask, [[1, 0, 0], [1, 0, 0]])
    c.rl.loss, c.rl.off_policy_traces = "ppo_clip", 0
    batch = single_turn.learner_batch(config_lib.parse(c), data, rollout, np.zeros(2), np.zeros((2, 3)))
    assert batch.off_policy_mask is None


def test_one_step_scores_the_reference_traces_with_the_task_reward(tmp_path):
    """A real step (nano job, the arithmetic task's exact-answer reward): the traces are the reference solutions, so
    every one is rewarded 1; the loss sees them (off_policy_frac = trace tokens / tokens > 0) and stays finite."""
    import math

    from rl4llm.train import job
    from rl4llm.train import metrics as metrics_lib
    from tests.test_train import tiny_config

    config = tiny_config(loss="luffy", off_policy_traces=1, steps=1)
    config.sft.steps = 2
    config.eval.every = 1000
    job.run(config, str(tmp_path))
    (record,) = metrics_lib.read_metrics(str(tmp_path), "rl")
    assert record["off_policy/trace_reward"] == 1.0
    assert 0.0 < record["off_policy_frac"] < 1.0
    assert 0.0 <= record["off_is_weight_min"] <= record["off_is_weight_mean"] <= record["off_is_weight_max"] <= 1.0
    assert math.isfinite(record["loss/pg"]) and math.isfinite(record["grad_norm"])


# ------------------------------------------------------------------------------------------- teacher traces


def test_teacher_config_errors_name_the_field(tmp_path):
    message = _messages(**{"teacher.checkpoint": str(tmp_path), "teacher.hf_checkpoint": str(tmp_path)})
    assert "config.teacher.checkpoint=" in message and "the teacher comes from one of them" in message
    assert "set config.rl.off_policy_traces >= 1" in message
    assert "config.teacher.checkpoint" in _messages(**{"teacher.checkpoint": str(tmp_path / "missing"),
                                                       "rl.off_policy_traces": 2, "rl.loss": "luffy"})


def test_teacher_samples_the_traces_in_a_run(tmp_path):
    """A student run whose traces come from a teacher run's checkpoint (`train.teacher`): the step logs the
    teacher's metrics and trains finitely; the trace rows `generate_rows` builds are exactly the teacher's samples
    (drawn here independently from the restored teacher on the teacher stream of the key), re-encoded, each
    finished iff the teacher stopped, and not the reference solutions; a checkpoint-less teacher is a ConfigError."""
    import jax

    from rl4llm import sampling
    from rl4llm.train import batches
    from rl4llm.train import job
    from rl4llm.train import metrics as metrics_lib
    from rl4llm.train import runs
    from tests.test_train import tiny_config

    teacher_dir, student_dir = str(tmp_path / "teacher"), str(tmp_path / "student")
    teacher = tiny_config(steps=0)
    teacher.sft.steps = 2
    job.run(teacher, teacher_dir)
    c = tiny_config(loss="luffy", off_policy_traces=2, steps=1)
    c.sft.steps = 1
    c.eval.every = 1000
    c.teacher.checkpoint = teacher_dir
    c.teacher.temperature = 2.0  # a nano teacher at T = 2: some traces stop, others run to the budget
    job.run(c, student_dir)
    (record,) = metrics_lib.read_metrics(student_dir, "rl")
    assert 0.0 <= record["teacher/finished_frac"] <= 1.0 and record["teacher/response_length"] > 0
    assert np.isfinite(record["loss/pg"]) and 0.0 < record["off_policy_frac"] < 1.0

    config = config_lib.parse(c)
    setup = single_turn.build_setup(config, student_dir)
    examples = setup.task.source.train_examples(0, 3)
    prompts, answers = [e.prompt for e in examples], [e.answer for e in examples]
    key = jax.random.key(7)
    params = runs.restore_policy(student_dir).params
    rows, metrics = rollouts.generate_rows(config, setup, params, prompts, answers, np.full(3, 2), key, [""] * 3,
                                           [[e.solution] * 2 for e in examples])
    with runs.restore_policy(teacher_dir) as teacher_policy:
        tokens, mask = batches.encode_prompts(teacher_policy.setup.tokenizer, prompts, config.sampling.prompt_bucket)
        cfg = sampling.SamplingConfig(max_new_tokens=config.sampling.max_new_tokens, temperature=2.0,
                                      stop_token_ids=(teacher_policy.setup.tokenizer.eos_id,),
                                      pad_id=teacher_policy.setup.tokenizer.pad_id)
        rollout = sampling.generate(teacher_policy.setup.model_cfg, teacher_policy.params, np.repeat(tokens, 2, 0),
                                    np.repeat(mask, 2, 0), jax.random.fold_in(key, rollouts._TEACHER_STREAM), cfg)
    sampled = np.asarray(rollout.completion_tokens)
    finished = np.asarray(rollout.finished)
    traces = np.flatnonzero(rows.off_policy)
    np.testing.assert_array_equal(traces, [2, 3, 6, 7, 10, 11])  # each group: 2 sampled rows, then 2 traces
    texts = batches.decode_completions(setup.tokenizer, sampled, np.asarray(rollout.completion_mask))
    for row, t in zip(traces, range(6)):
        assert setup.tokenizer.decode(rows.completion_tokens[row][rows.completion_mask[row]].tolist()) == texts[t]
        assert rows.finished[row] == finished[t]  # an unstopped trace has no eos
        assert (rows.completion_tokens[row][rows.completion_mask[row]] == setup.tokenizer.eos_id).sum() == finished[t]
    assert 0 < finished.sum() < 6, finished  # both kinds were drawn
    assert metrics["teacher/finished_frac"] == finished.mean()
    assert not any(setup.tokenizer.decode(rows.completion_tokens[r][rows.completion_mask[r]].tolist())
                   == examples[r // 4].solution for r in traces)
    setup.rewards.close()

    c.teacher.checkpoint = str(tmp_path)  # a directory without checkpoints
    with pytest.raises(config_lib.ConfigError, match="config.teacher.checkpoint="):
        single_turn.build_setup(config_lib.parse(c), student_dir)


def test_an_hf_teacher_with_its_own_tokenizer_gives_texts_the_policy_re_encodes(tmp_path):
    """An HF teacher (a BPE tokenizer with a chat template) for a student on the arithmetic char tokenizer: the
    prompts reach the teacher through its own chat template, and each trace row is the student's encoding of the
    teacher's text (+ eos iff the teacher stopped), cut at the response budget."""
    import jax

    from rl4llm import sampling
    from rl4llm.models import hf_checkpoint
    from rl4llm.tokenizers import hf_tokenizer
    from rl4llm.train import batches
    from tests.test_hf_train import _hf_model_dir
    from tests.test_train import tiny_config

    c = tiny_config(loss="luffy", off_policy_traces=1)
    c.teacher.hf_checkpoint = teacher_dir = _hf_model_dir(tmp_path / "teacher")
    config = config_lib.parse(c)
    setup = single_turn.build_setup(config, str(tmp_path / "student"))
    params = setup_lib.initial_params(config, setup.model_cfg, jax.random.key(0))
    examples = setup.task.source.train_examples(0, 2)
    key = jax.random.key(1)
    rows, _ = rollouts.generate_rows(config, setup, params, [e.prompt for e in examples], [e.answer for e in examples],
                                     np.ones(2, int), key, ["", ""], [[e.solution] for e in examples])
    setup.rewards.close()
    tokenizer = hf_tokenizer.HFTokenizer.load(teacher_dir)
    cfg, teacher_params = hf_checkpoint.load_hf_checkpoint(teacher_dir)
    tokens, mask = batches.encode_prompts(tokenizer, [e.prompt for e in examples], config.sampling.prompt_bucket)
    assert tokenizer.decode(tokens[0][mask[0]].tolist(), skip_special_tokens=False).startswith("<|im_start|>user")
    t = config.sampling.max_new_tokens
    rollout = sampling.generate(cfg, teacher_params, tokens, mask, jax.random.fold_in(key, rollouts._TEACHER_STREAM),
                                sampling.SamplingConfig(max_new_tokens=t, stop_token_ids=tokenizer.stop_token_ids,
                                                        pad_id=tokenizer.pad_id))
    texts = batches.decode_completions(tokenizer, np.asarray(rollout.completion_tokens),
                                       np.asarray(rollout.completion_mask))
    for row, text, stopped in zip(np.flatnonzero(rows.off_policy), texts, np.asarray(rollout.finished)):
        ids = (setup.tokenizer.encode(text) + [setup.tokenizer.eos_id])[:t]
        if not stopped and ids[-1] == setup.tokenizer.eos_id:
            ids = ids[:-1]
        np.testing.assert_array_equal(rows.completion_tokens[row][rows.completion_mask[row]], ids)
        assert rows.finished[row] == (ids[-1] == setup.tokenizer.eos_id)
