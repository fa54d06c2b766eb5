"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=8 (see test_parallel_mesh.py).

For meshes (data, fsdp, tensor) = (8,1,1), (2,4,1), (2,2,2), (1,1,8): the learner step on the sharded state
and batch (`parallel.Layout`) gives the single-device loss, gradients and updated params (float32
tolerance), keeps its params sharded by the logical-axis rules, and the sampler on that mesh draws the
single-device tokens for the same key. Also a colocated sampler mesh (another layout of the same devices) and a
disaggregated one (4 learner + 4 sampler devices), whose rollouts come back replicated on the learner's devices.
And online DPO (`train.preference_step`: pairs of rows across the batch's shards, micro-batched) on the (2,2,2) mesh,
and HAPO's adaptive-temperature sampler and the EPTree sampler on the disaggregated one.
Prints OK; exits non-zero on mismatch.
"""

import dataclasses

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from jax.sharding import PartitionSpec as P

from rl4llm import models, sampling
from rl4llm.parallel import layout as layout_lib
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.sampling import tree as sampling_tree
from rl4llm.train import learner
from rl4llm.train import preference_step

# Every sharded dimension divides by 8: heads = kv_heads = 8, mlp 64, vocab 64, width 32.
MODEL = models.ModelConfig(vocab_size=64, hidden_size=32, num_layers=1, num_heads=8, num_kv_heads=8, head_dim=4,
                           intermediate_size=64, remat="none", attention_query_chunk=0)
N, P_LEN, T = 16, 6, 6
# Plain SGD with learning rate 1: params - updated params = gradients, so the update exposes them.
OPTIMIZER = optax.sgd(1.0)
CFG = learner.LearnerConfig(loss="ppo_clip", loss_kwargs=(), agg_mode="seq-mean-token-mean", kl_coef=0.04,
                            kl_kind="k3", entropy_coef=0.0, temperature=1.0, micro_batch_size=0,
                            logprob_chunk_size=T, use_old_logp=True)
SAMPLING = sampling.SamplingConfig(max_new_tokens=T, temperature=1.0, pad_id=0)


def mesh_config(data, fsdp, tensor, placement="shared", sampler=(1, 1, -1), sampler_devices=0):
    c = ml_collections.ConfigDict(dict(data=data, fsdp=fsdp, tensor=tensor, sampler=placement, judges="shared",
                                       sampler_devices=sampler_devices))
    c.sampler_data, c.sampler_fsdp, c.sampler_tensor = sampler
    return c


def initial_state(key):
    params = models.init_params(MODEL, key)
    # Larger weights than the 0.02 init, so the policy is far from uniform and the gradients are not tiny.
    params = jax.tree.map(lambda x: x * 10 if x.ndim > 1 else x, params)
    return learner.TrainState(params=params, opt_state=OPTIMIZER.init(params),
                              ref_params=jax.tree.map(lambda x: x * 0.9, params), key=jnp.zeros(2, jnp.uint32))


def random_batch(rng):
    tokens = rng.integers(1, MODEL.vocab_size, (N, P_LEN + T)).astype(np.int32)
    attention_mask = np.ones((N, P_LEN + T), np.int32)
    attention_mask[: N // 2, :2] = 0  # left padding on half the rows
    completion_mask = (rng.random((N, T)) < 0.8).astype(np.float32)
    old_logp = -rng.uniform(0.5, 5.0, (N, T)).astype(np.float32)
    return learner.LearnerBatch(tokens=tokens, attention_mask=attention_mask, completion_mask=completion_mask,
                                advantages=rng.standard_normal((N, T)).astype(np.float32) * completion_mask,
                                old_logp=old_logp, sampler_logp=old_logp)


def run_learner(state, batch, layout=None, cfg=CFG):
    step = learner.make_learner_step(MODEL, cfg, OPTIMIZER, layout, state)
    new_state, metrics = step(state, batch, jax.random.key(3))
    return new_state, jax.device_get(metrics)


def close(a, b, what, atol=2e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=atol, err_msg=what)


def main():
    assert jax.device_count() == 8, jax.devices()
    key = jax.random.key(0)
    host_state = jax.device_get(initial_state(key))
    batch = random_batch(np.random.default_rng(0))
    ref_state, ref_metrics = run_learner(jax.device_put(host_state, jax.devices()[0]),
                                         jax.device_put(batch, jax.devices()[0]))
    ref_grads = jax.tree.map(lambda a, b: a - b, host_state.params, jax.device_get(ref_state.params))
    assert max(float(np.abs(g).max()) for g in jax.tree.leaves(ref_grads)) > 1e-3, "gradients too small to compare"
    prompts = (np.asarray(batch.tokens[:, :P_LEN]), np.asarray(batch.attention_mask[:, :P_LEN]))
    ref_rollout = jax.device_get(sampling.generate(MODEL, host_state.params, *prompts, jax.random.key(5), SAMPLING))
    group_index = np.repeat(np.arange(len(prompts[0]) // 2), 2).astype(np.int32)  # half the prompts, G = 2
    ref_groups = jax.device_get(sampling.generate(MODEL, host_state.params, *(x[group_index] for x in prompts),
                                                  jax.random.key(5), SAMPLING))

    for shape in ((8, 1, 1), (2, 4, 1), (2, 2, 2), (1, 1, 8)):
        layout = layout_lib.Layout(mesh_lib.meshes_from_config(mesh_config(*shape)), MODEL)
        state = layout.shard_state(host_state)
        new_state, metrics = run_learner(state, layout.place_batch(batch), layout)
        for k in ("loss/pg", "loss/kl", "entropy", "grad_norm", "clip_frac"):
            close(metrics[k], ref_metrics[k], f"{shape} {k}")
        grads = jax.tree.map(lambda a, b: a - b, host_state.params, jax.device_get(new_state.params))
        jax.tree.map(lambda g, r: close(g, r, f"{shape} gradients"), grads, ref_grads)
        jax.tree.map(lambda a, b: close(a, b, f"{shape} params"), jax.device_get(new_state.params),
                     jax.device_get(ref_state.params))
        # The update keeps the rules' layout: FSDP over the width, tensor parallelism over heads / mlp / vocab.
        q = new_state.params["layers"][0]["attn"]["q_proj"]["kernel"]  # [embed, heads, head_dim]
        down = new_state.params["layers"][0]["mlp"]["down_proj"]["kernel"]  # [mlp, embed]
        fsdp = "fsdp" if shape[1] > 1 else None
        tensor = "tensor" if shape[2] > 1 else None
        assert q.sharding.spec == P(fsdp, tensor, None), (shape, q.sharding)
        assert down.sharding.spec == P(tensor, fsdp), (shape, down.sharding)
        assert new_state.params["embed"].sharding.spec == P(tensor, fsdp), (shape, new_state.params["embed"].sharding)
        # Optimizer state is sharded like the params it mirrors (Adam's mu / nu); counters are replicated.
        adam_state = learner.TrainState(params=host_state.params, opt_state=optax.adam(1e-3).init(host_state.params),
                                        ref_params=None, key=host_state.key)
        shardings = layout.state_shardings(adam_state)
        for moment in (shardings.opt_state[0].mu, shardings.opt_state[0].nu):
            assert moment["layers"][0]["attn"]["q_proj"]["kernel"].spec == P(fsdp, tensor, None), (shape, moment)
        assert shardings.opt_state[0].count.spec == P(), shape

        rollout = jax.device_get(layout.generate(state_params(layout, host_state),
                                                 *prompts, jax.random.key(5), SAMPLING))
        check_rollout(rollout, ref_rollout, shape)
        print(shape, "learner and sampler match", flush=True)

    placements = {
        "colocated (2,2,2) -> sampler (8,1,1)": mesh_config(2, 2, 2, "colocated", (8, 1, 1)),
        "disaggregated (1,2,2) + sampler (4,1,1)": mesh_config(1, 2, 2, "disaggregated", (-1, 1, 1), 4),
    }
    for name, mesh_cfg in placements.items():
        meshes = mesh_lib.meshes_from_config(mesh_cfg)
        layout = layout_lib.Layout(meshes, MODEL)
        learner_params = layout.shard_state(host_state).params
        sampler_params = layout.sampler_params(learner_params)
        leaf = sampler_params["layers"][0]["attn"]["q_proj"]["kernel"]
        assert leaf.sharding.mesh == meshes.sampler and leaf.sharding.is_fully_replicated, (name, leaf.sharding)
        assert set(meshes.sampler.devices.flat).isdisjoint(meshes.learner.devices.flat) == (
            "disaggregated" in name), name
        rollout = layout.generate(learner_params, *prompts, jax.random.key(5), SAMPLING)
        # Generated on the sampler's devices, handed back replicated on the learner's.
        tokens_sharding = rollout.completion_tokens.sharding
        assert tokens_sharding.device_set == set(meshes.learner.devices.flat), name
        assert tokens_sharding.is_fully_replicated, name
        check_rollout(jax.device_get(rollout), ref_rollout, name)
        print(name, "sampler matches", flush=True)
        # Each prompt prefilled once, its KV cache forked to its rows (sampling.shared_prefix_prefill).
        distinct = tuple(x[:len(group_index) // 2] for x in prompts)
        forked = layout.generate(learner_params, *distinct, jax.random.key(5), SAMPLING, group_index)
        check_rollout(jax.device_get(forked), ref_groups, f"{name} shared-prefix prefill")
    # HAPO's adaptive temperature on the last (disaggregated) layout: the entropy statistics reach the sampler's
    # devices and give the single-device tokens and per-token temperatures.
    hapo, stats = dataclasses.replace(SAMPLING, temperature_tau=0.3), jnp.asarray([0.5, 0.3, 0.7, 0.4])
    ref_hapo = jax.device_get(sampling.generate(MODEL, host_state.params, *prompts, jax.random.key(5), hapo,
                                                entropy_stats=stats))
    hapo_rollout = jax.device_get(layout.generate(learner_params, *prompts, jax.random.key(5), hapo,
                                                  entropy_stats=stats))
    check_rollout(hapo_rollout, ref_hapo, "adaptive temperature")
    close(hapo_rollout.temperatures, ref_hapo.temperatures, "adaptive temperature per token", atol=1e-5)
    assert np.asarray(ref_hapo.temperatures)[np.asarray(ref_hapo.completion_mask)].std() > 0  # it does adapt
    print("adaptive temperature sampler matches", flush=True)
    # Tree rollouts (EPTree: 2 paths per prompt, each forked once into 2 branches) from the sampler's params on the
    # disaggregated layout, as `train.completions.tree_completions` draws them: the single-device tree.
    shape = sampling_tree.TreeShape(initial_paths=2, branch_points=1, branches=2, iterations=1)
    tree_prompts = tuple(jnp.asarray(x[:4]) for x in prompts)
    ref_tree = jax.device_get(sampling_tree.generate_tree(MODEL, host_state.params, *tree_prompts,
                                                          jax.random.key(6), SAMPLING, shape))
    tree = jax.device_get(sampling_tree.generate_tree(MODEL, layout.sampler_params(learner_params), *tree_prompts,
                                                      jax.random.key(6), SAMPLING, shape))
    check_rollout(tree.rollout, ref_tree.rollout, "tree rollouts")
    np.testing.assert_array_equal(tree.tree_nodes, ref_tree.tree_nodes, err_msg="tree nodes")
    np.testing.assert_array_equal(tree.fork_position, ref_tree.fork_position, err_msg="tree fork positions")
    assert (np.asarray(ref_tree.fork_position) > 0).any()  # branches were forked after some tokens
    print("tree sampler matches", flush=True)
    check_online_dpo(host_state)
    print("OK")


def check_online_dpo(host_state):
    """DPO on each group's best-vs-worst pair (8 groups of 2 rows, micro-batches of 4 rows): the sharded step gives
    the single-device pair metrics, loss and update."""
    cfg = dataclasses.replace(CFG, kl_coef=0.0, use_old_logp=False, micro_batch_size=4,
                              preference=preference_step.PreferenceSettings("dpo", "sigmoid", 0.1, 0.0, N // 2))
    rng = np.random.default_rng(1)
    batch = random_batch(rng).replace(scores=rng.integers(0, 3, N).astype(np.float32),
                                      group_ids=np.repeat(np.arange(N // 2), 2).astype(np.int32))
    ref_state, ref_metrics = run_learner(jax.device_put(host_state, jax.devices()[0]),
                                         jax.device_put(batch, jax.devices()[0]), cfg=cfg)
    assert 0 < ref_metrics["dpo/valid_pair_frac"] < 1, ref_metrics
    layout = layout_lib.Layout(mesh_lib.meshes_from_config(mesh_config(2, 2, 2)), MODEL)
    new_state, metrics = run_learner(layout.shard_state(host_state), layout.place_batch(batch), layout, cfg)
    for k in [k for k in ref_metrics if k.startswith("dpo/")] + ["loss/pg", "grad_norm"]:
        close(metrics[k], ref_metrics[k], f"online DPO {k}")
    jax.tree.map(lambda a, b: close(a, b, "online DPO params"), jax.device_get(new_state.params),
                 jax.device_get(ref_state.params))
    print("online DPO (2, 2, 2) matches", flush=True)


def state_params(layout, host_state):
    return layout.shard_state(host_state).params


def check_rollout(rollout, ref, what):
    np.testing.assert_array_equal(rollout.completion_tokens, ref.completion_tokens, err_msg=f"{what} tokens")
    close(rollout.logprobs, ref.logprobs, f"{what} sampler log-probs", atol=1e-4)


if __name__ == "__main__":
    main()
