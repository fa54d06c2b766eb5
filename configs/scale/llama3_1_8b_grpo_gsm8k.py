"""GRPO on GSM8K, full fine-tuning of Llama-3.1-8B-Instruct at verl's batch sizes on a v5e-64 slice, with chunked
rollouts from a colocated tensor-parallel sampler."""

from configs.scale import qwen2_5_1_5b_grpo_gsm8k


def get_config():
    """The recipe of configs/scale/qwen2_5_1_5b_grpo_gsm8k.py (verl's GSM8K GRPO example: 1024 prompts x 5, prompts
    padded to 512 tokens, responses up to 1024, 4 updates of 1280 sequences, lr 1e-6, k3 KL 0.001) with
    Llama-3.1-8B-Instruct, FSDP over the 64 chips of a v5e-64 (v5e:8x8) for the learner.

    Sampler: colocated on the same 64 chips as 8 data x 8 tensor (`mesh.sampler=colocated`), holding its own copy of
    the weights with the matrices in bfloat16 (`parallel.layout.sampler_weights`, 2 GB per chip), made after each
    update. The 5,120 rows' KV cache (128 KiB per token per row: 32 layers x 8 KV heads x 128 x 2 x bf16) is 15 GiB
    per chip, too much for a 16 GiB v5e, so `sampling.rows_per_call=1280` generates the step in 4 calls of 256
    prompts' groups (160 rows per data shard, one KV head per chip). On the learner's own FSDP mesh the sampler did
    not fit (18.88 GiB per call at commit 31d16ae): decoding an FSDP-sharded model gathered a bfloat16 copy of all
    8B weights on every chip (14.96 GiB).

    Compile every program for the slice and print its memory (no TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/llama3_1_8b_grpo_gsm8k.py --topology=v5e:8x8
    Run on the slice:
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/llama3_1_8b_grpo_gsm8k.py --workdir=/mnt/shared/l8 \\
            --config.distributed.initialize=True"

    Measured with that command (commit 3f02e45, per chip, of v5e's 16 GiB; "with the state": plus the run's state
    held in HBM beside the program and not among its arguments): fits. Learner step peak 6.33 GiB (arguments 1.87:
    params, Adam moments and the KL reference over 64 chips; temporaries 4.33); behaviour pass 1.17 GiB, 2.57 with
    the state; sampler per call of 1,280 rows 9.04 GiB (arguments 1.87: the bfloat16 copy; temporaries 6.90), 10.91
    GiB with the state; the cast for the sampler 0.71 GiB, 3.98 with the state and the copy being written. Roofline:
    >= 88.4 s per RL step, MFU <= 63.8% (4 updates x 11.6 s, behaviour 9.4 s, 4 sampler calls x 8.1 s, decode
    memory-bound). Compiled in 600 s (learner 379, behaviour 76, sampler 141, cast 3) on a 2-core CPU shared with
    two training runs, 5.3 GB peak RSS.
    """
    c = qwen2_5_1_5b_grpo_gsm8k.get_config()
    c.model.preset = "llama3.1-8b"
    c.model.hf_checkpoint = "/data/models/Llama-3.1-8B-Instruct"
    c.sampling.rows_per_call = 1280
    c.mesh.sampler = "colocated"  # tensor-parallel sampler on the same 64 chips, its own bfloat16 copy
    c.mesh.sampler_data, c.mesh.sampler_fsdp, c.mesh.sampler_tensor = 8, 1, 8
    return c
