"""GRPO with LoRA on GSM8K from Llama-3.2-1B-Instruct (a Hugging Face checkpoint on local disk)."""

from configs import qwen2_5_0_5b_gsm8k


def get_config():
    """GRPO + LoRA (rank 32 on every projection) on GSM8K, starting from Llama-3.2-1B-Instruct; no SFT stage.

    The same recipe as configs/qwen2_5_0_5b_gsm8k.py (same data files, prompt, reward, LoRA and GRPO settings; read
    its docstring for where to put the data and how to launch on a TPU pod slice); only the checkpoint differs.
    Put the checkpoint directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
    generation_config.json; e.g. `huggingface-cli download meta-llama/Llama-3.2-1B-Instruct --local-dir
    /data/models/Llama-3.2-1B-Instruct` on a connected machine, after accepting Meta's licence) at
    /data/models/Llama-3.2-1B-Instruct. Llama 3.2 ties its embeddings, scales RoPE ("llama3" rope_type, imported as
    ModelConfig.rope_scaling), has no pad token (the eos id pads) and stops at <|eot_id|> or <|end_of_text|>
    (generation_config.json's eos_token_id).

    One accelerator host:
        python -m experiments.train --config=configs/llama3_2_1b_gsm8k.py --workdir=/tmp/rl4llm/llama1b_gsm8k \
            --config.model.hf_checkpoint=/data/models/Llama-3.2-1B-Instruct \
            --config.task.local.train_path=/data/gsm8k/train.jsonl --config.task.local.test_path=/data/gsm8k/test.jsonl

    What the anchors report: none of the RL anchors in ../shared/papers/ trains Llama-3.2-1B on GSM8K; Meta's model
    card gives 44.4 for Llama-3.2-1B-Instruct (8-shot chain of thought, a different protocol from this 0-shot
    chat prompt). Compare with the checkpoint's own 0-shot accuracy, which the job measures before RL.

    Result: not measured here (no accelerator and no network on the development machines);
    tests/test_hf_train.py validates this recipe against a tiny random Llama directory it writes.
    """
    c = qwen2_5_0_5b_gsm8k.get_config()
    c.model.hf_checkpoint = "/data/models/Llama-3.2-1B-Instruct"
    return c
