"""GRPO on GSM8K, full fine-tuning of Llama-3.1-70B-Instruct at verl's batch sizes on a v5p-128 slice, with chunked
rollouts from a colocated tensor-parallel sampler."""

from configs.scale import qwen2_5_1_5b_grpo_gsm8k


def get_config():
    """The recipe of configs/scale/qwen2_5_1_5b_grpo_gsm8k.py (verl's GSM8K GRPO example: 1024 prompts x 5, prompts
    padded to 512 tokens, responses up to 1024, 4 updates of 1280 sequences, lr 1e-6, k3 KL 0.001) with
    Llama-3.1-70B-Instruct, FSDP over the 64 chips of a v5p-128 (v5p:4x4x4) for the learner, remat full.

    Sampler: colocated on the same 64 chips as 16 data x 4 tensor (`mesh.sampler=colocated`; a tensor axis of 8 is
    not a product of the 4x4x4 torus' axes), holding its own copy of the weights with the matrices in bfloat16
    (`parallel.layout.sampler_weights`, 32.9 GiB per chip), made after each update; `sampling.rows_per_call=1280`
    generates the step in 4 calls (80 rows per data shard, 2 of the 8 KV heads per chip).

    Compile every program for the slice and print its memory (no TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/llama3_1_70b_grpo_gsm8k.py --topology=v5p:4x4x4
    Run on the slice:
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/llama3_1_70b_grpo_gsm8k.py --workdir=/mnt/shared/l70 \\
            --config.distributed.initialize=True"

    Measured with that command (commit a109fbb, per chip, of v5p's 95 GiB; "with the state": plus the run's state
    held in HBM beside the program and not among its arguments): fits. Learner step peak 45.21 GiB (arguments 16.43:
    float32 params, Adam moments and the float32 KL reference over 64 chips; temporaries 28.45); behaviour pass 9.68
    GiB, 22.00 with the state; sampler per call of 1,280 rows 47.48 GiB (arguments 32.86: the bfloat16 copy;
    temporaries 14.58, most of it the KV cache), 63.91 GiB with the state; the cast for the sampler 6.17 GiB, 51.35
    with the state and the copy being written. Roofline: >= 303.7 s per RL step, MFU <= 74.2% (4 updates x 46.9 s,
    behaviour 37.6 s, 4 sampler calls x 19.6 s, decode memory-bound). Compiled in 467 s (learner 299, behaviour 72,
    sampler 89, cast 7) on a 2-core CPU shared with two training runs, 7.2 GB peak RSS. (On the learner's FSDP mesh,
    commit f8217d0, the 80-layer sampler compile passed 14 GB of RSS here and was stopped; its 10- and 20-layer
    compiles extrapolated to ~32.8 GiB per call of 2,560 rows and a 458 s step.)
    Slices that cannot hold it: the state is 16 bytes per parameter (float32 params, both Adam moments, the float32
    KL reference: 1.13 TB), 16.4 GiB per chip on a v5e-64, more than its 16 GiB under any FSDP / TP split and before
    any activation; a v5e-256 holds 4.1 GiB of it per chip (not compiled).
    """
    c = qwen2_5_1_5b_grpo_gsm8k.get_config()
    c.model.preset = "llama3.1-70b"
    c.model.hf_checkpoint = "/data/models/Llama-3.1-70B-Instruct"
    c.sampling.rows_per_call = 1280
    c.mesh.sampler = "colocated"  # tensor-parallel sampler on the same 64 chips, its own bfloat16 copy
    c.mesh.sampler_data, c.mesh.sampler_fsdp, c.mesh.sampler_tensor = 16, 1, 4
    return c
