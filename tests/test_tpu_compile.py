"""Every program of an RL step compiles for real TPU topologies (libtpu's compile-only devices, no TPU needed), and
the per-chip memory XLA reports is what the sharding rules promise: a rule that replicates what it should split, or
a program that does not compile for TPU, fails here. Needs the `tpu` extra (`pip install -e ".[tpu]"`); without
libtpu every test fails with the install command."""

from __future__ import annotations

import math

import jax
import pytest

from configs import default
from rl4llm import models
from rl4llm.models import flops as flops_lib
from rl4llm.parallel import tpu
from rl4llm.train import aot
from rl4llm.train import aot_plan

# state bytes per parameter: float32 params, Adam's two moments, the float32 KL reference copy
STATE_BYTES_PER_PARAM = 4 + 4 + 4 + 4
ROWS, PROMPT_LEN, NEW_TOKENS = 8, 8, 8
XLA_FLOPS_TOLERANCE = 0.15  # XLA also counts the element-wise work (norms, softmax, Adam) the analytic count omits
PADDING = 1.25  # the most TPU tiling adds to the state's bytes here (measured: 1.19 for tiny on v5e:2x2)


def small_run(preset: str, mesh: tuple[int, int, int], remat: str = "none"):
    """A GRPO step of 2 prompts x 4 completions (8 + 8 tokens) with KL to the reference, one update, no remat by
    default (no layer scan: XLA's FLOP count then covers the whole step)."""
    c = default.get_config()
    c.model.preset = preset
    c.model.remat = remat
    c.rl.num_prompts, c.rl.num_generations, c.rl.num_minibatches = 2, 4, 1
    c.rl.kl_coef = 0.01
    c.sampling.max_new_tokens = NEW_TOKENS
    c.mesh.data, c.mesh.fsdp, c.mesh.tensor = mesh
    return aot.parse_for_slice(c)


def num_params(preset: str) -> int:
    shapes = jax.eval_shape(models.init_params, models.get_config(preset), jax.random.key(0))
    return sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))


# (topology, mesh (data, fsdp, tensor), chips every weight is split over)
LAYOUTS = [("v5e:2x2", (1, 4, 1), 4), ("v5p:2x2x1", (2, 1, 2), 2)]


# tiny without remat (whole-step FLOP cross-check), small with a scan over its remat'ed layers (as a real slice runs
# a large model; also 40 % less compile time than unrolling its 8 layers)
@pytest.mark.parametrize("preset,remat", [("tiny", "none"), ("small", "full")])
@pytest.mark.parametrize("topology,mesh,weight_shards", LAYOUTS)
def test_learner_and_sampler_compile_with_the_rules_memory(preset, remat, topology, mesh, weight_shards):
    devices = tpu.topology_devices(topology)
    assert len(devices) == 4 and devices[0].platform == "tpu"
    programs = {p.name: p for p in aot.compile_run(small_run(preset, mesh, remat), devices, PROMPT_LEN)}
    assert set(programs) == {"learner.step", "sampler.generate"}
    assert all(p.fits for p in programs.values())
    n = num_params(preset)
    chip = tpu.CHIPS[topology.split(":")[0]]

    # Learner: params, both Adam moments and the reference, each split over `weight_shards` chips (biases and norm
    # scales stay replicated: < 1% of the parameters here), plus the batch's rows over data x fsdp. TPU tiling pads
    # a shard's minor dims up to (8, 128): with head_dim 64 (tiny, small) that adds up to PADDING; a replicated
    # weight would add (weight_shards - 1) times its bytes.
    learner = programs["learner.step"].memory
    state = STATE_BYTES_PER_PARAM * n / weight_shards
    batch_rows = ROWS // (mesh[0] * mesh[1])
    batch = batch_rows * ((PROMPT_LEN + NEW_TOKENS) * 2 * 4 + NEW_TOKENS * 4 * 4)
    assert state + batch <= learner.arguments <= PADDING * (state + batch)
    assert learner.aliased >= 0.98 * learner.arguments - batch  # the donated state is updated in place
    assert tpu.fits(learner, chip)

    # Sampler: the float32 params on the same mesh, the prompts' rows split over data x fsdp.
    sampler = programs["sampler.generate"].memory
    assert 4 * n / weight_shards <= sampler.arguments <= PADDING * 4 * n / weight_shards
    assert sampler.temporaries > 0 and tpu.fits(sampler, chip)

    if remat != "none":  # XLA counts a scan's body once
        return
    # Without a layer scan, micro-batch scan or query chunks, XLA's FLOP count of the learner step is the analytic
    # one: policy forward + backward (3x the forward) + the reference forward, split over the chips. Each group's
    # prompt is forwarded once (rl.shared_prompt_forward, 4 rows per prompt), for 2 prompts instead of 8.
    fwd = flops_lib.learner_forward_flops(models.get_config(preset), ROWS, PROMPT_LEN + NEW_TOKENS, NEW_TOKENS, 4)
    assert fwd < 0.75 * flops_lib.sequence_forward_flops(models.get_config(preset), ROWS, PROMPT_LEN + NEW_TOKENS,
                                                          NEW_TOKENS)
    assert sum(ph.flops for ph in programs["learner.step"].phases) == pytest.approx(4 * fwd)
    assert programs["learner.step"].xla_flops * len(devices) == pytest.approx(4 * fwd, rel=XLA_FLOPS_TOLERANCE)


