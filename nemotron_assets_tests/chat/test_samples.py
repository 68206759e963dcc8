"""Conversations -> samples: the split per user turn for reasoning, drop reasons, input errors, worker processes.

A split sample's ids must equal the template's render of its prefix (transformers), and its mask transformers'
mask with every token before the last user turn's end cleared (found with transformers' own offsets).
"""

from datetime import datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from nemotron_assets.chat.chat_format import ChatFormatSpec, default_tokenizer_model, load_chat_format
from nemotron_assets.chat.samples import (
    ENDS_ON_USER_TURN,
    INVALID_UNICODE,
    NO_TRAINED_TOKENS,
    SPECIAL_TOKEN_LITERAL,
    PlannedSample,
    find_literal,
    plan_samples,
    samples_for_conversation,
    samples_for_conversations,
)
from nemotron_assets.chat.templates import JinjaChatTemplate, load_template
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.chat.render_in_processes import samples_in_processes
from nemotron_assets_tests.chat.render_reference import (
    FIXTURES,
    as_list,
    chat_tokenizer,
    conversations,
    fixture_template,
    hf_llama3,
    transformers_sample,
    transformers_text,
)
from nemotron_assets_tests.tokenize.builders import small_tokenizer

QWEN3_STYLE = fixture_template("qwen3_style_tagged.jinja")
LLAMA3 = fixture_template("llama3_tagged.jinja")
USER, REPLY = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}
THINKING = {"role": "assistant", "content": "a", "reasoning_content": "r"}


def expected_split_sample(prefix, tools, source: str, trained_from: int) -> tuple[list[int], list[int]]:
    """transformers' ids and mask of `prefix`, the mask cleared before the token holding the first character after
    the render of ``prefix[:trained_from]``."""
    ids, mask = transformers_sample(prefix, tools, source)
    if trained_from == 0:
        return ids, mask
    head = transformers_text(prefix[:trained_from], tools, source)
    encoding = hf_llama3()(transformers_text(prefix, tools, source), add_special_tokens=False)
    first = encoding.char_to_token(len(head))
    return ids, [0] * first + mask[first:]


# --- which samples --------------------------------------------------------------------------------------------------


def test_plans_by_hand():
    assert plan_samples([USER, REPLY, USER, REPLY]) == [PlannedSample(4, 0, None)]
    assert plan_samples([{"role": "system", "content": ""}, USER, THINKING, {"role": "tool", "content": "x"},
                         THINKING, USER, REPLY, USER]) == [
        PlannedSample(5, 2, 0), PlannedSample(7, 6, 1), PlannedSample(8, 8, 2)]
    assert plan_samples([{"role": "system", "content": ""}, THINKING]) == [PlannedSample(2, 0, None)]
    assert plan_samples([USER, {**REPLY, "reasoning_content": " \n"}]) == [PlannedSample(2, 0, None)]


@pytest.mark.parametrize("source", [QWEN3_STYLE, LLAMA3], ids=["qwen3_style", "llama3"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations(reasoning=True))
def test_split_samples_equal_transformers_restricted(source, conversation):
    messages, tools = conversation
    tokenizer = chat_tokenizer()
    assume(find_literal(messages, tools, tokenizer) is None)
    result = samples_for_conversation(messages, tools, JinjaChatTemplate(source, "t", tokenizer.template_tokens),
                                      tokenizer)
    plans = [plan for plan in plan_samples(messages)]
    assert len(result.samples) + sum(result.dropped.values()) == len(plans)
    samples = iter(result.samples)
    for plan in plans:
        prefix = messages[: plan.end]
        ids, mask = expected_split_sample(prefix, tools, source, plan.trained_from)
        if not any(mask):
            continue  # dropped as no_trained_tokens
        sample = next(samples)
        assert (sample.user_turn, sample.messages) == (plan.user_turn, plan.end)
        assert (as_list(sample.ids), as_list(sample.assistant_mask)) == (ids, mask)


def test_qwen3_style_split_trains_each_turns_reasoning_once():
    tokenizer = chat_tokenizer()
    messages = [USER, {**THINKING, "reasoning_content": "first"}, USER, {**THINKING, "reasoning_content": "second"}]
    template = JinjaChatTemplate(QWEN3_STYLE, "qwen3", tokenizer.template_tokens)
    samples = samples_for_conversation(messages, None, template, tokenizer).samples
    trained = [tokenizer.reference.decode(as_list(s.ids[s.assistant_mask == 1])) for s in samples]
    # "<|im_end|>" is text for Llama-3, and its last token "|>\n" also holds the newline after the span
    assert trained == ["<think>\nfirst\n</think>\n\na<|im_end|>\n", "<think>\nsecond\n</think>\n\na<|im_end|>\n"]
    assert "first" not in tokenizer.reference.decode(as_list(samples[1].ids))  # the template dropped it


# --- drops ----------------------------------------------------------------------------------------------------------

CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {"q": "x"}}}
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}


