"""DAPO on DAPO-Math-17k, full fine-tuning of Qwen2.5-32B at the paper's batch (512 prompts x 16, responses up to
20k tokens) with chunked rollouts, planned for a v5p-128 slice."""

from configs import dapo
from configs import qwen2_5_0_5b_gsm8k


def get_config():
    """DAPO (Yu et al. 2025) as verl's recipe/dapo/run_dapo_qwen2.5_32b.sh runs it: Qwen2.5-32B base, 512 prompts x
    16 completions per step, prompts up to 2,048 tokens, responses up to 20,480, 16 minibatch updates of 32 prompts
    (512 sequences), lr 1e-6 with 10 warm-up updates, AdamW weight decay 0.1, grad clip 1.0; clip-higher 0.2 / 0.28
    with dual-clip 10, token-mean loss, no KL, no entropy bonus; dynamic sampling (groups all right or all wrong
    dropped and refilled, verl's filter_groups.metric=acc; at most 10 generation rounds); soft overlong punishment
    with L_cache = 4,096 (`task.length_shaping="dapo_overlong"`). Rewards here are the lenient math verifier's 0/1
    (DAPO's are ±1: group normalisation removes the difference except against the overlong term).

    Chunked rollouts: one step's 8,192 rows at 22.5k tokens would need a KV cache of 5.9 GB per row (64 layers x 8
    KV heads x 128 x 2 x bf16), 48 TB in all; `sampling.rows_per_call=512` generates them 32 prompts' groups at a
    time (16 calls of one compiled program, 8 rows per chip), each row from its own key stream, so the rows are
    those one call would give.

    Data: DAPO-Math-17k as JSON lines with a `prompt` (the problem text with DAPO's instruction) and a plain `answer`
    at /data/dapo-math-17k/train.jsonl, AIME 2024 the same way at /data/aime-2024/test.jsonl; the checkpoint at
    /data/models/Qwen2.5-32B (see configs/qwen2_5_0_5b_gsm8k.py for the directory's files).

    Slice: v5p-128 (v5p:4x4x4, 64 chips), FSDP over all 64. Compile every program for it and print its memory (no
    TPU needed; `pip install -e ".[tpu]"`):
        python -m experiments.compile_for_tpu --config=configs/scale/qwen2_5_32b_dapo_math.py --topology=v5p:4x4x4 \\
            --prompt_len=2048
    Run on the slice:
        gcloud compute tpus tpu-vm ssh $TPU --zone=$ZONE --worker=all --command="cd rl4llm && . .venv/bin/activate && \\
            python -m experiments.train --config=configs/scale/qwen2_5_32b_dapo_math.py --workdir=/mnt/shared/q32 \\
            --config.distributed.initialize=True"

    Sampler: colocated on the same 64 chips as 16 data x 4 tensor (`mesh.sampler=colocated`), holding its own copy of
    the weights with the matrices in bfloat16 (`parallel.layout.sampler_weights`, 15.3 GiB per chip), made after
    each update.

    Measured with that command, per chip, of v5p's 95 GiB ("with the state": plus the run's state held in HBM beside
    the program). Learner (commit 73b8e57): learner step peak 47.85 GiB (arguments 5.73: params and Adam moments
    over 64 chips, no KL reference; temporaries 41.89 for one 22.5k-token row per chip, remat full), behaviour pass
    (old log-probs of all 8,192 rows) 10.43 GiB; compiled in 465 s (learner 378, behaviour 87), 12.8 GB peak RSS.
    Sampler (commit fc3a77c, `--programs=sampler`): per call of 512 rows 66.62 GiB (arguments 15.26: the bfloat16
    copy; temporaries 51.24, mostly the KV cache), 72.34 with the state; the cast for the sampler 2.87 GiB, 21.95
    with the state and the copy being written; compiled in 72 s, 2.4 GB peak RSS. Roofline: >= 10,018 s (2.8 h)
    per RL step, MFU <= 24.6%: 16 updates x 123 s (compute-bound), the behaviour pass 494 s, 16 sampler calls x 471
    s of decoding (every row to 20,480 tokens, memory-bound: a quarter of the bfloat16 weights, 16.4 GB, and the KV
    cache read per token per chip). On the learner's FSDP mesh (commit 73b8e57) the sampler needed 53.67 GiB per call
    but read the FSDP-gathered float32 weights (131 GB per token per chip): 16 calls x 1,298 s, a 23,256 s step,
    MFU <= 10.6%.
    """
    c = dapo.with_dapo_algorithm(qwen2_5_0_5b_gsm8k.get_config(), max_gen_rounds=10, overlong_buffer=4096)
    c.task.local.train_path = "/data/dapo-math-17k/train.jsonl"
    c.task.local.test_path = "/data/aime-2024/test.jsonl"
    c.task.local.prompt_template = "{prompt}"
    c.task.local.answer_format = "plain"

    c.model.preset = "qwen2.5-32b"  # the checkpoint's shapes, for compile_for_tpu without the checkpoint
    c.model.hf_checkpoint = "/data/models/Qwen2.5-32B"
    c.model.lora.rank = 0  # full fine-tuning
    c.model.dtype = "bfloat16"
    c.model.param_dtype = "float32"
    c.model.remat = "full"

    c.sampling.temperature = 1.0
    c.sampling.max_new_tokens = 20480
    c.sampling.prompt_bucket = 2048  # every prompt pads to 2,048 tokens (one shape), verl's max_prompt_length
    c.sampling.rows_per_call = 512

    c.rl.num_prompts = 512
    c.rl.num_generations = 16
    c.rl.num_minibatches = 16
    c.rl.micro_batch_size = 64  # one 22.5k-token row per chip per accumulation step
    c.rl.learning_rate = 1e-6
    c.rl.warmup_steps = 10
    c.rl.weight_decay = 0.1
    c.rl.grad_clip = 1.0
    c.rl.logprob_chunk_size = 128
    c.rl.logprob_vocab_chunk_size = 32768

    c.eval.num_examples = 30  # AIME 2024
    c.mesh.data = 1
    c.mesh.fsdp = -1
    c.mesh.tensor = 1
    c.mesh.sampler = "colocated"  # tensor-parallel sampler on the same 64 chips, its own bfloat16 copy
    c.mesh.sampler_data, c.mesh.sampler_fsdp, c.mesh.sampler_tensor = 16, 1, 4
    return c
