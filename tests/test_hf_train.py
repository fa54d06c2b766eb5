"""The main job on a Hugging Face model directory: checkpoint + tokenizer.json + chat template, LoRA, KL to the
base, bf16 compute, merged export. The directory is written here (random nano Qwen2 weights, a BPE tokenizer
trained on the task's text)."""

import json

import jax
import numpy as np
import tokenizers
from tokenizers import decoders, models as tok_models, pre_tokenizers, trainers

from configs import default
from rl4llm import models
from rl4llm.models import hf_checkpoint, lora
from rl4llm.tokenizers import hf_tokenizer
from rl4llm.train import config_validation, trainer

CHATML = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _hf_model_dir(path):
    """A Qwen2-architecture model directory with a ChatML tokenizer (eos <|im_end|>, pad <pad>)."""
    tok = tokenizers.Tokenizer(tok_models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = [f"{a}+{b}={a + b};#{a + b}" for a in range(10) for b in range(10)] + ["user", "assistant"]
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<pad>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "pad_token": "<pad>", "chat_template": CHATML}))
    cfg = models.get_config("nano", vocab_size=tok.get_vocab_size())
    hf_checkpoint.save_hf_checkpoint(cfg, models.init_params(cfg, jax.random.key(3)), str(path))
    return str(path)


def _config(model_dir):
    c = default.get_config()
    c.model.hf_checkpoint = model_dir
    c.model.export_hf = True
    c.model.dtype = "bfloat16"  # bf16 compute over float32 master weights
    c.model.lora.rank = 4
    c.model.lora.targets = ("q_proj", "v_proj", "down_proj")
    c.task.min_operands = c.task.max_operands = 2
    c.task.operators = "+"
    c.sampling.max_new_tokens = 8
    c.sampling.prompt_bucket = 8
    c.sft.steps = 3
    c.sft.batch_size = 8
    c.rl.steps = 2
    c.rl.num_prompts = 2
    c.rl.num_generations = 4
    c.rl.kl_coef = 0.05
    c.eval.num_examples = 4
    c.eval.every = 2
    c.eval.pass_n = 2
    c.eval.pass_k = (1, 2)
    c.log_every = 1
    return c


def test_lora_run_on_a_hf_checkpoint_exports_a_merged_model(tmp_path):
    model_dir = _hf_model_dir(tmp_path / "model")
    workdir = tmp_path / "run"
    summary = trainer.run(_config(model_dir), str(workdir))
    assert summary["rl_steps"] == 2
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in records if r.get("stage") == "rl" and "kl" in r]
    assert rl and all(np.isfinite(r["kl"]) for r in rl)

    export = workdir / "hf_export"
    assert (export / "tokenizer.json").exists() and (export / "tokenizer_config.json").exists()
    assert hf_tokenizer.HFTokenizer.load(str(export)).stop_token_ids == (2,)  # <|im_end|>
    _, source = hf_checkpoint.load_hf_checkpoint(model_dir)
    cfg, exported = hf_checkpoint.load_hf_checkpoint(str(export))
    assert cfg.lora_rank == 0 and cfg.param_dtype == "float32"
    # The frozen base is untouched; adapted kernels differ by the merged low-rank update.
    np.testing.assert_array_equal(exported["embed"], source["embed"])
    for i in range(cfg.num_layers):
        layer, src = exported["layers"][i], source["layers"][i]
        np.testing.assert_array_equal(layer["attn"]["k_proj"]["kernel"], src["attn"]["k_proj"]["kernel"])
        np.testing.assert_array_equal(layer["mlp"]["up_proj"]["kernel"], src["mlp"]["up_proj"]["kernel"])
        delta = np.asarray(layer["attn"]["q_proj"]["kernel"] - src["attn"]["q_proj"]["kernel"]).reshape(32, -1)
        assert np.abs(delta).max() > 0 and np.linalg.matrix_rank(delta, tol=1e-6) <= 4


def test_model_fields_are_validated(tmp_path):
    c = _config(str(tmp_path / "missing"))
    c.model.dtype = "float16"
    c.model.lora.targets = ("qkv_proj",)
    c.rl.ref_reset_every = 5
    try:
        config_validation.validate(c)
    except config_validation.ConfigError as e:
        message = str(e)
    else:
        raise AssertionError("validation passed")
    assert "config.model.dtype='float16'" in message
    assert "config.model.lora.targets=('qkv_proj',)" in message
    assert "config.rl.ref_reset_every=5: with LoRA" in message
    assert "config.model.hf_checkpoint=" in message and "no config.json" in message