def test_topologies_chips_and_accelerator_types():
    assert tpu.accelerator_type("v5p:4x4x4") == "v5p-128" and tpu.num_chips("v5p:4x4x4") == 64
    assert tpu.accelerator_type("v5e:4x4") == "v5e-16" and tpu.accelerator_type("v6e:2x2") == "v6e-4"
    with pytest.raises(ValueError, match="v5e:4x4"):
        tpu.parse_topology("v5x:4x4")
    v4 = tpu.topology_devices("v4:2x2x1")  # libtpu exposes both TensorCores of a v4 chip
    chip = tpu.per_device(tpu.CHIPS["v4"], "v4:2x2x1", len(v4))
    assert chip.hbm_bytes * len(v4) == tpu.CHIPS["v4"].hbm_bytes * 4


def test_roofline_and_mfu():
    chip = tpu.CHIPS["v5p"]
    compute = tpu.Phase("x", flops=2 * 459e12, model_flops=459e12, hbm_bytes_per_chip=1.0)
    assert compute.seconds(chip, chips=2) == pytest.approx(1.0) and compute.bound(chip, 2) == "compute"
    assert tpu.mfu(compute.model_flops, 1.0, chip, 2) == pytest.approx(0.5)
    memory = tpu.Phase("y", flops=0.0, model_flops=0.0, hbm_bytes_per_chip=2765e9)
    assert memory.seconds(chip, chips=2) == pytest.approx(1.0) and memory.bound(chip, 2) == "memory"


def test_planner_ranks_every_layout_of_the_slice_without_compiling():
    config = small_run("tiny", (1, 4, 1))
    candidates = aot_plan.plan_candidates(config, 4, models.get_config("tiny"))  # 4 heads: tensor 1, 2 or 4
    assert {c["mesh"] for c in candidates} == {(1, 4, 1), (2, 2, 1), (4, 1, 1), (1, 2, 2), (2, 1, 2), (1, 1, 4)}
    assert {c["remat"] for c in candidates} == {"full", "dots"}
    for c in candidates:
        shards = c["mesh"][0] * c["mesh"][1]
        assert c["micro_batch_size"] % shards == 0 and ROWS % c["micro_batch_size"] == 0
    devices = tpu.topology_devices("v5e:2x2")
    estimate = aot.compile_run(aot_plan.with_layout(config, candidates[0]), devices, PROMPT_LEN, compile=False)
    assert all(p.memory is None and p.phases for p in estimate)
    seconds, model_flops = aot.step_estimate(estimate, tpu.CHIPS["v5e"], 4)
    assert seconds > 0 and model_flops > 0


