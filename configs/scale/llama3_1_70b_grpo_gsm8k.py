"""GRPO on GSM8K, full fine-tuning of Llama-3.1-70B-Instruct at verl's batch sizes, planned for a v5p-128 slice."""

from configs.scale import qwen2_5_1_5b_grpo_gsm8k


def get_config():
    """The recipe of configs/scale/qwen2_5_1_5b_grpo_gsm8k.py (verl's GSM8K GRPO example: 1024 prompts x 5, prompts
    padded to 512 tokens, responses up to 1024, 4 updates of 1280 sequences, lr 1e-6, k3 KL 0.001) with
    Llama-3.1-70B-Instruct, FSDP over the 64 chips of a v5p-128 (v5p:4x4x4), the rollout in 2 calls of 2,560 rows
    (`sampling.rows_per_call`: 40 rows' KV cache per chip, 0.47 GiB each).

    Compile every program for the slice and print its memory (no TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/llama3_1_70b_grpo_gsm8k.py --topology=v5p:4x4x4
    Run on the slice:
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/llama3_1_70b_grpo_gsm8k.py --workdir=/mnt/shared/l70 \\
            --config.distributed.initialize=True"

    Measured (commit f8217d0, per chip, of v5p's 95 GiB; the learner programs as that command compiles them, the
    sampler with fewer layers: its 80-layer compile passed 14 GB of RSS on this machine and was stopped): learner step
    peak 45.21 GiB (arguments 16.43: params, Adam moments and the float32 KL reference over 64 chips; temporaries
    28.45), behaviour pass 9.68 GiB; sampler per call of 2,560 rows compiled with 10 layers 9.85 GiB peak (8.90
    temporaries) and with 20 layers 13.12 GiB (11.39), so about 32.8 GiB at 80 layers (26.3 temporaries, 1.9 GiB
    of them KV cache per 10 layers), extrapolated linearly. Roofline: >= 458 s per RL step, MFU <= 49.2% (4
    updates x 46.9 s, behaviour 37.6 s, 2 sampler calls x 116 s, decode memory-bound). Compiled in 201 s (learner)
    + 58 s (behaviour) + 125 / 147 s (sampler, 10 / 20 layers) on a loaded 2-core CPU, 8.1 GB peak RSS.
    Slices that cannot hold it: the state is 16 bytes per parameter (float32 params, both Adam moments, the
    float32 KL reference: 1.13 TB), 16.4 GiB per chip on a v5e-64, more than its 16 GiB under any FSDP / TP split
    and before any activation; a v5e-256 holds 4.1 GiB of it per chip (not compiled). On v5p-128 full remat and
    FSDP over all 64 chips (no tensor parallelism) are what was compiled; other layouts were not.
    """
    c = qwen2_5_1_5b_grpo_gsm8k.get_config()
    c.model.preset = "llama3.1-70b"
    c.model.hf_checkpoint = "/data/models/Llama-3.1-70B-Instruct"
    c.sampling.rows_per_call = 2560
    return c
