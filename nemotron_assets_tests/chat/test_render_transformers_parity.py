"""Jinja chat templates: ids and assistant masks equal transformers' ``apply_chat_template``.

For a sample that is a whole conversation, ``tokenize_sample(render_sample(...))`` must equal
``tokenizer.apply_chat_template(messages, tools=tools, chat_template=..., tokenize=True, return_dict=True,
return_assistant_tokens_mask=True)`` (transformers 5.23, Llama-3 tokenizer), over conversations covering tools,
parallel calls, reasoning, unicode, empty content and multi-turn, for a Llama-3-style template and the built-in
ChatML, on the fast (fastokens + byte offsets) and the reference (hf-tokenizers offsets) tokenizer paths.
"""

import pytest
from hypothesis import HealthCheck, assume, given, settings

from nemotron_assets.chat import tokenizers as chat_tokenizers
from nemotron_assets.chat.samples import find_literal, render_sample, tokenize_sample
from nemotron_assets.chat.templates import CHATML, JinjaChatTemplate
from nemotron_assets.chat.tokenizers import HFChatTokenizer
from nemotron_assets.tokenize.loading import locate_tokenizer
from nemotron_assets_tests.chat.render_reference import (
    TOOLS,
    as_list,
    chat_tokenizer,
    conversations,
    fixture_template,
    transformers_sample,
    transformers_text,
)

LLAMA3 = fixture_template("llama3_tagged.jinja")
TEMPLATES = {"llama3_tagged": LLAMA3, "chatml": CHATML}


def ours(messages, tools, source: str, backend: str = "fastokens") -> tuple[str, list[int], list[int]]:
    tokenizer = chat_tokenizer("llama3", backend)
    template = JinjaChatTemplate(source, "test", tokenizer.template_tokens)
    rendered = render_sample(messages, tools, template)
    ids, mask = tokenize_sample(rendered, tokenizer)
    return rendered.text, as_list(ids), as_list(mask)


def test_auto_tokenizes_with_hf_tokenizers_until_it_has_taken_enough_text_then_with_fastokens(monkeypatch):
    """Parsing Llama-3 with fastokens takes about a second: ``auto`` in a process of its own tokenizes
    ``FAST_PATH_AFTER_CHARS`` characters with hf-tokenizers first (a small input never waits for the parse), then
    parses, checks and uses fastokens. The ids are the same either way."""
    monkeypatch.setattr(chat_tokenizers, "FAST_PATH_AFTER_CHARS", 100)
    tokenizer = HFChatTokenizer(locate_tokenizer("llama3"))
    assert tokenizer.backend == "hf-tokenizers"
    assert tokenizer.backend_reason == "fastokens loads once hf-tokenizers has tokenized 100 characters in this process"
    texts = ["sixty characters: " + "0123456789" * 4 + "ab", "sixty more, with 😀 and é, so 120 in all " + "." * 20]
    assert [len(text) for text in texts] == [60, 60]
    reference = [encoding.ids for encoding in tokenizer.reference.encode_batch(texts, add_special_tokens=False)]
    (first,) = tokenizer.encode_batch(texts[:1])
    assert tokenizer.backend == "hf-tokenizers" and as_list(first.ids) == reference[0]
    (second,) = tokenizer.encode_batch(texts[1:])
    assert tokenizer.backend == "fastokens", tokenizer.backend_reason
    assert as_list(second.ids) == reference[1]
    assert chat_tokenizer("llama3", "fastokens").backend == "fastokens"
    assert chat_tokenizer("llama3", "reference").backend == "hf-tokenizers"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_ids_and_mask_equal_transformers(name, conversation):
    messages, tools = conversation
    assume(find_literal(messages, tools, chat_tokenizer()) is None)
    text, ids, mask = ours(messages, tools, TEMPLATES[name])
    assert text == transformers_text(messages, tools, TEMPLATES[name])
    assert (ids, mask) == transformers_sample(messages, tools, TEMPLATES[name])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_reference_tokenizer_path_equals_transformers_too(conversation):
    messages, tools = conversation
    assume(find_literal(messages, tools, chat_tokenizer()) is None)
    _, ids, mask = ours(messages, tools, LLAMA3, backend="reference")
    assert (ids, mask) == transformers_sample(messages, tools, LLAMA3)


# Hand-picked conversations: each construct on its own, so a failure names it.
WEATHER_CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
SEARCH_CALL = {"id": None, "type": "function", "function": {"name": "search", "arguments": {"q": "日本語", "n": 2}}}
CASES = {
    "plain": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
    "empty_contents": [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                       {"role": "assistant", "content": ""}],
    "none_values": [{"role": "user", "content": "Hi", "name": None},
                    {"role": "assistant", "content": "Yo", "tool_calls": None, "reasoning_content": None}],
    "unicode_split_over_tokens": [{"role": "user", "content": "👩‍👩‍👧 e\u0301 🇫🇷"},
                                  {"role": "assistant", "content": "👩‍👩‍👧"}],
    "reasoning": [{"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4", "reasoning_content": "Add them."}],
    "parallel_calls": [{"role": "user", "content": "Weather and news?"},
                       {"role": "assistant", "content": "", "tool_calls": [WEATHER_CALL, SEARCH_CALL]},
                       {"role": "tool", "content": "21C", "tool_call_id": "c1", "name": "get_weather"},
                       {"role": "tool", "content": "[]", "tool_call_id": None, "name": None},
                       {"role": "assistant", "content": "21 °C, no news."}],
    "multi_turn": [{"role": "developer", "content": "Be brief."},
                   {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "c"}, {"role": "assistant", "content": "d\n\n"}],
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no_tools", "tools"])
def test_hand_picked_conversations_equal_transformers(name, case, tools):
    _, ids, mask = ours(CASES[case], tools, TEMPLATES[name])
    assert (ids, mask) == transformers_sample(CASES[case], tools, TEMPLATES[name])
    assert any(mask)


def test_llama3_template_trains_exactly_the_replies_and_their_end_of_turn():
    """A golden written by hand: the trained text of each assistant turn is its reply plus <|eot_id|>."""
    tokenizer = chat_tokenizer()
    template = JinjaChatTemplate(LLAMA3, "llama3_tagged.jinja", tokenizer.template_tokens)
    rendered = render_sample(CASES["multi_turn"], None, template)
    trained = [rendered.text[start:end] for start, end in rendered.trained_spans]
    assert trained == ["b<|eot_id|>", "d<|eot_id|>"]  # the template trims "d\n\n"
    ids, mask = tokenize_sample(rendered, tokenizer)
    assert tokenizer.reference.decode(as_list(ids[mask == 1]), skip_special_tokens=False) == "b<|eot_id|>d<|eot_id|>"
