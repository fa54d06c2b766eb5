"""GRPO on GSM8K, full fine-tuning of Llama-3.1-8B-Instruct at verl's batch sizes, planned for a v5e-64 slice with
chunked rollouts (its sampler does not fit yet: see the docstring)."""

from configs.scale import qwen2_5_1_5b_grpo_gsm8k


def get_config():
    """The recipe of configs/scale/qwen2_5_1_5b_grpo_gsm8k.py (verl's GSM8K GRPO example: 1024 prompts x 5, prompts
    padded to 512 tokens, responses up to 1024, 4 updates of 1280 sequences, lr 1e-6, k3 KL 0.001) with
    Llama-3.1-8B-Instruct, FSDP over the 64 chips of a v5e-64 (v5e:8x8). The 5,120 rows' KV cache (128 KiB per token
    per row: 32 layers x 8 KV heads x 128 x 2 x bf16) is 15 GiB per chip, too much next to the weights on a 16 GiB
    v5e; `sampling.rows_per_call=1280` generates the step in 4 calls of 256 prompts' groups (20 rows per chip).

    Compile every program for the slice and print its memory (no TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/llama3_1_8b_grpo_gsm8k.py --topology=v5e:8x8
    Run on the slice:
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/llama3_1_8b_grpo_gsm8k.py --workdir=/mnt/shared/l8 \\
            --config.distributed.initialize=True"

    Measured with that command (commit 31d16ae, per chip, of v5e's 16 GiB): the learner step fits, peak 6.33 GiB
    (arguments 1.87: params, Adam moments and the KL reference over 64 chips; temporaries 4.33), behaviour pass
    1.17 GiB; the sampler does NOT fit yet: 18.88 GiB per call of 1,280 rows (18.35 temporaries, of which the KV
    cache is 3.75). The rest, ~14.6 GiB, is about a bfloat16 copy of all 8B weights (14.96 GiB): it looks as if XLA
    gathers the FSDP-sharded weights once, outside the decode loop, so fewer rows per call would not be enough
    (not verified). Not tried yet: a colocated tensor-parallel sampler (--config.mesh.sampler=colocated
    --config.mesh.sampler_data=8 --config.mesh.sampler_tensor=8), or the v5p-64 of
    configs/scale/qwen2_5_7b_grpo_gsm8k.py (the 7B's whole-step sampler: 32.21 GiB of 95). Roofline if it fit:
    >= 229 s per RL step, MFU <= 24.6% (4 sampler calls x 42.5 s of decoding, memory-bound). Compiled in 642 s
    (learner 369, behaviour 66, sampler 207) on a loaded 2-core CPU, 4.3 GB peak RSS.
    """
    c = qwen2_5_1_5b_grpo_gsm8k.get_config()
    c.model.preset = "llama3.1-8b"
    c.model.hf_checkpoint = "/data/models/Llama-3.1-8B-Instruct"
    c.sampling.rows_per_call = 1280
    c.mesh.sampler = "colocated"  # tensor-parallel sampler on the same 64 chips, its own bfloat16 copy
    c.mesh.sampler_data, c.mesh.sampler_fsdp, c.mesh.sampler_tensor = 8, 1, 8
    return c
