"""GRPO on GSM8K, full fine-tuning of Qwen2.5-1.5B-Instruct at verl's batch sizes, planned for a TPU slice."""

from configs import qwen2_5_0_5b_gsm8k


def get_config():
    """GRPO on GSM8K from Qwen2.5-1.5B-Instruct, full fine-tuning, with the batch of verl's GSM8K GRPO example
    (examples/grpo_trainer/run_qwen2-7b.sh): 1024 prompts x 5 completions per step, prompts padded to 512 tokens,
    responses up to 1024, 4 minibatch updates of 256 prompts (1280 sequences), lr 1e-6, KL loss 0.001 (k3 =
    low_var_kl) to the frozen initial policy, no entropy bonus.

    Slice: v5e-64 (v5e:8x8), FSDP over the 64 chips. Compile every program for it and print its memory (no TPU
    needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_1_5b_grpo_gsm8k.py --topology=v5e:8x8
    Run on the slice (checkpoint and data on every host, see configs/qwen2_5_0_5b_gsm8k.py):
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/qwen2_5_1_5b_grpo_gsm8k.py --workdir=/mnt/shared/q15 \\
            --config.distributed.initialize=True"

    Measured with that command (commit 9f9fe6f, per chip, of v5e's 16 GiB): learner step peak 1.66 GiB (arguments
    0.36, temporaries 1.23), behaviour pass 0.25 GiB, sampler (prefill + decode of all 5,120 rows) 6.31 GiB (5.93
    temporaries, mostly the [rows, kv heads, 1536, 128] bf16 KV cache). Roofline: >= 23.9 s per RL step, MFU <= 48%
    (decode is memory-bound: 12.1 s). Compiled in 251 s on a loaded 2-core CPU.
    On a v5e-16 (v5e:4x4) the learner step fits (5.44 GiB) but the sampler on its mesh does not: the TPU compiler
    asks for 23.18 GiB of temporaries for 320 rows per chip. The planner finds a layout that fits (commit 159a276,
    4 min on this CPU):
        python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_1_5b_grpo_gsm8k.py --topology=v5e:4x4 --plan
    -> --mesh=1,16,1 --config.model.remat=dots --config.rl.micro_batch_size=16 --config.sampling.rows_per_call=2560
    --config.mesh.sampler=colocated --config.mesh.sampler_data=4 --config.mesh.sampler_fsdp=2
    --config.mesh.sampler_tensor=2: learner step 5.65 GiB, sampler per call 13.62 GiB (15.06 with the state held
    beside it), roofline >= 62.2 s per step, MFU <= 73.7%.
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
    c.sampling.prompt_bucket = 512  # every GSM8K prompt pads to 512 tokens (one shape), as verl's max_prompt_length

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
