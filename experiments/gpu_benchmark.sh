#!/usr/bin/env bash
# The benchmark workloads on one GPU at 0.5B scale in bfloat16 (issue 19's accelerator rows), one JSON line each into
# $OUT/gpu.jsonl (default ./gpu_results), then the README's table columns.
#
#   bash experiments/gpu_benchmark.sh            # on a machine with a CUDA jax
#
# Rows: grpo_step and sample_only (WORKLOADS.md's shapes) with Qwen2.5-0.5B's shapes in bf16, the learner memory probe
# (64 rows x 1056 tokens, executed and timed) with remat none, and tiny's float32 grpo_step as the CPU workload's GPU
# point. Each row runs in its own process (peak memory per row) under a time limit; the limits add up to 520 s, one
# device call of a 15-minute lease.
set -uo pipefail
out="${OUT:-./gpu_results}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())" \
  | tee -a "$out/gpu.txt"
row() {  # row LIMIT_S ARGS...: one benchmark process; its JSON line appended to gpu.jsonl, its log kept
  local limit="$1"; shift
  local name; name="$(echo "$*" | tr -c 'a-zA-Z0-9.\n' '_' | cut -c1-80)"
  echo "== $*"
  timeout "$limit" python3 -m experiments.benchmark "$@" >"$out/$name.log" 2>&1
  echo "rc $?"
  grep '^{' "$out/$name.log" | tee -a "$out/gpu.jsonl" || tail -5 "$out/$name.log"
}
row 80 --workload grpo_step --model tiny --steps 5
row 200 --workload grpo_step --model qwen2.5-0.5b --dtype bfloat16 --steps 5
row 120 --workload sample_only --model qwen2.5-0.5b --dtype bfloat16 --steps 3
row 120 --memory_probe --model qwen2.5-0.5b --dtype bfloat16 --remat none
python3 - "$out/gpu.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    keys = ("step_s", "gen_s", "gen_tok_s", "gen_hbm_gb_s", "gen_hbm_frac", "learn_s", "learn_tok_s", "learn_tflop_s",
            "mfu", "compile_s", "remat", "temp_mb")
    print(r["workload"], r["model"], r.get("dtype", r.get("remat")), {k: r[k] for k in keys if r.get(k) is not None})
PY
