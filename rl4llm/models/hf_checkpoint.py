"""Hugging Face checkpoints (config.json + safetensors) <-> rl4llm decoder params.

Supported architectures (config.json `architectures[0]`):
  Qwen2ForCausalLM (Qwen2 / Qwen2.5: q/k/v bias), Qwen3ForCausalLM (QK RMSNorm, no bias),
  LlamaForCausalLM (Llama 3.x, with or without `rope_type: "llama3"` frequency scaling).

Layouts (HF nn.Linear weights are [out, in]; ours are einsum kernels [in..., out...]):
  model.embed_tokens.weight [V, E]                         -> embed [V, E]
  model.layers.i.self_attn.{q,k,v}_proj.weight [H*D, E]    -> layers[i].attn.{q,k,v}_proj.kernel [E, H, D]  (W^T)
  model.layers.i.self_attn.{q,k,v}_proj.bias [H*D]         -> ....bias [H, D]
  model.layers.i.self_attn.o_proj.weight [E, H*D]          -> layers[i].attn.o_proj.kernel [H, D, E]       (W^T)
  model.layers.i.self_attn.{q,k}_norm.weight [D]           -> layers[i].attn.{q,k}_norm.scale [D]
  model.layers.i.mlp.{gate,up,down}_proj.weight [out, in]  -> layers[i].mlp.{...}.kernel [in, out]         (W^T)
  model.layers.i.{input,post_attention}_layernorm.weight   -> layers[i].{input,post_attn}_norm.scale
  model.norm.weight                                        -> final_norm.scale
  lm_head.weight [V, E]                                    -> lm_head [E, V] (absent when embeddings are tied)

Import streams tensor by tensor: each tensor is read from its safetensors file (memory-mapped), converted to
our layout and the configured param dtype on the host, and placed on the devices at once (with its
NamedSharding when a mesh is given), so at most one tensor of the model is ever held on the host.
Export gathers one param at a time and writes shards of at most `max_shard_bytes` with the HF index file.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
import shutil
from typing import Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from safetensors import safe_open
from safetensors.numpy import save_file

from rl4llm.models import sharding as sharding_lib
from rl4llm.models.config import Llama3RopeScaling, ModelConfig
from rl4llm.models.decoder import Params, init_param_shardings, init_params

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
# Files of a HF model directory that export copies along (tokenizer, chat template, generation defaults).
COMPANION_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)

# architectures[0] -> (model_type, q/k/v bias, QK norm)
ARCHITECTURES: dict[str, tuple[str, bool, bool]] = {
    "Qwen2ForCausalLM": ("qwen2", True, False),
    "Qwen3ForCausalLM": ("qwen3", False, True),
    "LlamaForCausalLM": ("llama", False, False),
}
# Checkpoint tensors that carry no parameter (RoPE tables some older exports saved).
_IGNORED_TENSORS = re.compile(r".*\.rotary_emb\.inv_freq$")


class CheckpointError(ValueError):
    """A HF checkpoint that cannot be imported (the message names the file, field or tensor)."""


# ------------------------------------------------------------------------------------------ config


def read_hf_config(model_dir: str) -> dict:
    """The parsed `<model_dir>/config.json`."""
    path = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: no config.json; expected a Hugging Face model directory.")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _rope_fields(hf: dict) -> tuple[float, dict | None]:
    """(rope_theta, scaling dict or None) from the legacy (`rope_theta`, `rope_scaling`) or the
    transformers>=5 (`rope_parameters`) form."""
    params = hf.get("rope_parameters")
    if params:
        scaling = None if params.get("rope_type", "default") == "default" else params
        return float(params.get("rope_theta", hf.get("rope_theta", 10000.0))), scaling
    scaling = hf.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type", "default")) == "default":
        scaling = None
    return float(hf.get("rope_theta", 10000.0)), scaling


def config_from_hf(hf: dict, **overrides) -> ModelConfig:
    """ModelConfig of a HF config.json dict; `overrides` replace fields (e.g. param_dtype="bfloat16", remat).

    Raises CheckpointError naming the field for anything the decoder does not implement.
    """
    arch = (hf.get("architectures") or [None])[0]
    if arch not in ARCHITECTURES:
        raise CheckpointError(
            f"config.json architectures={hf.get('architectures')!r}: unsupported; supported: {sorted(ARCHITECTURES)}."
        )
    _, qkv_bias, qk_norm = ARCHITECTURES[arch]
    unsupported = {
        "hidden_act": hf.get("hidden_act", "silu") != "silu",
        "use_sliding_window": bool(hf.get("use_sliding_window", False)),
        "attention_bias": arch != "Qwen2ForCausalLM" and bool(hf.get("attention_bias", False)),
        "mlp_bias": bool(hf.get("mlp_bias", False)),
    }
    for field, bad in unsupported.items():
        if bad:
            raise CheckpointError(f"config.json {field}={hf.get(field)!r} ({arch}): not supported by rl4llm's decoder.")
    theta, scaling = _rope_fields(hf)
    rope_scaling = None
    if scaling is not None:
        rope_type = scaling.get("rope_type", scaling.get("type"))
        if rope_type != "llama3":
            raise CheckpointError(f"config.json rope scaling rope_type={rope_type!r}: only 'llama3' is supported.")
        rope_scaling = Llama3RopeScaling(
            factor=float(scaling["factor"]),
            low_freq_factor=float(scaling["low_freq_factor"]),
            high_freq_factor=float(scaling["high_freq_factor"]),
            original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
        )
    if hf.get("partial_rotary_factor", 1.0) != 1.0:
        raise CheckpointError(f"config.json partial_rotary_factor={hf['partial_rotary_factor']}: not supported.")
    fields = dict(
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        num_kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        head_dim=hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"],
        intermediate_size=hf["intermediate_size"],
        rope_theta=theta,
        rope_scaling=rope_scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        init_std=float(hf.get("initializer_range", 0.02)),
    )
    fields.update(overrides)
    return ModelConfig(**fields)


def architecture_of(cfg: ModelConfig) -> str:
    """The HF architecture that computes what `cfg` computes."""
    if cfg.qk_norm and not cfg.qkv_bias:
        return "Qwen3ForCausalLM"
    if cfg.qkv_bias and not cfg.qk_norm:
        return "Qwen2ForCausalLM"
    if not cfg.qkv_bias and not cfg.qk_norm:
        return "LlamaForCausalLM"
    raise CheckpointError(f"{cfg}: q/k/v bias together with QK norm matches no supported HF architecture.")


def hf_config_from(cfg: ModelConfig, base: dict | None = None, *, dtype: str | None = None) -> dict:
    """HF config.json dict of `cfg`: `base` (e.g. the imported model's config.json) with every field our
    config determines overwritten, or a fresh config. `dtype` (default cfg.param_dtype) is the weights' dtype."""
    arch = architecture_of(cfg)
    hf = copy.deepcopy(base) if base is not None else {}
    if base is not None and (base.get("architectures") or [None])[0] != arch:
        raise CheckpointError(f"base config architectures={base.get('architectures')!r} but the params are {arch}.")
    hf.update(
        architectures=[arch],
        model_type=ARCHITECTURES[arch][0],
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        intermediate_size=cfg.intermediate_size,
        rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        hidden_act="silu",
    )
    if arch != "Qwen2ForCausalLM":
        hf["attention_bias"] = False
    scaling = None
    if cfg.rope_scaling is not None:
        scaling = {"rope_type": "llama3", **{k: getattr(cfg.rope_scaling, k) for k in (
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}}
    if "rope_parameters" in hf:
        hf["rope_parameters"] = {"rope_theta": cfg.rope_theta, **(scaling or {"rope_type": "default"})}
    else:
        hf.update(rope_theta=cfg.rope_theta, rope_scaling=scaling)
    weights_dtype = dtype or cfg.param_dtype
    for key in ("torch_dtype", "dtype"):
        if key in hf or (key == "dtype" and "torch_dtype" not in hf):
            hf[key] = weights_dtype
    return hf


# ------------------------------------------------------------------------------------------ layouts


def _path_str(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def hf_tensor(cfg: ModelConfig, path: tuple, shape: tuple[int, ...]) -> tuple[str, tuple[int, ...], bool]:
    """(HF tensor name, HF shape, is_linear) of our param at `path` with `shape`.

    Linear weights convert as ours = W^T reshaped; everything else is a plain reshape.
    """
    e = cfg.hidden_size
    if path == ("embed",):
        return "model.embed_tokens.weight", shape, False
    if path == ("lm_head",):
        return "lm_head.weight", shape[::-1], True
    if path == ("final_norm", "scale"):
        return "model.norm.weight", shape, False
    if path[0] == "layers":
        i, module, rest = path[1], path[2], path[3:]
        prefix = f"model.layers.{i}."
        if module in ("input_norm", "post_attn_norm"):
            name = {"input_norm": "input_layernorm", "post_attn_norm": "post_attention_layernorm"}[module]
            return prefix + name + ".weight", shape, False
        if module == "mlp":
            return f"{prefix}mlp.{rest[0]}.weight", shape[::-1], True
        if module == "attn":
            proj, leaf = rest
            name = f"{prefix}self_attn.{proj}."
            if proj in ("q_norm", "k_norm"):
                return name + "weight", shape, False
            if leaf == "bias":
                return name + "bias", (math.prod(shape),), False
            if proj == "o_proj":
                return name + "weight", (e, math.prod(shape[:-1])), True
            return name + "weight", (math.prod(shape[1:]), e), True
    raise CheckpointError(f"no HF tensor for param {_path_str(path)}")


def to_ours(hf_array: np.ndarray, shape: tuple[int, ...], is_linear: bool) -> np.ndarray:
    """HF layout -> ours: W^T reshaped for linear weights, a reshape otherwise."""
    return (hf_array.T if is_linear else hf_array).reshape(shape)


def to_hf(array: np.ndarray, hf_shape: tuple[int, ...], is_linear: bool) -> np.ndarray:
    """Ours -> HF layout (inverse of `to_ours`)."""
    return array.reshape(hf_shape[::-1]).T if is_linear else array.reshape(hf_shape)


def _param_entries(cfg: ModelConfig) -> Iterator[tuple[tuple, tuple[int, ...], str, tuple[int, ...], bool]]:
    """(our path, our shape, HF name, HF shape, is_linear) of every param, in a fixed order."""
    shapes = jax.eval_shape(init_params, cfg, jax.random.key(0))
    for key_path, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]:
        path = tuple(k.key for k in key_path)
        yield (path, leaf.shape) + hf_tensor(cfg, path, leaf.shape)


def _get_path(tree, path: tuple):
    for key in path:
        tree = tree[key]
    return tree


def _set_path(tree: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


# ------------------------------------------------------------------------------------------ import


def _tensor_files(model_dir: str) -> dict[str, str]:
    """HF tensor name -> safetensors file path, from the index, the single file, or every *.safetensors."""
    index = os.path.join(model_dir, INDEX_FILE)
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        return {name: os.path.join(model_dir, file) for name, file in weight_map.items()}
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir}: no *.safetensors files (PyTorch .bin checkpoints are not supported).")
    names = {}
    for file in files:
        with safe_open(os.path.join(model_dir, file), framework="numpy") as f:
            names.update({name: os.path.join(model_dir, file) for name in f.keys()})
    return names


def load_hf_checkpoint(
    model_dir: str,
    *,
    mesh: Mesh | None = None,
    rules: Mapping[str, str | None] = sharding_lib.DEFAULT_RULES,
    **config_overrides,
) -> tuple[ModelConfig, Params]:
    """(ModelConfig, params) of the HF model in `model_dir`, params cast to the config's param_dtype.

    `config_overrides` replace ModelConfig fields (param_dtype, dtype, remat, ...; shapes must match the
    checkpoint). With a `mesh`, each param is placed with `decoder.init_param_shardings(cfg, mesh, rules)`;
    without one, on the default device. Unknown or missing tensors, and shapes that disagree with
    config.json, raise CheckpointError naming the tensor and its file.
    """
    cfg = config_from_hf(read_hf_config(model_dir), **config_overrides)
    if cfg.lora_rank:
        raise CheckpointError("load_hf_checkpoint loads the base model; add LoRA adapters with lora.add_adapters.")
    files = _tensor_files(model_dir)
    shardings = init_param_shardings(cfg, mesh, rules) if mesh is not None else None
    entries = list(_param_entries(cfg))
    expected = {hf_name for _, _, hf_name, _, _ in entries}
    unknown = sorted(n for n in files if n not in expected and not _IGNORED_TENSORS.match(n)
                     and not (cfg.tie_embeddings and n == "lm_head.weight"))
    missing = sorted(expected - set(files))
    if unknown or missing:
        raise CheckpointError(
            f"{model_dir}: tensors do not match the {architecture_of(cfg)} model of its config.json"
            + (f"; unexpected: {unknown[:8]}{' ...' if len(unknown) > 8 else ''}" if unknown else "")
            + (f"; missing: {missing[:8]}{' ...' if len(missing) > 8 else ''}" if missing else "")
        )
    param_dtype = jnp.dtype(cfg.param_dtype)
    params: dict = {}
    with contextlib.ExitStack() as stack:
        handles = {}
        for path, shape, hf_name, hf_shape, is_linear in entries:
            file = files[hf_name]
            if file not in handles:
                handles[file] = stack.enter_context(safe_open(file, framework="numpy"))
            stored_shape = tuple(handles[file].get_slice(hf_name).get_shape())
            if stored_shape != hf_shape:
                raise CheckpointError(
                    f"tensor {hf_name} in {file}: shape {stored_shape}, but config.json implies {hf_shape} "
                    f"(param {_path_str(path)} {shape})."
                )
            host = to_ours(handles[file].get_tensor(hf_name), shape, is_linear).astype(param_dtype)
            if shardings is None:
                value = jax.device_put(host)
            else:
                sharding = _get_path(shardings, path)
                value = jax.make_array_from_callback(shape, sharding, lambda index, host=host: host[index])
            _set_path(params, path, value)
            del host
    return cfg, params


# ------------------------------------------------------------------------------------------ export


def _to_host(x: jax.Array) -> np.ndarray:
    """The full value of one (possibly sharded, possibly multi-host) array on this host."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def save_hf_checkpoint(
    cfg: ModelConfig,
    params: Params,
    out_dir: str,
    *,
    base_config: dict | None = None,
    dtype: str | None = None,
    max_shard_bytes: int = 5 * 1024**3,
    copy_files_from: str | None = None,
) -> list[str]:
    """Writes `params` as a HF model directory (config.json, safetensors shards, index) that
    transformers / vLLM load; returns the written safetensors files.

    base_config: the imported model's config.json (kept, with our fields overwritten; see `hf_config_from`).
    dtype: dtype of the written weights (default cfg.param_dtype). Shards hold at most `max_shard_bytes`
    (one file `model.safetensors` when everything fits, else `model-0000k-of-0000n.safetensors` + index).
    copy_files_from: a HF model directory whose tokenizer / chat template / generation files are copied.
    Params are gathered to the host one at a time; on several hosts only process 0 writes.
    """
    out_dtype = jnp.dtype(dtype or cfg.param_dtype)
    entries = list(_param_entries(cfg))
    shards: list[list] = [[]]
    shard_bytes = 0
    for entry in entries:
        size = math.prod(entry[3]) * out_dtype.itemsize
        if shards[-1] and shard_bytes + size > max_shard_bytes:
            shards.append([])
            shard_bytes = 0
        shards[-1].append(entry)
        shard_bytes += size
    n = len(shards)
    names = [SINGLE_FILE] if n == 1 else [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    writer = jax.process_index() == 0
    if writer:
        os.makedirs(out_dir, exist_ok=True)
    weight_map = {}
    for name, shard in zip(names, shards):
        tensors = {}
        for path, _, hf_name, hf_shape, is_linear in shard:
            host = _to_host(_get_path(params, path))
            tensors[hf_name] = np.ascontiguousarray(to_hf(host, hf_shape, is_linear).astype(out_dtype))
            weight_map[hf_name] = name
        if writer:
            save_file(tensors, os.path.join(out_dir, name), metadata={"format": "pt"})
        del tensors
    if writer:
        if n > 1:
            total = sum(math.prod(e[3]) for e in entries) * out_dtype.itemsize
            with open(os.path.join(out_dir, INDEX_FILE), "w", encoding="utf-8") as f:
                json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
        with open(os.path.join(out_dir, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump(hf_config_from(cfg, base_config, dtype=out_dtype.name), f, indent=2, sort_keys=True)
        if copy_files_from is not None:
            for file in COMPANION_FILES:
                src = os.path.join(copy_files_from, file)
                if os.path.exists(src) and os.path.abspath(src) != os.path.abspath(os.path.join(out_dir, file)):
                    shutil.copyfile(src, os.path.join(out_dir, file))
    return [os.path.join(out_dir, name) for name in names]
