"""experiments/benchmark.py on the nano model with shrunken shapes: the JSON records of WORKLOADS.md
(every field, consistent throughputs), the workload shapes, the reward and the memory probe."""

import dataclasses
import json
import re

import jax
import numpy as np
import pytest

from experiments import benchmark
from rl4llm import models

FIELDS = {"framework", "workload", "model", "dtype", "step_s", "gen_s", "gen_tok_s", "learn_s", "learn_tok_s",
          "gen_hbm_gb_s", "gen_hbm_frac", "learn_tflop_s", "mfu", "peak_rss_mb", "compile_s", "devices", "versions"}
NANO = models.get_config("nano")
GRPO = benchmark.Workload("grpo_step", num_prompts=2, group_size=3, prompt_len=5, new_tokens=6, learn=True)
PPO = benchmark.Workload("ppo_step", num_prompts=2, group_size=3, prompt_len=5, new_tokens=6, learn=True,
                         critic=True)
SAMPLE = benchmark.Workload("sample_only", num_prompts=4, group_size=1, prompt_len=5, new_tokens=7, learn=False)


@pytest.fixture(scope="module")
def grpo_record():
    return benchmark.run_workload(NANO, "nano", GRPO, steps=3, seed=0, logprob_chunk_size=4)


@pytest.fixture(scope="module")
def sample_record():
    return benchmark.run_workload(NANO, "nano", SAMPLE, steps=3, seed=0)


def check_common(record, workload, fields=FIELDS):
    assert set(record) == fields
    assert (record["framework"], record["workload"], record["model"]) == ("rl4llm", workload.name, "nano")
    assert json.loads(json.dumps(record)) == record
    assert "\n" not in json.dumps(record)
    assert record["step_s"] > 0 and record["gen_s"] > 0
    assert record["step_s"] >= record["gen_s"]
    assert record["gen_tok_s"] == pytest.approx(workload.batch * workload.new_tokens / record["gen_s"], rel=1e-3)
    assert record["compile_s"] > 0  # the warm-up step compiles `generate` (and the learner step)
    assert 10 < record["peak_rss_mb"] < 1e6
    assert re.fullmatch(r"cpu x[1-9]\d*", record["devices"])
    assert record["versions"]["jax"] == jax.__version__
    assert set(record["versions"]) == {"jax", "jaxlib", "flax", "optax", "python"}


def test_grpo_step_record(grpo_record):
    check_common(grpo_record, GRPO)
    assert grpo_record["learn_s"] > 0
    assert grpo_record["step_s"] >= grpo_record["learn_s"]
    tokens = GRPO.batch * (GRPO.prompt_len + GRPO.new_tokens)
    assert grpo_record["learn_tok_s"] == pytest.approx(tokens / grpo_record["learn_s"], rel=1e-3)


def test_ppo_step_record_adds_the_critic_time():
    record = benchmark.run_workload(NANO, "nano", PPO, steps=2, seed=0, logprob_chunk_size=4)
    check_common(record, PPO, FIELDS | {"critic_s"})
    assert record["critic_s"] > 0 and record["learn_s"] > 0
    assert record["step_s"] >= record["critic_s"] + record["learn_s"] - 1e-3


def test_ppo_critic_update_trains_the_critic_alone():
    optimizer = benchmark.make_optimizer()
    key = jax.random.key(0)
    state = benchmark.init_state(NANO, key, optimizer, critic=True)
    programs = benchmark.make_programs(NANO, PPO, optimizer, logprob_chunk_size=4)
    prompts = benchmark.random_prompts(PPO, NANO.vocab_size, seed=0)
    rollout, scores = benchmark.generate_and_score(NANO, PPO, state.params, prompts, key)
    params, critic = jax.tree.map(np.asarray, (state.params, state.extra("critic").params))
    state, advantages = benchmark.critic_update(programs, state, rollout, jax.numpy.asarray(scores))
    mask = np.asarray(rollout.completion_mask, np.float32)
    # whitened GAE advantages over the valid tokens: mean 0, std 1
    assert abs(float((advantages * mask).sum() / mask.sum())) < 1e-5
    jax.tree.map(np.testing.assert_array_equal, params, jax.tree.map(np.asarray, state.params))
    head = np.asarray(state.extra("critic").params["head"]["kernel"])
    assert np.abs(head - critic["head"]["kernel"]).max() > 0  # the zero head moved toward the returns


def test_sample_only_record(sample_record):
    check_common(sample_record, SAMPLE)
    assert sample_record["learn_s"] is None and sample_record["learn_tok_s"] is None
    assert sample_record["learn_tflop_s"] is None and sample_record["mfu"] is None


