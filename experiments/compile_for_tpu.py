r"""Compile a recipe's programs for a Cloud TPU slice on a machine without one, and plan its memory.

    pip install -e ".[tpu]"     # libtpu: the TPU compiler, run here on the CPU
    python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_7b_grpo_gsm8k.py --topology=v5p:4x4x4
    python -m experiments.compile_for_tpu --config=configs/grpo.py --config.model.preset=tiny --topology=v5e:2x2 \
        --mesh=1,4,1

Builds the run's TrainState abstractly (jax.eval_shape: no weight is materialised), places it on the config's mesh
over the slice's compile-only devices with the logical-axis rules, and compiles every program of one RL step for that
slice (rl4llm.train.aot: the learner step with the recipe's loss, KL reference and critic; the behaviour pass; the
sampler's prefill + decode loop; the learner -> sampler reshard). Prints per program the per-chip HBM (XLA's memory
analysis: arguments, outputs, temporaries, peak) against the chip's, the compile time on this machine, XLA's FLOP
count (loop bodies counted once: a cross-check) and per phase the analytic FLOPs, HBM bytes and roofline time; then
the RL step's roofline estimate, the MFU it allows and the verdict. `--json_out` writes the same as JSON.

    python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_7b_grpo_gsm8k.py --topology=v5p:2x4x4 --plan

searches the layouts in two stages: the learner's (mesh data x fsdp x tensor, remat full / dots, micro-batch size),
then the sampler's (the learner's mesh, or a colocated data x fsdp x tensor layout of the same chips holding its own
compute-dtype copy of the weights); each stage ranks its candidates by their roofline time (analytic, no compile),
compiles them fastest first and keeps the first that fits with the run's state held beside it.
`--programs=sampler` compiles only one part.
"""

import dataclasses
import json
import math
import os
import sys

from absl import app
from absl import flags
from ml_collections import config_flags

_CONFIG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
config_flags.DEFINE_config_file(
    "config", os.path.join(_CONFIG_DIR, "default.py"), "Run config (ml_collections).", lock_config=True
)
_TOPOLOGY = flags.DEFINE_string("topology", None, "TPU slice, <chip>:<grid>: v5e:4x4, v5p:4x4x4, v6e:8x8, v4:2x2x2.",
                                required=True)
