"""Harmony chat SFT: text and ids equal openai-harmony's ``render_conversation_for_training`` with
``auto_drop_analysis=False`` of the sample's Harmony messages without the history's analysis (chat/harmony.py: the
trained turn keeps its reasoning, earlier turns lose theirs); the mask trains each assistant message of the trained
part after its role name through its terminator.

The expected mask is read off the library's own token stream: after each ``<|start|>`` comes the role-name token;
for ``assistant`` every token after it up to and including the next terminator is trained.
"""

from hypothesis import HealthCheck, assume, given, settings
from openai_harmony import Conversation, RenderConversationConfig

from nemotron_assets.chat.harmony import HarmonyTemplate, _body_length, harmony_messages
from nemotron_assets.chat.samples import (
    ENDS_ON_USER_TURN,
    find_literal,
    plan_samples,
    render_sample,
    samples_for_conversation,
    tokenize_sample,
)
from nemotron_assets_tests.chat.render_reference import (
    as_list,
    chat_tokenizer,
    conversations,
    harmony_encoding,
    to_library,
)

START, TERMINATORS = 200006, {200002, 200007, 200012}  # <|start|>; <|return|>, <|end|>, <|call|>


def library_ids(messages, tools, trained_from: int = 0, auto_drop_analysis: bool = False) -> list[int]:
    """openai-harmony's training render of our Harmony messages, the history's (messages before `trained_from`)
    analysis removed; ``auto_drop_analysis=True`` is the library's default config, for comparison."""
    converted = harmony_messages(messages, tools, "medium")
    first_trained = converted.body_start + _body_length(messages[:trained_from])
    kept = [m for i, m in enumerate(converted.messages) if i >= first_trained or m.channel != "analysis"]
    conversation = Conversation.from_messages([to_library(m) for m in kept])
    config = RenderConversationConfig(auto_drop_analysis=auto_drop_analysis)
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


def ours(messages, tools, backend: str = "auto", trained_from: int = 0):
    rendered = render_sample(messages, tools, HarmonyTemplate(), trained_from)
    ids, mask = tokenize_sample(rendered, chat_tokenizer("o200k_harmony", backend))
    return rendered.text, as_list(ids), as_list(mask)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_every_sample_equals_openai_harmony_without_the_historys_analysis(conversation):
    """Every sample of the conversation (the whole of it, or one per user turn with reasoning)."""
    messages, tools = conversation
    assume(find_literal(messages, tools, chat_tokenizer("o200k_harmony")) is None)
    for plan in plan_samples(messages):
        prefix = messages[: plan.end]
        text, ids, mask = ours(prefix, tools, trained_from=plan.trained_from)
        expected = library_ids(prefix, tools, plan.trained_from)
        users_before = sum(m["role"] == "user" for m in messages[: plan.trained_from])
        assert text == harmony_encoding().decode_utf8(expected)
        assert ids == expected
        assert mask == mask_from_token_stream(expected, users_before)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_tiktoken_reference_path_gives_the_same(conversation):
    messages, tools = conversation
    assume(find_literal(messages, tools, chat_tokenizer("o200k_harmony")) is None)
    assert ours(messages, tools, backend="reference") == ours(messages, tools)


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


def test_a_reasoning_conversation_gives_one_sample_per_user_turn():
    """Turn 0 = messages[:5], turn 1 = messages[:7] trained only after its second user message; turn 2 has no
    reply. Each sample's ids are the library's render of its messages without the history's analysis."""
    result = samples_for_conversation(REASONING, TOOLS, HarmonyTemplate(), chat_tokenizer("o200k_harmony"))
    assert [(s.user_turn, s.messages) for s in result.samples] == [(0, 5), (1, 7)]
    assert result.dropped == {ENDS_ON_USER_TURN: 1}
    for sample, trained_from, users_before in zip(result.samples, (2, 6), (1, 2)):
        expected = library_ids(REASONING[: sample.messages], TOOLS, trained_from)
        assert as_list(sample.ids) == expected
        assert as_list(sample.assistant_mask) == mask_from_token_stream(expected, users_before)


def test_the_trained_turn_keeps_its_reasoning_and_the_history_loses_its_own():
    """By hand. The second turn's sample shows the first turn without its reasoning ("Need the tool.", "Easy.")
    but with its answer, and keeps its own reasoning ("No tool for that."). openai-harmony's default config would
    drop a one-turn sample's reasoning altogether: that is what this design avoids."""
    second, _, _ = ours(REASONING[:7], TOOLS, trained_from=6)
    assert "Need the tool." not in second and "Easy." not in second and "21 °C." in second
    assert "<|channel|>analysis<|message|>No tool for that.<|end|>" in second
    first, _, _ = ours(REASONING[:5], TOOLS, trained_from=2)
    assert "<|channel|>analysis<|message|>Need the tool.<|end|>" in first and "Easy." in first
    library_default = harmony_encoding().decode_utf8(library_ids(REASONING[:5], TOOLS, auto_drop_analysis=True))
    assert "Need the tool." not in library_default and "Easy." not in library_default


def test_trained_text_by_hand():
    rendered = render_sample(REASONING[:5], TOOLS, HarmonyTemplate())
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


def test_masked_text_is_every_message_but_the_assistants_whole():
    rendered = render_sample(REASONING[:7], TOOLS, HarmonyTemplate(), trained_from=6)
    masked = [rendered.text[start:end] for start, end in rendered.masked_spans]
    assert [block.split("<|message|>")[0] for block in masked] == [
        "<|start|>system", "<|start|>developer", "<|start|>user",
        "<|start|>functions.get_weather to=assistant<|channel|>commentary", "<|start|>user"]
    assert masked[2] == "<|start|>user<|message|>Weather in Paris?<|end|>"
