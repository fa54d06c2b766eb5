"""GRPO on GSM8K, full fine-tuning of Qwen2.5-7B-Instruct at verl's batch sizes, planned for a v5p-64 slice."""

from configs.scale import qwen2_5_1_5b_grpo_gsm8k


def get_config():
    """The recipe of configs/scale/qwen2_5_1_5b_grpo_gsm8k.py (verl's GSM8K GRPO example: 1024 prompts x 5, prompts
    padded to 512 tokens, responses up to 1024, 4 updates of 1280 sequences, lr 1e-6, k3 KL 0.001) with
    Qwen2.5-7B-Instruct, FSDP over the 32 chips of a v5p-64 (v5p:2x4x4).

    Compile every program for the slice and print its memory (no TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_7b_grpo_gsm8k.py --topology=v5p:2x4x4
    Run on the slice:
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/qwen2_5_7b_grpo_gsm8k.py --workdir=/mnt/shared/q7 \\
            --config.distributed.initialize=True"

    Measured with that command (commit 9f9fe6f, per chip, of v5p's 95 GiB): learner step peak 10.80 GiB (arguments
    3.55: params, Adam moments and the KL reference over 32 chips; temporaries 7.14), behaviour pass 2.27 GiB,
    sampler (all 5,120 rows) 32.21 GiB (30.82 temporaries, mostly the KV cache). Roofline: >= 62.9 s per RL step,
    MFU <= 72% (decode, memory-bound: 15.7 s). Compiled in 787 s on a loaded 2-core CPU (7.6 GB peak RSS).
    """
    c = qwen2_5_1_5b_grpo_gsm8k.get_config()
    c.model.preset = "qwen2.5-7b"
    c.model.hf_checkpoint = "/data/models/Qwen2.5-7B-Instruct"
    return c
