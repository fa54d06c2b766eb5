"""Run under XLA_FLAGS=--xla_force_host_platform_device_count=8 with a work directory (see test_judges_mesh.py): the
outcome RM's scores, the PRM's step scores, the generative verifier's P(Yes) and its sampled critiques (texts,
finished, lengths) on the judges' mesh of `config.mesh.judges` — shared (the learner's (2, 2, 2) mesh) and
disaggregated (4 devices, fsdp 2 x tensor 2, beside a disaggregated sampler) — equal the unplaced scores; their
weights are sharded on the judges' devices; the co-trained RM (Cooper) is sharded with the learner's state; the
configs it cannot serve are refused naming the field; a nano RL job with its RM disaggregated on the last 2 devices
logs `reward_model/score_mean`. Exits non-zero on a failure; prints OK."""

import math
import pathlib
import sys
import tempfile

import jax
import numpy as np
import jax.numpy as jnp
import optax

from configs import default
from rl4llm import config as config_lib
from rl4llm import models
from rl4llm import process_reward_model as prm
from rl4llm import reward_model as rm
from rl4llm import sampling
from rl4llm.data import arithmetic
from rl4llm.parallel import layout as layout_lib
from rl4llm.parallel import mesh as mesh_lib
from rl4llm.tokenizers import sentencepiece_tokenizer
from rl4llm.train import job
from rl4llm.train import metrics as metrics_lib
from rl4llm.train import single_turn
from rl4llm.verifiers import critique
from rl4llm.verifiers import generative
from tests.test_reward_model_rl import nano_job, write_rm

CFG = models.get_config("nano", vocab_size=24, num_heads=4, num_kv_heads=2)
N, L, T = 6, 14, 6  # 6 rows: not a multiple of the 4 row shards of (2, 2, 2), so the padding is exercised

# name -> (config.mesh fields, the judges' devices)
MESHES = {
    "shared (2,2,2)": ({"data": 2, "fsdp": 2, "tensor": 2}, range(8)),
    "disaggregated (1,2,2) beside a disaggregated sampler": (
        {"judges": "disaggregated", "judge_devices": 4, "judge_data": 1, "judge_fsdp": 2, "judge_tensor": 2,
         "sampler": "disaggregated", "sampler_devices": 2}, range(2, 6)),
}


def judges_and_inputs():
    """The three judges, unplaced (random nano params, a non-zero head), and a batch with pads on both sides."""
    params = rm.init_params(CFG, jax.random.key(0))
    params["head"]["kernel"] = jax.random.normal(jax.random.key(1), (CFG.hidden_size,))
    verifier = generative.Verifier(CFG, models.init_params(CFG, jax.random.key(2)), tokenizer=None, pieces=(),
                                   yes_id=5, no_id=6, normalisation="full", max_length=L)
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, CFG.vocab_size, size=(N, L)).astype(np.int32)
    lengths, starts = rng.integers(2, 9, size=N), rng.integers(0, 5, size=N)
    mask = ((np.arange(L) >= starts[:, None]) & (np.arange(L) < (starts + lengths)[:, None])).astype(np.int32)
    step_ends = (rng.random((N, T)) < 0.4) & (mask[:, -T:] > 0)
    tokenizer = sentencepiece_tokenizer.get_or_train_task_tokenizer(tempfile.mkdtemp(), arithmetic.ArithmeticConfig())
    sampling_cfg = sampling.SamplingConfig(max_new_tokens=6, temperature=1.0, stop_token_ids=tokenizer.stop_token_ids,
                                           pad_id=tokenizer.pad_id)
    critic = critique.CritiqueVerifier(CFG, verifier.params, tokenizer, pieces=(), max_length=L, samples=2,
                                       sampling_cfg=sampling_cfg)
    judges = {"outcome RM": rm.Scorer(CFG, params, {}), "PRM": prm.Scorer(CFG, params, {}), "P(Yes)": verifier,
              "critiques": critic}
    return judges, (tokens, mask, step_ends)


def scores(judge, tokens, mask, step_ends):
    if isinstance(judge, prm.Scorer):
        return judge(tokens, mask, step_ends)
    if isinstance(judge, generative.Verifier):
        return np.stack(judge.probabilities(tokens, mask))
    if isinstance(judge, critique.CritiqueVerifier):  # k = 2 sampled critiques per text, at temperature 1
        texts, finished, lengths = critique.sample_critiques(judge.cfg, judge.params, judge.tokenizer, tokens, mask,
                                                             judge.samples, judge.sampling_cfg, jax.random.key(3),
                                                             judge.placement)
        assert len(set(texts)) > 1, texts  # the critiques vary: a wrong row order or key would show
        return texts, finished, lengths
    return judge(tokens, mask)


def matches(got, expected) -> bool:
    """Scores allclose (1e-5); critiques (a tuple) exactly equal."""
    if isinstance(expected, tuple):
        return got[0] == expected[0] and all(np.array_equal(a, b) for a, b in zip(got[1:], expected[1:]))
    return np.allclose(got, expected, rtol=1e-5, atol=1e-5)


def mesh_config(**fields):
    """The default config.mesh (ml_collections form) with `fields`."""
    mesh = default.get_config().mesh
    mesh.update(fields)
    return mesh


