"""HFTokenizer and chat templates against transformers.AutoTokenizer on tokenizers trained and saved here."""

import json
from collections.abc import Mapping

import pytest
import tokenizers
import transformers
from tokenizers import decoders, models, pre_tokenizers, processors, trainers

from rl4llm.tokenizers import chat_template, hf_tokenizer, sentencepiece_tokenizer

CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? #### 72",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
    "Let's think step by step and output the final answer after \"####\".",
    "Ünïcödé ✓ 数学 émigré — tabs\tand  double  spaces\n\nnewlines",
] * 20

# Qwen2.5-style ChatML template: default system prompt, tools via tojson, raise_exception on bad roles.
CHATML = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- if tools %}{{- '<|im_start|>tools\\n' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] %}{{ raise_exception('bad role ' + message['role']) }}"
    "{%- elif not (message['role'] == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Llama-3-style template: writes bos_token itself, uses a namespace, trim_blocks/lstrip_blocks whitespace.
LLAMA3 = """{{- bos_token }}
{% set ns = namespace(turns=0) %}
{% for message in messages %}
    {% set ns.turns = ns.turns + 1 %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{% endfor %}
{% if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{% endif %}
"""
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "<pad>"]


def _train(template: str, bos: str | None, pad: str | None):
    """A byte-level BPE tokenizer trained on CORPUS, with a post-processor that prepends `bos` (if any)."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    if bos is not None:
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                           special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token="<|im_end|>",
                                                pad_token=pad, chat_template=template)


@pytest.fixture(scope="module", params=["chatml", "llama3"])
def pair(request, tmp_path_factory):
    """(transformers.AutoTokenizer, HFTokenizer, directory) of one saved tokenizer directory."""
    path = tmp_path_factory.mktemp(request.param)
    if request.param == "chatml":  # Qwen: no BOS, a pad token
        _train(CHATML, None, "<pad>").save_pretrained(path)
        (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 1]}))
    else:  # Llama 3: BOS from the post-processor, no pad token
        _train(LLAMA3, "<|begin_of_text|>", None).save_pretrained(path)
    return transformers.AutoTokenizer.from_pretrained(str(path)), hf_tokenizer.HFTokenizer.load(str(path)), path


TEXTS = ["Natalia sold 48 clips.", "  leading spaces and émigré ✓ 数学\n", "", "<|im_end|> inside text #### 72"]
CHATS = [
    [{"role": "user", "content": "How many clips did Natalia sell?"}],
    [{"role": "system", "content": "Answer after ####."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4 #### 4"}, {"role": "user", "content": "  and 3+3?  "}],
]


def test_encode_decode_match_transformers(pair):
    theirs, ours, _ = pair
    for text in TEXTS:
        for special in (False, True):
            assert ours.encode(text, add_special_tokens=special) == theirs.encode(text, add_special_tokens=special)
        ids = theirs.encode(text, add_special_tokens=True)
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
        assert ours.decode(ids, skip_special_tokens=False) == theirs.decode(ids, skip_special_tokens=False)
    assert ours.vocab_size == len(theirs)
    # Ids past the tokenizer's vocabulary (a padded model vocabulary) are dropped.
    assert ours.decode(theirs.encode("clips") + [ours.vocab_size + 5]) == "clips"


def test_special_ids_match_transformers(pair):
    theirs, ours, _ = pair
    assert (ours.bos_id, ours.eos_id) == (theirs.bos_token_id, theirs.eos_token_id)
    if theirs.pad_token_id is None:  # Llama 3 has no pad token: we pad with eos
        assert ours.pad_id == ours.eos_id and ours.bos_id is not None
        assert ours.stop_token_ids == (ours.eos_id,)
    else:
        assert ours.pad_id == theirs.pad_token_id and ours.bos_id is None
        assert ours.stop_token_ids == (3, 1)  # eos (<|im_end|> = 3), then generation_config's extra id 1


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(pair, add_generation_prompt):
    theirs, ours, _ = pair
    for chat in CHATS:
        text = theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=add_generation_prompt)
        ids = theirs.apply_chat_template(chat, tokenize=True, add_generation_prompt=add_generation_prompt)
        ids = ids["input_ids"] if isinstance(ids, Mapping) else ids
        assert ours.render_chat(chat, add_generation_prompt=add_generation_prompt) == text
        assert ours.apply_chat_template(chat, add_generation_prompt=add_generation_prompt) == list(ids)
    assert ours.special_tokens == theirs.special_tokens_map


def test_chat_template_tools_and_errors():
    tools = [{"name": "calc", "description": "évalue <b>", "parameters": {"x": 1}}]
    text = chat_template.render(CHATML, CHATS[0], tools=tools, add_generation_prompt=True)
    assert '{"name": "calc", "description": "évalue <b>", "parameters": {"x": 1}}' in text  # no HTML escaping
    with pytest.raises(Exception, match="bad role tool"):
        chat_template.render(CHATML, [{"role": "tool", "content": "x"}])
    with pytest.raises(Exception, match="not allowed"):
        chat_template.render("{% set ns = namespace(_x=1) %}", [])
    with pytest.raises(Exception, match="unsafe|not safely"):  # the sandbox blocks Python internals
        chat_template.render("{{ messages.__class__.__mro__ }}", [])
    assert chat_template.render("{% generation %}{{ messages[0]['content'] }}{% endgeneration %}",
                                [{"role": "user", "content": "hi"}]) == "hi"


def test_load_tokenizer_dispatches_on_the_path(pair, tmp_path):
    _, _, path = pair
    assert isinstance(hf_tokenizer.load_tokenizer(str(path)), hf_tokenizer.HFTokenizer)
    spm_path = sentencepiece_tokenizer.train_tokenizer(CORPUS[:5], str(tmp_path / "sp"))
    assert isinstance(hf_tokenizer.load_tokenizer(spm_path), sentencepiece_tokenizer.Tokenizer)
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        hf_tokenizer.load_tokenizer(str(tmp_path))