def test_utilisation_follows_the_hand_counts(grpo_record):
    """learn_tflop_s and gen_hbm_gb_s against FLOPs and bytes counted here from the nano config; no peaks on a CPU."""
    c = NANO
    e, h, hkv, d, i, v, layers = (c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim, c.intermediate_size,
                                  c.vocab_size, c.num_layers)
    trunk = layers * (2 * e * h * d + 2 * e * hkv * d + 3 * e * i)
    rows, p, t, g = GRPO.batch, GRPO.prompt_len, GRPO.new_tokens, GRPO.group_size
    # prompts forwarded once per group (rows / g of them), completions for every row, seeing p + (t+1)/2 keys
    prompt_fwd = 2 * trunk * (rows // g) * p + 4 * layers * h * d * (rows // g) * p * (p + 1) / 2
    completion_fwd = 2 * trunk * rows * t + 4 * layers * h * d * rows * t * (p + (t + 1) / 2) + 2 * e * v * rows * t
    learn_flops = 4 * (prompt_fwd + completion_fwd)  # policy forward + backward (3x) + reference forward
    assert grpo_record["learn_tflop_s"] == pytest.approx(learn_flops / grpo_record["learn_s"] / 1e12, rel=2e-3)
    weights = (trunk + e * v) * 4  # float32
    kv_cache = 2 * layers * rows * hkv * (p + t) * d * 4
    gen_bytes = weights + (t - 1) * (weights + kv_cache)
    assert grpo_record["gen_hbm_gb_s"] == pytest.approx(gen_bytes / grpo_record["gen_s"] / 1e9, rel=2e-3)
    assert grpo_record["mfu"] is None and grpo_record["gen_hbm_frac"] is None  # float32 on a CPU: no listed peak
    assert grpo_record["dtype"] == "float32"


def test_table_lists_the_figures(grpo_record):
    text = benchmark.table(grpo_record)
    assert text.splitlines()[0].startswith("rl4llm grpo_step nano")
    assert "gen_tok_s" in text and str(grpo_record["gen_tok_s"]) in text
    assert "EOS" in text


def test_workload_shapes_follow_workloads_md():
    grpo, sample = benchmark.WORKLOADS["grpo_step"], benchmark.WORKLOADS["sample_only"]
    assert (grpo.num_prompts, grpo.group_size, grpo.prompt_len, grpo.new_tokens, grpo.learn) == (8, 8, 32, 64, True)
    ppo = benchmark.WORKLOADS["ppo_step"]
    assert dataclasses.replace(ppo, name="grpo_step", critic=False) == grpo and ppo.critic
    assert (sample.batch, sample.prompt_len, sample.new_tokens, sample.learn) == (64, 32, 256, False)
    assert benchmark.default_steps("tiny") == 5 and benchmark.default_steps("small") == 3
    assert benchmark.sampling_config(grpo).stop_token_ids == ()
    cfg = benchmark.learner_config(128)
    assert (cfg.kl_coef, cfg.kl_kind, cfg.agg_mode, cfg.use_old_logp, cfg.micro_batch_size) == (
        0.04, "k3", "seq-mean-token-mean", False, 0)


def test_models_match_workloads_md():
    for name, shape in (("tiny", (1024, 256, 4, 4, 2, 64, 1024)), ("small", (8192, 512, 8, 8, 4, 64, 2048))):
        c = models.get_config(name)
        assert (c.vocab_size, c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim,
                c.intermediate_size) == shape
        assert c.qkv_bias and c.tie_embeddings and not c.qk_norm and c.dtype == c.param_dtype == "float32"


def test_prompts_avoid_the_pad_id_and_repeat_per_group():
    tokens, mask = benchmark.random_prompts(GRPO, vocab_size=3, seed=0)
    assert tokens.shape == mask.shape == (GRPO.batch, GRPO.prompt_len) and mask.all()
    assert tokens.min() >= 1 and tokens.max() <= 2
    np.testing.assert_array_equal(tokens[0], tokens[GRPO.group_size - 1])


def test_even_fraction_reward():
    tokens = np.array([[2, 3, 4, 0], [1, 3, 5, 6], [8, 8, 8, 8]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], bool)
    np.testing.assert_allclose(benchmark.even_fraction_reward(tokens, mask), [2 / 3, 1 / 4, 0.0])


def test_memory_probe_record():
    wl = benchmark.Workload("memory_probe", num_prompts=4, group_size=1, prompt_len=3, new_tokens=8, learn=True)
    record = benchmark.memory_probe(NANO, "nano", wl, logprob_chunk_size=4, micro_batch_size=2, seed=0,
                                    execute=True)
    assert record["full_logits_mb"] == pytest.approx(4 * 8 * NANO.vocab_size * 4 / 2 ** 20)
    assert record["temp_mb"] > 0 and record["argument_mb"] > 0
    assert record["step_s"] > 0 and record["compile_s"] > 0 and record["peak_rss_mb"] > 10
    assert record["micro_batch_size"] == 2 and record["logprob_chunk_size"] == 4
    assert (record["remat"], record["attention_query_chunk"]) == (NANO.remat, NANO.attention_query_chunk)


def test_shared_prompt_learner_step_equals_the_per_row_one():
    """The benchmark's learner forwards each group's prompt once (LearnerConfig.prompt_group = group size): on a real
    grouped rollout its metrics and updated params equal the per-row learner's (up to rounding)."""
    key = jax.random.key(0)
    optimizer = benchmark.make_optimizer()
    state = benchmark.init_state(NANO, key, optimizer)
    rollout, scores = benchmark.generate_and_score(NANO, GRPO, state.params, benchmark.random_prompts(GRPO, 256, 0),
                                                   key)
    batch = benchmark.learner_batch(rollout, benchmark.group_advantages(GRPO, rollout, scores))
    results = []
    for shared in (False, True):
        programs = benchmark.make_programs(NANO, GRPO, optimizer, 4, shared_prompt=shared)
        copy = jax.tree.map(lambda x: x.copy(), state)  # the step donates its state
        results.append(jax.device_get(programs.learner_step(copy, batch, key)))
    (per_row, per_row_metrics), (shared, shared_metrics) = results
    for name in ("loss/pg", "loss/kl", "grad_norm", "entropy"):
        np.testing.assert_allclose(shared_metrics[name], per_row_metrics[name], rtol=1e-4, atol=1e-6)
    for a, b in zip(jax.tree.leaves(shared.params), jax.tree.leaves(per_row.params)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