def check_placements(judges, inputs):
    expected = {name: scores(judge, *inputs) for name, judge in judges.items()}
    for mesh_name, (fields, devices) in MESHES.items():
        meshes = mesh_lib.meshes_from_config(mesh_config(**fields))
        placement = layout_lib.Layout(meshes, CFG).judges
        assert set(meshes.judges.devices.flat) == {jax.devices()[i] for i in devices}, mesh_name
        padded = placement.place_rows(inputs)[0]  # rows padded to a multiple of the row shards (data x fsdp)
        assert padded.shape[0] == -(-N // placement.row_shards) * placement.row_shards, (mesh_name, padded.shape)
        for name, judge in judges.items():
            placed = judge.placed(placement)
            trunk = placed.params.get("trunk", placed.params)  # RM / PRM: trunk + head; verifier: a bare decoder
            for leaf in (trunk["layers"][0]["mlp"]["gate_proj"]["kernel"], trunk["embed"]):
                assert not leaf.sharding.is_fully_replicated, (mesh_name, name, leaf.sharding)
                assert leaf.sharding.device_set == set(meshes.judges.devices.flat), (mesh_name, name)
            got = scores(placed, *inputs)
            if not matches(got, expected[name]):
                raise SystemExit(f"{mesh_name}, {name}: {got} != {expected[name]}")
        print(mesh_name, "scores match", flush=True)


def check_co_trained_rm_is_sharded_with_the_state(params):
    """Cooper's RM (`TrainState.extras["reward_model"]`: params and AdamW moments) gets the policy's shardings on the
    learner's mesh, like the rest of the state (`rules.tree_shardings` matches each leaf's key path's end)."""
    state = {"extras": {"reward_model": rm.init_state(params, optax.adamw(1e-3))}}
    layout = layout_lib.Layout(mesh_lib.meshes_from_config(mesh_config(**MESHES["shared (2,2,2)"][0])), CFG)
    shardings = layout.state_shardings(state)["extras"]["reward_model"]
    mu = shardings.opt_state[0].mu
    for sharding in (shardings.params["trunk"]["layers"][0]["mlp"]["gate_proj"]["kernel"],
                     mu["trunk"]["layers"][0]["mlp"]["gate_proj"]["kernel"], shardings.params["trunk"]["embed"]):
        assert not sharding.is_fully_replicated and sharding.mesh == layout.meshes.learner, sharding
    print("co-trained RM sharded with the state", flush=True)


def refused(expected: str, **overrides) -> None:
    """config_lib.parse refuses the default config with `overrides`, naming `expected`."""
    config = default.get_config()
    config.update_from_flattened_dict(overrides)
    try:
        config_lib.parse(config)
    except config_lib.ConfigError as e:
        assert expected in str(e), (expected, str(e))
        return
    raise SystemExit(f"{overrides} was accepted")


def check_bad_configs():
    judge = {"reward_model.checkpoint": "/nowhere", "mesh.judges": "disaggregated"}
    refused("config.mesh.judges", **{"mesh.judges": "elsewhere"})
    refused("config.mesh.judge_devices=8", **judge, **{"mesh.judge_devices": 8})
    refused("config.mesh.judge_devices=0", **judge)
    refused("config.mesh.judge_devices=6", **judge, **{"mesh.judge_devices": 6, "mesh.sampler": "disaggregated",
                                                       "mesh.sampler_devices": 2})
    refused("config.mesh.judge_{data,fsdp,tensor}", **judge, **{"mesh.judge_devices": 2, "mesh.judge_data": 4})
    refused("config.mesh.judges='disaggregated': the run has no judge model",
            **{"mesh.judges": "disaggregated", "mesh.judge_devices": 2})
    refused("config.mesh.judges='disaggregated' with config.reward_model.co_train=True",
            **judge, **{"mesh.judge_devices": 2, "reward_model.co_train": True})
    print("bad configs refused", flush=True)


def check_rl_job(workdir: pathlib.Path):
    """A nano RL job whose outcome RM is disaggregated on the last 2 of the 8 devices (fsdp 2; the learner and the
    sampler on the other 6) places the RM there and runs 2 RL steps that log `reward_model/score_mean`."""
    write_rm(workdir / "job", str(workdir / "rm"), lambda cfg: {
        "kernel": jax.random.normal(jax.random.key(1), (cfg.hidden_size,)), "bias": jnp.asarray(0.0)})
    config = nano_job(str(workdir / "rm"), mode="add", weight=0.5)
    config.rl.num_prompts, config.sft.batch_size = 3, 12  # 12 rows: a multiple of the learner's 6 devices
    config.mesh.update({"judges": "disaggregated", "judge_devices": 2, "judge_data": 1, "judge_fsdp": 2})
    setup = single_turn.build_setup(config_lib.parse(config), str(workdir / "job"))
    kernel = setup.reward_model.params["trunk"]["layers"][0]["mlp"]["gate_proj"]["kernel"]
    assert kernel.sharding.device_set == set(jax.devices()[6:]) and not kernel.sharding.is_fully_replicated, (
        kernel.sharding)
    assert math.prod(setup.layout.meshes.learner.devices.shape) == 6
    job.run(config, str(workdir / "job"))
    records = [r for r in metrics_lib.read_metrics(str(workdir / "job"), "rl") if "reward" in r]
    assert [r["step"] for r in records] == [1, 2], records
    for r in records:
        assert r["reward_model/score_std"] > 1e-3, r  # the scores depend on the completion
        assert abs(r["reward"] - (r["reward/exact_answer"] + 0.5 * r["reward_model/score_mean"])) < 1e-5, r
    print("RL job: reward_model/score_mean", [round(r["reward_model/score_mean"], 4) for r in records], flush=True)


if __name__ == "__main__":
    assert jax.device_count() == 8, jax.devices()
    judges, inputs = judges_and_inputs()
    check_placements(judges, inputs)
    check_co_trained_rm_is_sharded_with_the_state(judges["outcome RM"].params)
    check_bad_configs()
    check_rl_job(pathlib.Path(sys.argv[1]))
    print("OK")