_MESH = flags.DEFINE_string("mesh", "", "data,fsdp,tensor sizes (one may be -1); default: the config's mesh.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 0, "Prompt tokens per row; 0: config.sampling.prompt_bucket.")
_JSON_OUT = flags.DEFINE_string("json_out", "", "Also write the report as JSON to this path.")
_PLAN = flags.DEFINE_bool("plan", False, "Search mesh (data x fsdp x tensor), remat and micro-batch size: rank every "
                          "layout by its roofline step time, compile them fastest first, report the first that fits.")
_PLAN_COMPILES = flags.DEFINE_integer("plan_compiles", 4, "--plan: most layouts of each part compiled before giving "
                                      "up.")
_PROGRAMS = flags.DEFINE_multi_enum("programs", ["learner", "sampler"], ["learner", "sampler"],
                                    "Which part's programs to compile (the report and verdict cover those).")

GIB = 2**30


def apply_mesh(config, mesh: str) -> None:
    """--mesh=D,F,T into config.mesh.{data,fsdp,tensor}."""
    if mesh:
        sizes = [int(v) for v in mesh.split(",")]
        if len(sizes) != 3:
            raise app.UsageError(f"--mesh={mesh!r}: expected data,fsdp,tensor, e.g. 1,-1,1")
        config.mesh.data, config.mesh.fsdp, config.mesh.tensor = sizes


def report(config, topology: str, programs, chip, devices: int) -> dict:
    """The compile's findings as a dict (what is printed and written with --json_out)."""
    from rl4llm.parallel import tpu
    from rl4llm.train import aot

    seconds, model_flops = aot.step_estimate(programs, chip, devices)
    rows = []
    for p in programs:
        phases = [dict(name=ph.name, model_tflop=ph.model_flops / 1e12, tflop=ph.flops / 1e12,
                       hbm_gb_per_chip=ph.hbm_bytes_per_chip / 1e9, roofline_ms=1e3 * ph.seconds(chip, devices),
                       bound=ph.bound(chip, devices)) for ph in p.phases]
        memory = {} if p.memory is None else {f"{k}_gib": v / GIB for k, v in dataclasses.asdict(p.memory).items()}
        rows.append(dict(name=p.name, calls_per_step=p.calls_per_step, compile_s=p.compile_s,
                         xla_tflop_per_device=p.xla_flops / 1e12, error=p.error, fits=p.fits_chip(chip), **memory,
                         peak_gib=None if p.memory is None else p.memory.peak / GIB, held_gib=p.resident / GIB,
                         peak_with_state_gib=None if p.memory is None else p.peak_with_state / GIB, phases=phases))
    return dict(topology=topology, accelerator_type=tpu.accelerator_type(topology), devices=devices,
                chip=dataclasses.asdict(chip), mesh=[config.mesh.data, config.mesh.fsdp, config.mesh.tensor],
                programs=rows, fits=all(r["fits"] for r in rows), step_roofline_s=seconds,
                step_model_tflop=model_flops / 1e12,
                mfu_bound=tpu.mfu(model_flops, seconds, chip, devices),
                compile_s=sum(p.compile_s for p in programs))


def print_report(r: dict, model_cfg, params: float) -> None:
    chip = r["chip"]
    print(f"\n{r['topology']} ({r['accelerator_type']}, {r['devices']} devices; HBM {chip['hbm_bytes'] / GIB:.1f} GiB, "
          f"{chip['peak_flops'] / 1e12:.0f} TFLOP/s bf16, {chip['hbm_bandwidth'] / 1e9:.0f} GB/s per device); "
          f"mesh data,fsdp,tensor = {','.join(map(str, r['mesh']))}")
    print(f"model: {params / 1e9:.2f}B params, {model_cfg.num_layers} layers, param dtype {model_cfg.param_dtype}, "
          f"compute {model_cfg.dtype}, remat {model_cfg.remat}")
    head = (f"{'program':28s} {'calls':>5s} {'args':>7s} {'out':>7s} {'alias':>7s} {'temp':>7s} {'peak':>7s} "
            f"{'+held':>7s} {'total':>7s} {'fits':>5s} {'compile':>8s} {'XLA TF':>8s}")
    print(head + "   (GiB per device; +held: the run's state beside the program, not among its arguments; compile s "
                 "on this machine; XLA TFLOP per device, loop bodies once)")
    for p in r["programs"]:
        if p["error"]:
            print(f"{p['name']:28s} {p['calls_per_step']:5d}   refused by the TPU compiler after "
                  f"{p['compile_s']:.0f} s: {p['error']}")
        else:
            print(f"{p['name']:28s} {p['calls_per_step']:5d} {p['arguments_gib']:7.2f} {p['outputs_gib']:7.2f} "
                  f"{p['aliased_gib']:7.2f} {p['temporaries_gib']:7.2f} {p['peak_gib']:7.2f} {p['held_gib']:7.2f} "
                  f"{p['peak_with_state_gib']:7.2f} {'yes' if p['fits'] else 'NO':>5s} {p['compile_s']:8.1f} "
                  f"{p['xla_tflop_per_device']:8.3f}")
        for ph in p["phases"]:
            print(f"    {ph['name']:24s} model {ph['model_tflop']:10.4g} TFLOP  executed {ph['tflop']:10.4g} TFLOP  "
                  f"HBM {ph['hbm_gb_per_chip']:9.2f} GB/chip  roofline {ph['roofline_ms']:10.4g} ms ({ph['bound']})")
    print(f"RL step (each program x its calls): {r['step_model_tflop']:.0f} model TFLOP, roofline >= "
          f"{r['step_roofline_s']:.2f} s, MFU <= {100 * r['mfu_bound']:.1f}%; compiled in {r['compile_s']:.0f} s")
    peaks = [p["peak_with_state_gib"] for p in r["programs"] if p["peak_with_state_gib"] is not None]
    print("verdict: " + ("fits" if r["fits"] else "does NOT fit") + f" on {r['accelerator_type']} "
          f"(largest compiled peak with the state held beside it {max(peaks, default=0):.2f} GiB of "
          f"{chip['hbm_bytes'] / GIB:.1f} GiB per device)")


def search(config, part: str, candidates, with_candidate, devices, chip, prompt_len: int):
    """The fastest-by-roofline candidate layout of one part ("learner" or "sampler") whose programs fit:
    `candidates` ranked by the analytic time of that part's programs per step, then compiled in that order until
    one fits with the state held beside it (at most --plan_compiles). -> (config, programs) or None."""
    from rl4llm.train import aot

    ranked, too_big = [], 0
    for candidate in candidates:
        estimate = aot.compile_run(with_candidate(config, candidate), devices, prompt_len, compile=False,
                                   parts=(part,))
        if any(p.lower_bound > chip.hbm_bytes for p in estimate):
            too_big += 1
            continue
        seconds, _ = aot.step_estimate(estimate, chip, len(devices))
        # ties (equal roofline) go to the layout with the smallest fsdp axis: fsdp buys no speed when decoding
        ranked.append((round(seconds, 3), candidate.get("sampler_mesh", (0, 0, 0))[1], candidate))
    ranked.sort(key=lambda x: x[:2])
    print(f"{len(ranked) + too_big} {part} layouts, {too_big} left out (what they need at least, "
          f"`Program.lower_bound`, exceeds the HBM); fastest by roofline first:")
    for seconds, _, candidate in ranked[:10]:
        print(f"  {seconds:9.2f} s  {candidate}")
    for seconds, _, candidate in ranked[:_PLAN_COMPILES.value]:
        trial = with_candidate(config, candidate)
        programs = aot.compile_run(trial, devices, prompt_len, parts=(part,))
        refused = [p.error for p in programs if p.error]
        if refused:
            print(f"compiled {part} {candidate}: does not fit ({refused[0]})", flush=True)
            continue
        peak = max(p.peak_with_state for p in programs)
        ok = all(p.fits_chip(chip) for p in programs)
        print(f"compiled {part} {candidate}: {'fits' if ok else 'does not fit'} (largest peak with the state "
              f"{peak / GIB:.2f} GiB)", flush=True)
        if ok:
            return trial, programs
    return None


def plan(config, devices, chip, prompt_len: int, model_cfg):
    """The fastest-by-roofline layout that fits, searched in two stages (the learner's programs depend only on its
    mesh, remat and micro-batch; the sampler's only on its own layout and the state held beside it): first the
    learner's (`aot_plan.plan_candidates`), then, with it, the sampler's (`aot_plan.sampler_candidates`: the
    learner's mesh itself or a colocated layout). -> (config, programs) or None."""
    from rl4llm.train import aot_plan

    learner = search(config, "learner", aot_plan.plan_candidates(config, len(devices), model_cfg),
                     aot_plan.with_layout, devices, chip, prompt_len)
    if learner is None:
        return None
    config, learner_programs = learner
    sampler = search(config, "sampler", aot_plan.sampler_candidates(config, len(devices), model_cfg),
                     aot_plan.with_sampler_layout, devices, chip, prompt_len)
    if sampler is None:
        return None
    config, sampler_programs = sampler
    return config, learner_programs + sampler_programs


def main(argv):
    del argv
    import jax

    from rl4llm import config as config_lib
    from rl4llm import models
    from rl4llm.parallel import tpu
    from rl4llm.train import aot

    apply_mesh(flags.FLAGS.config, _MESH.value)
    try:
        config = aot.parse_for_slice(flags.FLAGS.config)
    except config_lib.ConfigError as e:
        sys.exit(str(e))
    chip, _ = tpu.parse_topology(_TOPOLOGY.value)
    devices = tpu.topology_devices(_TOPOLOGY.value)
    chip = tpu.per_device(chip, _TOPOLOGY.value, len(devices))
    model_cfg = aot.model_config(config)
    params = sum(math.prod(x.shape) for x in jax.tree.leaves(jax.eval_shape(models.init_params, model_cfg,
                                                                             jax.random.key(0))))
    prompt_len = _PROMPT_LEN.value or config.sampling.prompt_bucket
    if _PLAN.value:
        found = plan(config, devices, chip, prompt_len, model_cfg)
        if found is None:
            sys.exit(f"no layout of the {_PLAN_COMPILES.value} fastest (learner, then sampler) fits {_TOPOLOGY.value}")
        config, programs = found
        m = config.mesh
        sampler = "" if m.sampler == "shared" else (
            f" --config.mesh.sampler=colocated --config.mesh.sampler_data={m.sampler_data} "
            f"--config.mesh.sampler_fsdp={m.sampler_fsdp} --config.mesh.sampler_tensor={m.sampler_tensor}")
        print(f"best layout: --mesh={m.data},{m.fsdp},{m.tensor} --config.model.remat={config.model.remat} "
              f"--config.rl.micro_batch_size={config.rl.micro_batch_size} "
              f"--config.sampling.rows_per_call={config.sampling.rows_per_call}{sampler}")
    else:
        programs = aot.compile_run(config, devices, prompt_len, parts=tuple(_PROGRAMS.value))
    r = report(config, _TOPOLOGY.value, programs, chip, len(devices))
    print_report(r, model_cfg, params)
    if _JSON_OUT.value:
        with open(_JSON_OUT.value, "w", encoding="utf-8") as f:
            json.dump(r, f, indent=2)
    sys.exit(0 if r["fits"] else 1)


if __name__ == "__main__":
    app.run(main)
