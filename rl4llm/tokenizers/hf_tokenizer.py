"""Hugging Face tokenizers (`tokenizer.json` through the `tokenizers` package) with their chat template.

A HF model directory holds `tokenizer.json` (normaliser, pre-tokeniser, model, post-processor, added
tokens), `tokenizer_config.json` (which added tokens are bos / eos / pad / unk, the chat template) and often
`chat_template.jinja` (the template, which then takes precedence) and `generation_config.json` (the ids
that end a generation). `HFTokenizer` reads them the way `transformers.AutoTokenizer` does:

- `encode(text, add_special_tokens=True)` runs tokenizer.json's post-processor (e.g. Llama 3 prepends
  `<|begin_of_text|>`); the default `add_special_tokens=False` gives the bare ids, as the sentencepiece
  `Tokenizer` does.
- `apply_chat_template(messages)` renders the template (`chat_template.render`) and encodes the text with
  `add_special_tokens=False`, exactly as transformers does (the template writes its own BOS).
- `pad_id` is the pad token's id, or the eos id when the tokenizer has no pad token (Llama 3);
  `stop_token_ids` are the eos id plus generation_config.json's `eos_token_id`s (e.g. `<|im_end|>` and
  `<|endoftext|>` for Qwen2.5-Instruct, `<|eot_id|>` for Llama 3 Instruct).
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

import tokenizers

from rl4llm.tokenizers import chat_template as chat_template_lib
from rl4llm.tokenizers import sentencepiece_tokenizer

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
GENERATION_CONFIG_FILE = "generation_config.json"
# The named special tokens transformers passes to chat templates (`special_tokens_map`).
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _read_json(path: str) -> dict:
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _token_content(value) -> str | None:
    """A special token entry of tokenizer_config.json: a string, an AddedToken dict, or null."""
    if isinstance(value, Mapping):
        return value.get("content")
    return value


def _chat_template(model_dir: str, config: Mapping[str, Any]) -> str | None:
    """`chat_template.jinja` if present, else tokenizer_config.json's `chat_template` (its "default" entry
    when it is a list of named templates)."""
    path = os.path.join(model_dir, CHAT_TEMPLATE_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        template = named.get("default")
    return template


class HFTokenizer:
    """A `tokenizers.Tokenizer` with the special tokens and chat template of its model directory."""

    def __init__(
        self,
        tokenizer: tokenizers.Tokenizer,
        special_tokens: Mapping[str, str],
        *,
        chat_template: str | None = None,
        generation_eos_ids: Sequence[int] = (),
    ):
        self._tok = tokenizer
        self.special_tokens = dict(special_tokens)  # e.g. {"bos_token": "<|begin_of_text|>", ...}
        self.chat_template = chat_template
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        ids = {name: self._id_of(name) for name in ("bos_token", "eos_token", "unk_token", "pad_token")}
        self.bos_id: int | None = ids["bos_token"]
        self.eos_id: int | None = ids["eos_token"]
        self.unk_id: int | None = ids["unk_token"]
        self.pad_id: int | None = ids["pad_token"] if ids["pad_token"] is not None else self.eos_id
        stops = ([self.eos_id] if self.eos_id is not None else []) + list(generation_eos_ids)
        self.stop_token_ids: tuple[int, ...] = tuple(dict.fromkeys(stops))

    def _id_of(self, name: str) -> int | None:
        content = self.special_tokens.get(name)
        if content is None:
            return None
        token_id = self._tok.token_to_id(content)
        if token_id is None:
            raise ValueError(f"tokenizer_config.json {name}={content!r} is not a token of tokenizer.json")
        return token_id

    @classmethod
    def load(cls, model_dir: str) -> "HFTokenizer":
        """Loads `tokenizer.json`, `tokenizer_config.json`, the chat template and generation_config.json."""
        path = os.path.join(model_dir, TOKENIZER_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: no tokenizer.json in this model directory")
        config = _read_json(os.path.join(model_dir, TOKENIZER_CONFIG_FILE))
        special = {}
        for name in SPECIAL_TOKEN_NAMES:
            content = _token_content(config.get(name))
            if content is not None:
                special[name] = content
        eos = _read_json(os.path.join(model_dir, GENERATION_CONFIG_FILE)).get("eos_token_id")
        generation_eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        return cls(
            tokenizers.Tokenizer.from_file(path),
            special,
            chat_template=_chat_template(model_dir, config),
            generation_eos_ids=generation_eos_ids,
        )

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`; with add_special_tokens, after tokenizer.json's post-processor (e.g. BOS)."""
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`; ids outside [0, vocab_size) (model vocabularies padded past the tokenizer's) are
        dropped, never raise."""
        ids = [int(i) for i in ids]
        return self._tok.decode([i for i in ids if 0 <= i < self.vocab_size], skip_special_tokens=skip_special_tokens)

    def encode_prompt(self, text: str) -> list[int]:
        """Ids of a prompt: `text` as the user turn of the chat template, with the assistant header
        (add_generation_prompt) when the tokenizer has a template; else `encode(text, add_special_tokens=True)`."""
        if self.chat_template is None:
            return self.encode(text, add_special_tokens=True)
        return self.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)

    def render_chat(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
                    **kwargs) -> str:
        """The chat template's text of `messages` (transformers `apply_chat_template(tokenize=False)`)."""
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template (tokenizer_config.json / chat_template.jinja)")
        return chat_template_lib.render(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens,
            **kwargs,
        )

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = True,
                            **kwargs) -> list[int]:
        """Token ids of the rendered chat, encoded without added special tokens (transformers'
        `apply_chat_template(tokenize=True)["input_ids"]`)."""
        return self.encode(self.render_chat(messages, add_generation_prompt=add_generation_prompt, **kwargs))


def load_tokenizer(path: str):
    """A tokenizer from a path: a sentencepiece `.model` file, or a HF model directory (tokenizer.json, else
    tokenizer.model)."""
    if os.path.isfile(path):
        return sentencepiece_tokenizer.Tokenizer.load(path)
    if os.path.exists(os.path.join(path, TOKENIZER_FILE)):
        return HFTokenizer.load(path)
    if os.path.exists(os.path.join(path, "tokenizer.model")):
        return sentencepiece_tokenizer.Tokenizer.load(os.path.join(path, "tokenizer.model"))
    raise FileNotFoundError(f"{path}: neither a sentencepiece .model file nor a directory with tokenizer.json")
