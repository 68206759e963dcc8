"""Harmony chat SFT: text and ids equal openai-harmony's ``render_conversation_for_training``; the mask trains each
assistant message after its role name through its terminator.

The expected mask is read off the library's own token stream: after each ``<|start|>`` comes the role-name token;
for ``assistant`` every token after it up to and including the next terminator is trained.
"""

import pytest
from hypothesis import HealthCheck, assume, given, settings
from openai_harmony import Conversation, RenderConversationConfig

from nemotron_assets.sft.harmony import HarmonyTemplate, harmony_messages
from nemotron_assets.sft.samples import (
    ENDS_ON_USER_TURN,
    find_literal,
    render_sample,
    samples_for_conversation,
    tokenize_sample,
)
from nemotron_assets_tests.sft.render_reference import (
    as_list,
    chat_tokenizer,
    conversations,
    harmony_encoding,
    to_library,
)

START, TERMINATORS = 200006, {200002, 200007, 200012}  # <|start|>; <|return|>, <|end|>, <|call|>


def library_ids(messages, tools, auto_drop_analysis: bool | None) -> list[int]:
    """openai-harmony's training render of our Harmony messages; None = the library's default config."""
    conversation = Conversation.from_messages([to_library(m) for m in harmony_messages(messages, tools,
                                                                                        "medium").messages])
    config = None if auto_drop_analysis is None else RenderConversationConfig(auto_drop_analysis=auto_drop_analysis)
    return harmony_encoding().render_conversation_for_training(conversation, config)


def mask_from_token_stream(ids: list[int], trained_after_user: int = 0) -> list[int]:
    """1 from the token after an ``assistant`` role name through the message's terminator; with
    `trained_after_user` = n, only for assistant messages after the n-th user message."""
    encoding = harmony_encoding()
    mask, users, in_assistant = [0] * len(ids), 0, False
    for i, token in enumerate(ids):
        if token == START:
            role = encoding.decode([ids[i + 1]])
            users += role == "user"
            in_assistant = role == "assistant" and users >= trained_after_user
            continue
        if in_assistant and ids[i - 1] != START:
            mask[i] = 1
            in_assistant = token not in TERMINATORS
    return mask


def ours(messages, tools, auto_drop_analysis: bool, backend: str = "auto", trained_from: int = 0):
    template = HarmonyTemplate(auto_drop_analysis=auto_drop_analysis)
    rendered = render_sample(messages, tools, template, trained_from)
    ids, mask = tokenize_sample(rendered, chat_tokenizer("o200k_harmony", backend))
    return rendered.text, as_list(ids), as_list(mask)


@pytest.mark.parametrize("auto_drop_analysis", [True, False], ids=["default_config", "keep_analysis"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_text_ids_and_mask_equal_openai_harmony(auto_drop_analysis, conversation):
    messages, tools = conversation
    assume(find_literal(messages, tools, chat_tokenizer("o200k_harmony")) is None)
    text, ids, mask = ours(messages, tools, auto_drop_analysis)
    expected = library_ids(messages, tools, None if auto_drop_analysis else False)
    assert text == harmony_encoding().decode_utf8(expected)
    assert ids == expected
    assert mask == mask_from_token_stream(expected)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_tiktoken_reference_path_gives_the_same(conversation):
    messages, tools = conversation
    assume(find_literal(messages, tools, chat_tokenizer("o200k_harmony")) is None)
    assert ours(messages, tools, True, backend="reference") == ours(messages, tools, True)


REASONING = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "Weather in Paris?"},
             {"role": "assistant", "content": "", "reasoning_content": "Need the tool.",
              "tool_calls": [{"id": "c1", "type": "function",
                              "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
             {"role": "tool", "content": "{\"temp\": 21}", "tool_call_id": "c1", "name": "get_weather"},
             {"role": "assistant", "content": "21 °C.", "reasoning_content": "Easy."},
             {"role": "user", "content": "And tomorrow?"},
             {"role": "assistant", "content": "No forecast.", "reasoning_content": "No tool for that."},
             {"role": "user", "content": "Thanks"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Gets the weather.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]


@pytest.mark.parametrize("auto_drop_analysis", [True, False], ids=["default_config", "keep_analysis"])
def test_a_reasoning_conversation_gives_one_sample_per_user_turn(auto_drop_analysis):
    """Turn 0 = messages[:5], turn 1 = messages[:7] trained only after its second user message; turn 2 has no
    reply. Each sample's ids are the library's render of its messages."""
    result = samples_for_conversation(REASONING, TOOLS, HarmonyTemplate(auto_drop_analysis=auto_drop_analysis),
                                      chat_tokenizer("o200k_harmony"))
    assert [(s.user_turn, s.messages) for s in result.samples] == [(0, 5), (1, 7)]
    assert result.dropped == {ENDS_ON_USER_TURN: 1}
    config = None if auto_drop_analysis else False
    for sample, users_before in zip(result.samples, (1, 2)):
        expected = library_ids(REASONING[: sample.messages], TOOLS, config)
        assert as_list(sample.ids) == expected
        assert as_list(sample.assistant_mask) == mask_from_token_stream(expected, users_before)


def test_the_default_config_drops_the_reasoning_before_the_first_final_answer():
    """openai-harmony's default (auto_drop_analysis=True): a one-turn sample loses its reasoning, and with it the
    reasoning is not trained. Keeping it needs auto_drop_analysis=False."""
    one_turn = REASONING[:5]
    default, _, _ = ours(one_turn, TOOLS, True)
    kept, _, _ = ours(one_turn, TOOLS, False)
    assert "Need the tool." not in default and "Easy." not in default
    assert "<|channel|>analysis<|message|>Need the tool.<|end|>" in kept and "Easy." in kept


def test_trained_text_by_hand():
    rendered = render_sample(REASONING[:5], TOOLS, HarmonyTemplate(auto_drop_analysis=False))
    trained = [rendered.text[start:end] for start, end in rendered.trained_spans]
    assert trained == [
        "<|channel|>analysis<|message|>Need the tool.<|end|>",
        ' to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{"city":"Paris"}<|call|>',
        "<|channel|>analysis<|message|>Easy.<|end|>",
        "<|channel|>final<|message|>21 °C.<|return|>",
    ]


def test_a_special_token_literal_drops_the_conversation():
    messages = [{"role": "user", "content": "print <|end|>"}, {"role": "assistant", "content": "ok"}]
    result = samples_for_conversation(messages, None, HarmonyTemplate(), chat_tokenizer("o200k_harmony"))
    assert result.samples == [] and result.dropped == {"special_token_literal": 1}
