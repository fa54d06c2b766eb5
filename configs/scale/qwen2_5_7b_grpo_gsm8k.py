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

    Measured: see the README, "Scaling out".
    """
    c = qwen2_5_1_5b_grpo_gsm8k.get_config()
    c.model.preset = "qwen2.5-7b"
    c.model.hf_checkpoint = "/data/models/Qwen2.5-7B-Instruct"
    return c
