"""HF checkpoint import/export against transformers (CPU torch): logits, greedy generations, round trips."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.numpy import save_file

from rl4llm import models, sampling
from rl4llm.models import hf_checkpoint
from tests import subprocess_env

SHAPE = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=64)
HF_CONFIGS = {
    # Qwen2.5 style: q/k/v bias, tied embeddings.
    "qwen2": transformers.Qwen2Config(**SHAPE, tie_word_embeddings=True, rope_theta=1e6),
    # Qwen3: QK norm, explicit head_dim != hidden / heads, untied.
    "qwen3": transformers.Qwen3Config(**SHAPE, head_dim=16, tie_word_embeddings=False),
    # Llama 3.x: llama3 RoPE scaling; original context 64 puts the 4 frequencies of head_dim 8 in all 3 regions.
    "llama": transformers.LlamaConfig(
        **SHAPE, tie_word_embeddings=False, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64}),
}
ARCH_CLASSES = {"qwen2": transformers.Qwen2ForCausalLM, "qwen3": transformers.Qwen3ForCausalLM,
                "llama": transformers.LlamaForCausalLM}


def _random_hf_model(name: str):
    """A transformers model whose every parameter (biases and norm scales included) is random."""
    torch.manual_seed(0)
    model = ARCH_CLASSES[name](HF_CONFIGS[name]).eval()
    with torch.no_grad():
        for pname, p in model.named_parameters():
            base = 1.0 if pname.endswith("norm.weight") else 0.0
            p.copy_(base + 0.3 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """name -> (transformers model, its saved directory)."""
    out = {}
    for name in HF_CONFIGS:
        model = _random_hf_model(name)
        path = str(tmp_path_factory.mktemp(name))
        model.save_pretrained(path)
        out[name] = (model, path)
    return out


@pytest.fixture(scope="module")
def imported(hf_dirs):
    return {name: hf_checkpoint.load_hf_checkpoint(path) for name, (_, path) in hf_dirs.items()}


TOKENS = np.random.default_rng(0).integers(0, 96, (2, 12))
MASK = np.ones((2, 12), np.int64)
MASK[1, :3] = 0  # row 1 left-padded by 3


def _hf_logits(model, tokens=TOKENS, mask=MASK):
    positions = np.maximum(np.cumsum(mask, -1) - 1, 0)
    with torch.no_grad():
        out = model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask),
                    position_ids=torch.tensor(positions))
    return out.logits.numpy()


def _our_logits(cfg, params, tokens=TOKENS, mask=MASK):
    tokens, mask = jnp.asarray(tokens, jnp.int32), jnp.asarray(mask, jnp.int32)
    logits, _ = jax.jit(models.apply, static_argnums=0)(cfg, params, tokens, models.positions_from_mask(mask), mask)
    return np.asarray(logits)


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_config_from_hf(name, imported):
    cfg, _ = imported[name]
    hf = HF_CONFIGS[name]
    assert (cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (2, 4, 2)
    assert cfg.head_dim == (16 if name == "qwen3" else 8)
    assert cfg.qkv_bias == (name == "qwen2") and cfg.qk_norm == (name == "qwen3")
    assert cfg.tie_embeddings == hf.tie_word_embeddings
    assert (cfg.rope_scaling is not None) == (name == "llama")
    assert cfg.rope_theta == {"qwen2": 1e6, "qwen3": 10000.0, "llama": 10000.0}[name]


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_logits_match_transformers(name, hf_dirs, imported):
    model, _ = hf_dirs[name]
    cfg, params = imported[name]
    ours, theirs = _our_logits(cfg, params), _hf_logits(model)
    assert np.abs(theirs).max() > 1.0  # the comparison is not between near-zero logits
    valid = MASK.astype(bool)
    np.testing.assert_allclose(ours[valid], theirs[valid], atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_greedy_generation_matches_transformers(name, hf_dirs, imported):
    model, _ = hf_dirs[name]
    cfg, params = imported[name]
    prompt = TOKENS[:, :6]
    with torch.no_grad():
        theirs = model.generate(torch.tensor(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.long),
                                max_new_tokens=10, min_new_tokens=10, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[:, 6:].numpy()
    rollout = sampling.generate(cfg, params, jnp.asarray(prompt, jnp.int32), jnp.ones(prompt.shape, bool),
                                jax.random.key(0), sampling.SamplingConfig(max_new_tokens=10, temperature=0.0))
    np.testing.assert_array_equal(np.asarray(rollout.completion_tokens), theirs)
    assert len(set(theirs.ravel().tolist())) > 2  # not a degenerate repetition of one token


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_export_reimport_is_exact_and_transformers_loads_it(name, hf_dirs, imported, tmp_path):
    model, src = hf_dirs[name]
    cfg, params = imported[name]
    files = hf_checkpoint.save_hf_checkpoint(cfg, params, str(tmp_path), base_config=hf_checkpoint.read_hf_config(src))
    assert [os.path.basename(f) for f in files] == ["model.safetensors"]
    cfg2, params2 = hf_checkpoint.load_hf_checkpoint(str(tmp_path))
    assert cfg2 == cfg
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, params2)
    # The same tensor names as transformers writes, and transformers computes the same logits from them.
    with safe_open(files[0], "numpy") as ours, safe_open(os.path.join(src, "model.safetensors"), "numpy") as theirs:
        assert sorted(ours.keys()) == sorted(theirs.keys())
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    np.testing.assert_allclose(_hf_logits(reloaded), _hf_logits(model), atol=1e-6, rtol=0)


def test_export_from_scratch_in_shards_and_bfloat16(tmp_path):
    """A preset-initialised model (no base config) exported as several bf16 shards + index loads in
    transformers; re-import gives back the bf16 params exactly."""
    cfg = models.get_config("nano", vocab_size=64, qkv_bias=False, tie_embeddings=False)
    params = models.init_params(cfg, jax.random.key(1))
    files = hf_checkpoint.save_hf_checkpoint(cfg, params, str(tmp_path), dtype="bfloat16", max_shard_bytes=8192)
    assert len(files) > 2 and os.path.exists(tmp_path / hf_checkpoint.INDEX_FILE)
    with open(tmp_path / hf_checkpoint.INDEX_FILE) as f:
        weight_map = json.load(f)["weight_map"]
    assert set(weight_map.values()) == {os.path.basename(f) for f in files}
    cfg2, params2 = hf_checkpoint.load_hf_checkpoint(str(tmp_path), param_dtype="bfloat16")
    assert cfg2.param_dtype == "bfloat16" and hf_checkpoint.architecture_of(cfg2) == "LlamaForCausalLM"
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a.astype(jnp.bfloat16)), np.asarray(b)),
                 params, params2)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), dtype=torch.float32).eval()
    tokens, mask = TOKENS % 64, np.ones_like(TOKENS)
    ours = _our_logits(dataclasses.replace(cfg2, param_dtype="float32"), jax.tree.map(lambda x: x.astype(jnp.float32),
                                                                                     params2), tokens, mask)
    np.testing.assert_allclose(ours, _hf_logits(reloaded, tokens, mask), atol=1e-4, rtol=0)


def _copy_checkpoint(src: str, dst: str, edit_tensors=None, edit_config=None):
    os.makedirs(dst, exist_ok=True)
    config = hf_checkpoint.read_hf_config(src)
    if edit_config:
        edit_config(config)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f)
    with safe_open(os.path.join(src, "model.safetensors"), "numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if edit_tensors:
        edit_tensors(tensors)
    save_file(tensors, os.path.join(dst, "model.safetensors"))


def test_bad_checkpoints_fail_naming_the_tensor_or_field(hf_dirs, tmp_path):
    _, src = hf_dirs["qwen3"]
    name = "model.layers.1.self_attn.k_proj.weight"

    def truncate(t):
        t[name] = t[name][:-1]

    _copy_checkpoint(src, tmp_path / "shape", edit_tensors=truncate)
    with pytest.raises(hf_checkpoint.CheckpointError, match=rf"{name}.*shape \(31, 32\).*\(32, 32\)"):
        hf_checkpoint.load_hf_checkpoint(str(tmp_path / "shape"))

    _copy_checkpoint(src, tmp_path / "missing", edit_tensors=lambda t: t.pop(name))
    with pytest.raises(hf_checkpoint.CheckpointError, match=rf"missing: \['{name}'\]"):
        hf_checkpoint.load_hf_checkpoint(str(tmp_path / "missing"))

    _copy_checkpoint(src, tmp_path / "extra", edit_tensors=lambda t: t.update({"model.mystery.weight": t[name]}))
    with pytest.raises(hf_checkpoint.CheckpointError, match=r"unexpected: \['model.mystery.weight'\]"):
        hf_checkpoint.load_hf_checkpoint(str(tmp_path / "extra"))

    _copy_checkpoint(src, tmp_path / "arch", edit_config=lambda c: c.update(architectures=["MistralForCausalLM"]))
    with pytest.raises(hf_checkpoint.CheckpointError, match=r"architectures=\['MistralForCausalLM'\]: unsupported"):
        hf_checkpoint.load_hf_checkpoint(str(tmp_path / "arch"))

    _copy_checkpoint(src, tmp_path / "rope", edit_config=lambda c: c.update(
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}))
    with pytest.raises(hf_checkpoint.CheckpointError, match=r"rope_type='yarn'"):
        hf_checkpoint.load_hf_checkpoint(str(tmp_path / "rope"))


def test_import_places_params_with_their_sharding(hf_dirs):
    """On 8 simulated devices, a (fsdp=2, tensor=4) mesh import equals the unsharded one (hf_sharded_check.py)."""
    env = subprocess_env.simulated_cpu_devices(8)
    script = pathlib.Path(__file__).with_name("hf_sharded_check.py")
    result = subprocess.run([sys.executable, str(script), hf_dirs["qwen2"][1]], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout


# The published config.json files (legacy rope_theta / rope_scaling keys, as written by transformers 4.x).
QWEN2_5_0_5B_INSTRUCT = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
    "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": 21, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}
LLAMA3_2_1B_INSTRUCT = {
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True,
    "vocab_size": 128256,
}


@pytest.mark.parametrize("hf, preset", [(QWEN2_5_0_5B_INSTRUCT, "qwen2.5-0.5b"), (LLAMA3_2_1B_INSTRUCT, "llama3.2-1b")])
def test_published_configs_map_to_the_presets(hf, preset):
    cfg = hf_checkpoint.config_from_hf(hf)
    assert cfg == models.get_config(preset)
    assert hf_checkpoint.config_from_hf(hf_checkpoint.hf_config_from(cfg)) == cfg  # a fresh config.json round-trips


def test_real_size_tensor_names_and_shapes():
    """The Qwen2.5-0.5B layout as its model.safetensors stores it (tied: no lm_head)."""
    entries = {name: shape for _, _, name, shape, _ in hf_checkpoint._param_entries(models.get_config("qwen2.5-0.5b"))}
    assert len(entries) == 24 * 12 + 2 and "lm_head.weight" not in entries
    assert entries["model.embed_tokens.weight"] == (151936, 896)
    assert entries["model.layers.23.self_attn.q_proj.weight"] == (896, 896)
    assert entries["model.layers.0.self_attn.k_proj.weight"] == (128, 896)
    assert entries["model.layers.0.self_attn.v_proj.bias"] == (128,)
    assert entries["model.layers.0.self_attn.o_proj.weight"] == (896, 896)
    assert entries["model.layers.0.mlp.down_proj.weight"] == (896, 4864)
    assert entries["model.layers.0.post_attention_layernorm.weight"] == (896,)
