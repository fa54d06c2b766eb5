"""The GSM8K recipes on Hugging Face model directories: checkpoint + tokenizer.json + chat template, LoRA, KL to
the base, bf16 compute, merged export. The directories are written here (random nano weights, a BPE tokenizer)."""

import importlib
import json

import jax
import numpy as np
import tokenizers
from tokenizers import decoders, models as tok_models, pre_tokenizers, trainers

from rl4llm import models
from rl4llm.models import hf_checkpoint
from rl4llm.tokenizers import hf_tokenizer
from rl4llm import config as config_lib
from rl4llm.train import job
from rl4llm.train import setup as setup_lib

# Recipes that start from a Hugging Face checkpoint (tested here, not by tests/test_recipes.py).
HF_RECIPES = ("qwen2_5_0_5b_gsm8k", "llama3_2_1b_gsm8k")
CHATML = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _hf_model_dir(path, **model_overrides):
    """A model directory (Qwen2 architecture unless overridden) with a ChatML tokenizer (eos <|im_end|>, pad <pad>)."""
    tok = tokenizers.Tokenizer(tok_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [f"Tom has {a} apples and buys {b} more. How many apples does he have? {a} + {b} = {a + b}\n#### {a + b}"
              for a in range(10) for b in range(10)]
    corpus += ["user assistant Let's think step by step and output the final answer after \"####\"."] * 10
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<pad>", "chat_template": CHATML}))
    cfg = models.get_config("nano", vocab_size=tok.get_vocab_size(), **model_overrides)
    hf_checkpoint.save_hf_checkpoint(cfg, models.init_params(cfg, jax.random.key(3)), str(path))
    return str(path)


def _gsm8k_files(path):
    """Tiny GSM8K-format train / test JSON-lines files."""
    rows = [{"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
             "answer": f"{a} + {b} = {a + b}\n#### {a + b}"} for a in range(1, 7) for b in range(1, 4)]
    for name, part in (("train", rows[:12]), ("test", rows[12:])):
        (path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    return str(path / "train.jsonl"), str(path / "test.jsonl")


def _recipe(name, tmp_path, **model_overrides):
    """Recipe `name` pointed at a tiny random checkpoint directory and GSM8K-format files."""
    c = importlib.import_module(f"configs.{name}").get_config()
    c.model.hf_checkpoint = _hf_model_dir(tmp_path / "model", **model_overrides)
    c.task.local.train_path, c.task.local.test_path = _gsm8k_files(tmp_path)
    return c


def test_qwen_gsm8k_recipe_runs_lora_on_a_hf_checkpoint_and_exports_a_merged_model(tmp_path):
    """configs/qwen2_5_0_5b_gsm8k.py on a tiny Qwen2 directory: chat-template prompts, math reward, LoRA SFT and
    GRPO with KL to the base (adapters off), bf16 compute; the merged export keeps the frozen weights bitwise and
    changes the adapted kernels by a rank <= r update. (Shrunk: one minibatch, greedy eval only, and one LoRA SFT
    step, so the adapters move even when a random model's rewards are all 0.)"""
    c = _recipe("qwen2_5_0_5b_gsm8k", tmp_path)
    c.task.reward_workers = 0
    c.task.local.solution_field = "answer"
    c.sft.steps = 1
    c.sft.batch_size = 2
    c.sft.warmup_steps = 0  # (a warm-up's first step has learning rate 0)
    c.model.lora.rank = 4
    c.model.lora.targets = ("q_proj", "v_proj", "down_proj")
    c.sampling.max_new_tokens = 12
    c.rl.steps = 1
    c.rl.num_prompts = 2
    c.rl.num_generations = 2
    c.rl.num_minibatches = 1
    c.rl.micro_batch_size = 2
    c.eval.num_examples = 2
    c.eval.pass_n = 1
    c.eval.pass_k = (1,)
    workdir = tmp_path / "run"
    summary = job.run(c, str(workdir))
    assert summary["rl_steps"] == 1
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in records if r.get("stage") == "rl" and np.isfinite(r.get("kl", np.nan))]

    export = workdir / "hf_export"
    assert (export / "tokenizer.json").exists() and (export / "tokenizer_config.json").exists()
    assert hf_tokenizer.HFTokenizer.load(str(export)).stop_token_ids == (2,)  # <|im_end|>
    _, source = hf_checkpoint.load_hf_checkpoint(c.model.hf_checkpoint)
    cfg, exported = hf_checkpoint.load_hf_checkpoint(str(export))
    assert cfg.lora_rank == 0 and cfg.param_dtype == "float32"
    np.testing.assert_array_equal(exported["embed"], source["embed"])
    for i in range(cfg.num_layers):
        layer, src = exported["layers"][i], source["layers"][i]
        np.testing.assert_array_equal(layer["attn"]["k_proj"]["kernel"], src["attn"]["k_proj"]["kernel"])
        np.testing.assert_array_equal(layer["mlp"]["up_proj"]["kernel"], src["mlp"]["up_proj"]["kernel"])
        delta = np.asarray(layer["attn"]["q_proj"]["kernel"] - src["attn"]["q_proj"]["kernel"]).reshape(32, -1)
        assert np.abs(delta).max() > 0 and np.linalg.matrix_rank(delta, tol=1e-6) <= 4


def test_llama_gsm8k_recipe_validates_on_a_llama_checkpoint(tmp_path):
    c = _recipe("llama3_2_1b_gsm8k", tmp_path, qkv_bias=False,
                rope_scaling=models.get_config("llama3.2-1b").rope_scaling)
    assert hf_checkpoint.read_hf_config(c.model.hf_checkpoint)["architectures"] == ["LlamaForCausalLM"]
    cfg = setup_lib.model_config(config_lib.parse(c), vocab_size=0)
    assert cfg.rope_scaling == models.get_config("llama3.2-1b").rope_scaling and cfg.lora_rank == 32


def test_model_fields_are_validated(tmp_path):
    c = importlib.import_module("configs.qwen2_5_0_5b_gsm8k").get_config()
    c.model.hf_checkpoint = str(tmp_path / "missing")
    c.model.dtype = "float16"
    c.model.lora.targets = ("qkv_proj",)
    c.rl.ref_reset_every = 5
    try:
        config_lib.parse(c)
    except config_lib.ConfigError as e:
        message = str(e)
    else:
        raise AssertionError("validation passed")
    assert "config.model.dtype='float16'" in message
    assert "config.model.lora.targets=('qkv_proj',)" in message
    assert "config.rl.ref_reset_every=5: with LoRA" in message
    assert "config.model.hf_checkpoint=" in message and "no config.json" in message