@pytest.mark.parametrize("messages, tools", [
    ([{"role": "user", "content": "say <|eot_id|>"}, REPLY], None),
    ([USER, {**REPLY, "reasoning_content": "<|begin_of_text|>"}], None),
    ([USER, {**REPLY, "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"q": "<|eot_id|>"}}}]}], None),
    ([USER, {**REPLY, "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"<|eot_id|>": 1}}}]}], None),
    ([USER, REPLY, {"role": "tool", "content": "x", "name": "<|reserved_special_token_3|>"}], None),
    ([USER, REPLY], [{**TOOL, "function": {**TOOL["function"], "description": "<|start_header_id|>"}}]),
], ids=["content", "reasoning", "argument_value", "argument_name", "tool_name", "tool_schema"])
def test_a_special_token_literal_anywhere_drops_the_conversation(messages, tools):
    result = samples_for_conversation(messages, tools, load_template(str(FIXTURES / "llama3_tagged.jinja")),
                                      chat_tokenizer())
    assert result.samples == [] and result.dropped == {SPECIAL_TOKEN_LITERAL: 1}
    assert "special token of llama3" in result.why[0]


def test_other_drops_are_counted_by_reason():
    tokenizer = chat_tokenizer()
    template = JinjaChatTemplate(LLAMA3, "llama3_tagged.jinja", tokenizer.template_tokens)
    batch = [
        ([USER, THINKING, USER], None),                    # turn 1 has no reply
        ([USER, REPLY, USER], None),                       # a whole conversation may end on a user turn
        ([USER, USER], None),                              # nothing to train
        ([USER, {**REPLY, "content": "bad \ud800"}], None),  # a lone surrogate is not UTF-8
        ([USER, REPLY], None),                             # fine
    ]
    results = samples_for_conversations(batch, template, tokenizer)
    assert [dict(r.dropped) for r in results] == [{ENDS_ON_USER_TURN: 1}, {}, {NO_TRAINED_TOKENS: 1},
                                                  {INVALID_UNICODE: 1}, {}]
    assert [len(r.samples) for r in results] == [1, 1, 0, 0, 1]


@pytest.mark.parametrize("messages, tools, field", [
    ([], None, "messages"),
    ("hello", None, "messages"),
    ([USER, "text"], None, "messages[1]"),
    ([{"role": "bot", "content": "x"}], None, "messages[0].role"),
    ([{"role": "user", "content": ["parts"]}], None, "messages[0].content"),
    ([USER, {**REPLY, "reasoning_content": 3}], None, "messages[1].reasoning_content"),
    ([USER, {**REPLY, "tool_calls": {"id": 1}}], None, "messages[1].tool_calls"),
    ([USER, {**REPLY, "tool_calls": [{"function": {}}]}], None, "messages[1].tool_calls[0].function.name"),
    ([USER, REPLY], [{"type": "function"}], "tools[0].function.name"),
    ([USER, REPLY], {"f": 1}, "tools"),
])
def test_a_conversation_that_is_not_canonical_is_an_input_error_naming_the_field(messages, tools, field):
    with pytest.raises(InputError) as caught:
        samples_for_conversation(messages, tools, load_template("chatml"), chat_tokenizer())
    assert caught.value.field == field


# --- determinism and worker processes -------------------------------------------------------------------------------


def as_bytes(results) -> list[tuple]:
    return [(dict(r.dropped), [(s.ids.tobytes(), s.assistant_mask.tobytes(), s.user_turn) for s in r.samples])
            for r in results]


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=conversations().flatmap(lambda c: conversations().map(lambda d: [c, d])))
def test_workers_give_what_one_process_gives_in_order(tmp_path_factory, batch):
    spec = ChatFormatSpec("chatml", small_tokenizer(tmp_path_factory.mktemp("tok")))
    batches = [batch * 3, batch, batch * 2]
    one = [as_bytes(results) for results in samples_in_processes(batches, spec, workers=1)]
    two = [as_bytes(results) for results in samples_in_processes(batches, spec, workers=2, ahead=1)]
    assert one == two and sum(len(r) for r in one) == 12
    chat_format = load_chat_format(spec)
    assert one[1] == as_bytes(samples_for_conversations(batch, chat_format.template, chat_format.tokenizer))


def test_errors_in_a_worker_reach_the_caller(tmp_path):
    spec = ChatFormatSpec("chatml", small_tokenizer(tmp_path))
    with pytest.raises(InputError, match="messages"):
        list(samples_in_processes([[([USER, REPLY], None)], [([], None)]], spec, workers=2))


def test_default_tokenizer_for_harmony_is_o200k_harmony():
    assert default_tokenizer_model("harmony", "llama3") == "o200k_harmony"
    assert default_tokenizer_model("chatml", "llama3") == "llama3"


def test_sample_arrays_are_int32_ids_and_uint8_masks():
    (sample,) = samples_for_conversation([USER, REPLY], None, load_template("chatml"), chat_tokenizer()).samples
    assert sample.ids.dtype == np.int32 and sample.assistant_mask.dtype == np.uint8


def test_every_chat_format_setting_changes_what_it_should(tmp_path):
    """reasoning_effort changes Harmony text (whose whole-conversation render keeps its reasoning); render_date
    what strftime_now prints; the tokenizer backend changes how ids are computed, never the ids."""
    conversation = [USER, {**THINKING, "reasoning_content": "think first"}]

    def text(spec: ChatFormatSpec) -> str:
        chat_format = load_chat_format(spec)
        return chat_format.template.render(conversation).text

    harmony = ChatFormatSpec("harmony", "o200k_harmony")
    assert "Reasoning: medium" in text(harmony)
    assert "Reasoning: high" in text(ChatFormatSpec("harmony", "o200k_harmony", reasoning_effort="high"))
    assert "think first" in text(harmony)

    dated = tmp_path / "dated.jinja"
    dated.write_text("{{ strftime_now('%Y-%m-%d') }}{% for m in messages %}{% generation %}{{ m.content }}"
                     "{% endgeneration %}{% endfor %}", encoding="utf-8")
    assert text(ChatFormatSpec(str(dated))).startswith("2026-01-01")
    assert text(ChatFormatSpec(str(dated), render_date=datetime(2030, 5, 6))).startswith("2030-05-06")

    fast = load_chat_format(ChatFormatSpec("chatml", tokenizer_backend="fastokens"))
    reference = load_chat_format(ChatFormatSpec("chatml", tokenizer_backend="reference"))
    assert (fast.tokenizer.backend, reference.tokenizer.backend) == ("fastokens", "hf-tokenizers")
    ours = [samples_for_conversation(conversation, None, f.template, f.tokenizer).samples[0] for f in (fast, reference)]
    assert as_bytes_of(ours[0]) == as_bytes_of(ours[1])


def as_bytes_of(sample) -> tuple[bytes, bytes]:
    return sample.ids.tobytes(), sample.assistant_mask.tobytes()
