"""Chat templates (Jinja) rendered the way `transformers` renders them in `apply_chat_template`.

Same environment as transformers' `_compile_jinja_template`: a sandboxed, immutable Jinja environment with
`trim_blocks` and `lstrip_blocks`, loop controls, a `tojson` filter that does not escape HTML
(`json.dumps(ensure_ascii=False)`), and the globals `raise_exception`, `strftime_now`, `dict`, and a
`namespace` that refuses underscore-prefixed names. The template sees `messages`, `tools`, `documents`,
`add_generation_prompt`, the tokenizer's special tokens as strings (`bos_token`, `eos_token`, ...) and any
extra keyword arguments. `{% generation %}` blocks (assistant-mask markers) render their body.
Not reproduced: transformers' reasoning-field aliases (`thinking` / `reasoning` -> `reasoning_content`),
`continue_final_message`, and assistant-token masks.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

Message = Mapping[str, Any]


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore-prefixed attribute names (no route to Python internals)."""

    def __init__(*args, **kwargs):  # noqa: N805 (jinja2.utils.Namespace's signature trick)
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat template namespace attribute {name!r} is not allowed")


def _raise_exception(message: str):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


@functools.lru_cache(maxsize=16)
def compile_template(template: str) -> jinja2.Template:
    """The compiled template (cached per template string)."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise_exception,
        strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt),
        dict=dict,
        namespace=_Namespace,
    )
    return env.from_string(template)


def render(
    template: str,
    messages: Sequence[Message],
    *,
    add_generation_prompt: bool = False,
    special_tokens: Mapping[str, str] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    documents: Sequence[Mapping[str, Any]] | None = None,
    **kwargs,
) -> str:
    """The text of `messages` under `template` (transformers `apply_chat_template(..., tokenize=False)`).

    special_tokens: names -> strings (`bos_token`, `eos_token`, ...); `kwargs` override them.
    """
    for message in messages:
        if not isinstance(message, Mapping):
            raise TypeError(f"chat messages must be dicts with 'role' and 'content', got {message!r}")
    variables = {**(special_tokens or {}), **kwargs}
    return compile_template(template).render(
        messages=[dict(m) for m in messages],
        tools=None if tools is None else [dict(t) for t in tools],
        documents=None if documents is None else [dict(d) for d in documents],
        add_generation_prompt=add_generation_prompt,
        **variables,
    )