def test_chunked_sampler_compiles_at_the_chunk_shape():
    """sampling.rows_per_call = 4 of the step's 8 rows: the sampler compiles for one call of 4 rows (one prompt's
    group), run twice per step, each call half the decode FLOPs of the one-call sampler."""
    config = small_run("tiny", (1, 4, 1))
    devices = tpu.topology_devices("v5e:2x2")
    chunked = {p.name: p for p in aot.compile_run(config.replace(sampling={"rows_per_call": 4}), devices, PROMPT_LEN)}
    whole = {p.name: p for p in aot.compile_run(config, devices, PROMPT_LEN, compile=False)}
    sampler = chunked["sampler.generate"]
    assert sampler.fits and sampler.memory.temporaries > 0 and tpu.fits(sampler.memory, tpu.CHIPS["v5e"])
    assert sampler.calls_per_step == 2 and whole["sampler.generate"].calls_per_step == 1
    decode = {ph.name: ph.flops for ph in sampler.phases}["decode"]
    assert decode == flops_lib.decode_flops(models.get_config("tiny"), ROWS // 2, PROMPT_LEN, NEW_TOKENS)
    assert 2 * decode == pytest.approx({ph.name: ph.flops for ph in whole["sampler.generate"].phases}["decode"])
    assert chunked["learner.step"].calls_per_step == whole["learner.step"].calls_per_step == 1  # the learner as before


def test_colocated_sampler_holds_a_compute_dtype_copy_beside_the_state():
    """A colocated tensor-parallel sampler (1, 1, 4) beside an FSDP learner (1, 4, 1), bfloat16 compute: the
    sampler's weights are its own copy with the matrices in bfloat16 (half the float32 bytes), split over the tensor
    axis; the reshard program writes that copy; the learner's whole state stays in HBM beside the sampler and is
    counted against the chip (`Program.resident`), as the state but its params is beside the behaviour pass."""
    config = small_run("tiny", (1, 4, 1)).replace(
        model={"dtype": "bfloat16"}, mesh={"sampler": "colocated", "sampler_data": 1, "sampler_fsdp": 1,
                                          "sampler_tensor": 4})
    devices = tpu.topology_devices("v5e:2x2")
    programs = {p.name: p for p in aot.compile_run(config, devices, PROMPT_LEN, parts=("sampler",))}
    assert set(programs) == {"sampler.generate", "weights.learner_to_sampler"}
    n, cfg = num_params("tiny"), models.get_config("tiny")
    vectors = cfg.num_layers * 2 * cfg.hidden_size + cfg.hidden_size  # RMSNorm scales, float32, replicated
    sampler = programs["sampler.generate"]
    weights = 2 * (n - vectors) / 4 + 4 * vectors
    assert weights <= sampler.memory.arguments <= PADDING * weights + 2 * ROWS * PROMPT_LEN * 4
    state = STATE_BYTES_PER_PARAM * n / 4  # float32 params, Adam's moments, KL reference: FSDP over 4
    assert state <= sampler.resident <= PADDING * state
    assert sampler.peak_with_state == sampler.memory.peak + sampler.resident
    assert sampler.fits_chip(tpu.CHIPS["v5e"])
    # The cast on the learner's FSDP layout writes a quarter of the bfloat16 matrices per chip; beside it the state
    # but its params, and the sampler-layout copy the transfer then writes.
    reshard = programs["weights.learner_to_sampler"]
    assert weights <= reshard.memory.outputs <= PADDING * weights
    assert reshard.resident == pytest.approx(sampler.resident - 4 * n / 4 + sampler.memory.arguments, rel=0.2)
    # The roofline: decoding streams the bfloat16 copy split over 4 chips, a quarter of the shared FSDP sampler's
    # float32 weights (each FSDP chip streams every weight, gathered)
    shared = {p.name: p for p in aot.compile_run(small_run("tiny", (1, 4, 1)).replace(model={"dtype": "bfloat16"}),
                                                 devices, PROMPT_LEN, compile=False, parts=("sampler",))}
    prefill = lambda p: {ph.name: ph for ph in p.phases}["prefill"].hbm_bytes_per_chip  # noqa: E731
    assert prefill(shared["sampler.generate"]) == pytest.approx(8 * prefill(sampler))


def test_planner_searches_sampler_layouts_after_the_learners():
    """The sampler's candidates: the learner's own mesh, or any colocated layout of the same chips whose tensor size
    divides the heads, each with the whole step per call or half of it; the roofline ranks the tensor-parallel copy
    and one call first (the fewest bytes streamed per token, the weights streamed once). Each carries the analytic
    lower bound of its memory the planner uses to skip layouts without compiling them."""
    config = small_run("tiny", (1, 4, 1)).replace(model={"dtype": "bfloat16"})
    candidates = aot_plan.sampler_candidates(config, 4, models.get_config("tiny"))
    assert {c["rows_per_call"] for c in candidates} == {ROWS, ROWS // 2}  # whole groups of 4
    assert {c["sampler"] for c in candidates if "sampler_mesh" not in c} == {"shared"}
    assert {c["sampler_mesh"] for c in candidates if "sampler_mesh" in c} == {
        (1, 4, 1), (2, 2, 1), (4, 1, 1), (1, 2, 2), (2, 1, 2), (1, 1, 4)}
    assert len(candidates) == 2 * 7
    devices, chip = tpu.topology_devices("v5e:2x2"), tpu.CHIPS["v5e"]
    estimates = {str(c): aot.compile_run(aot_plan.with_sampler_layout(config, c), devices, PROMPT_LEN, compile=False,
                                         parts=("sampler",)) for c in candidates}
    seconds = {k: aot.step_estimate(v, chip, 4)[0] for k, v in estimates.items()}
    assert min(seconds, key=seconds.get) == str({"sampler": "colocated", "sampler_mesh": (1, 1, 4),
                                                 "rows_per_call": ROWS})
    half = aot_plan.with_sampler_layout(config, {"sampler": "shared", "rows_per_call": ROWS // 2})
    assert half.sampling.rows_per_call == ROWS // 2 and half.mesh.sampler == "shared"
    whole = aot_plan.with_sampler_layout(config, {"sampler": "shared", "rows_per_call": ROWS})
    assert whole.sampling.rows_per_call == 0  # one call: no chunking
    # lower bound: the sampler's weights (float32 FSDP shards on the shared mesh) + its KV cache + the state but its
    # params; half the rows per call, half the KV cache
    cfg, n = models.get_config("tiny"), num_params("tiny")
    slots = PROMPT_LEN + NEW_TOKENS
    kv = lambda rows: 2 * cfg.num_layers * rows * cfg.num_kv_heads * slots * cfg.head_dim * 2  # noqa: E731
    bound = {r: next(p for p in estimates[str({"sampler": "shared", "rows_per_call": r})]
                     if p.name == "sampler.generate").lower_bound for r in (ROWS, ROWS // 2)}
    # and the prefill's gate and up outputs of every prompt token (bfloat16 [rows, P, I] each, rows over 4 chips)
    mlp = lambda rows: 2 * rows * PROMPT_LEN * cfg.intermediate_size * 2  # noqa: E731
    assert bound[ROWS] - bound[ROWS // 2] == pytest.approx((kv(ROWS) - kv(ROWS // 2) + mlp(ROWS) - mlp(ROWS // 2)) / 4)
    floor = STATE_BYTES_PER_PARAM * n / 4 + (kv(ROWS) + mlp(ROWS)) / 4
    assert floor <= bound[ROWS] <= PADDING * floor
    with pytest.raises(ValueError, match="parts"):
        aot.compile_run(config, devices, PROMPT_LEN, compile=False, parts=("critic",))
