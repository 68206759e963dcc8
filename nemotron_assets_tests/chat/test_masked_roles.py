"""Where system/developer/user/tool text sits in a rendered sample (chat/masked_roles.py), the spans the packed
shards' ``no_trained_token_on_masked_role`` check holds the mask against.

On any conversation the located spans hold exactly that message's text and none of their tokens is trained (the
templates under test mask every non-assistant turn); by hand: a tool result that echoes its call's argument is
found in the result, and only tokens wholly inside a span count."""

import numpy as np
from hypothesis import HealthCheck, assume, given, settings

from nemotron_assets.chat.harmony import HarmonyTemplate
from nemotron_assets.chat.masked_roles import MASKED_ROLES, inner_token_spans, masked_content_spans
from nemotron_assets.chat.samples import find_literal, render_sample, samples_for_conversation
from nemotron_assets.chat.templates import JinjaChatTemplate, load_template
from nemotron_assets_tests.chat.render_reference import chat_tokenizer, conversations, fixture_template

LLAMA3 = JinjaChatTemplate(fixture_template("llama3_tagged.jinja"), "llama3_tagged.jinja",
                           chat_tokenizer().template_tokens)


def trained_on_masked(sample) -> int:
    spans = sample.masked_spans.reshape(-1, 2)
    return sum(int(sample.assistant_mask[a:b].sum()) for a, b in spans)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_masked_text_is_found_and_never_trained(conversation):
    messages, tools = conversation
    tokenizer = chat_tokenizer()
    assume(find_literal(messages, tools, tokenizer) is None)
    for template in (LLAMA3, load_template("chatml", tokenizer.template_tokens)):
        text = template.render(messages, tools).text
        contents = [m["content"] for m in messages if m["role"] in MASKED_ROLES]
        for start, end in masked_content_spans(messages, text):
            assert text[start:end] in contents or text[start:end] in [c.strip() for c in contents]
        for sample in samples_for_conversation(messages, tools, template, tokenizer).samples:
            assert trained_on_masked(sample) == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=conversations())
def test_harmony_masks_every_non_assistant_message_whole(conversation):
    messages, tools = conversation
    tokenizer = chat_tokenizer("o200k_harmony")
    assume(find_literal(messages, tools, tokenizer) is None)
    rendered = render_sample(messages, tools, HarmonyTemplate())
    blocks = [rendered.text[a:b] for a, b in rendered.masked_spans]
    assert all(block.startswith("<|start|>") and not block.startswith("<|start|>assistant") for block in blocks)
    for sample in samples_for_conversation(messages, tools, HarmonyTemplate(), tokenizer).samples:
        assert trained_on_masked(sample) == 0
        assert len(sample.masked_spans) >= 2  # the system message at least


def test_short_tool_content_is_not_found_inside_the_trained_end_of_turn():
    """By hand (a case hypothesis found): a tool result ``"|"`` also occurs inside ChatML's ``<|im_end|>``, which
    closes the trained assistant turn before it and which the Llama-3 tokenizer splits into pieces; the search
    must look for it after that marker, or the check reports a trained token on the tool's text."""
    messages = [{"role": "user", "content": ""},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": None, "type": "function", "function": {"name": "get_weather", "arguments": {}}}]},
                {"role": "tool", "content": "|", "tool_call_id": None, "name": None},
                {"role": "assistant", "content": ""}]
    chatml = load_template("chatml", chat_tokenizer().template_tokens)
    for sample in samples_for_conversation(messages, None, chatml, chat_tokenizer()).samples:
        assert trained_on_masked(sample) == 0


def test_an_argument_the_template_escapes_does_not_move_the_search_past_the_tool_results():
    """By hand (a case hypothesis found): ChatML writes the argument ``"\x1f"`` as ``\u001f``; searched raw, it
    was "found" in the last reply, and the tool result ``"|"`` after that inside the trained ``<|im_end|>``. Now it
    is found before the last reply (at the latest in the tool's own turn; inside its untrained ``<|im_start|>``
    markup is allowed, as the module says)."""
    messages = [{"role": "user", "content": ""},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": None, "type": "function", "function": {"name": "get_weather",
                                                                  "arguments": {"q": "\x1f", "n": None}}}]},
                {"role": "tool", "content": "|", "tool_call_id": None, "name": None},
                {"role": "assistant", "content": "\x1f"}]
    chatml = load_template("chatml", chat_tokenizer().template_tokens)
    text = chatml.render(messages).text
    spans = masked_content_spans(messages, text, "<|im_end|>")
    assert [text[a:b] for a, b in spans] == ["|"] and spans[0][1] <= text.index("tool\n|") + len("tool\n|")
    for sample in samples_for_conversation(messages, None, chatml, chat_tokenizer()).samples:
        assert trained_on_masked(sample) == 0


def test_a_tool_result_echoing_its_argument_is_found_in_the_result():
    """By hand: the result "Paris" also appears in the call's arguments, earlier in the text."""
    messages = [{"role": "user", "content": "Where?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "Paris", "tool_call_id": "c1", "name": "echo"},
                {"role": "assistant", "content": "It is Paris."}]
    text = LLAMA3.render_text(messages)
    spans = masked_content_spans(messages, text)
    call = text.index('"Paris"')
    assert [text[a:b] for a, b in spans] == ["Where?", "Paris"]
    assert spans[1][0] > call + len('"Paris"')  # the result, not the argument
    (sample,) = samples_for_conversation(messages, None, LLAMA3, chat_tokenizer()).samples
    assert trained_on_masked(sample) == 0


def test_trimmed_content_is_found_where_the_template_wrote_it_not_where_a_reply_quotes_it():
    """By hand (found in bench/bench_sft_e2e.py's real-text conversations): the template trims the user prompt
    ``"    Addresses scanned: -"``, and the trained reasoning after it quotes the prompt untrimmed. The untrimmed text
    first occurs inside the reply; the message is the earlier, trimmed place."""
    prompt = "    Addresses scanned: -"
    messages = [{"role": "user", "content": prompt},
                {"role": "assistant", "reasoning_content": f"The user asks about: {prompt}", "content": "Datasheet."}]
    text = LLAMA3.render_text(messages)
    (span,) = masked_content_spans(messages, text)
    assert text[span[0]:span[1]] == prompt.strip()
    assert span[1] < text.index("The user asks about")
    (sample,) = samples_for_conversation(messages, None, LLAMA3, chat_tokenizer()).samples
    assert trained_on_masked(sample) == 0


def test_only_tokens_wholly_inside_a_span_count():
    """By hand, tokens t0 [0,3) t1 [3,6) t2 [6,9): the span [2, 7) holds only t1 wholly; [3, 6) is t1; [4, 5) holds
    no whole token; a probe outside the text is None."""
    def found(char: int) -> int | None:
        return None if char < 0 or char >= 9 else char // 3

    def spans(start: int, end: int) -> list[tuple[int, int]]:
        return inner_token_spans([found(c) for c in (start - 1, start, end - 1, end)], 3)

    assert spans(2, 7) == [(1, 2)]
    assert spans(3, 6) == [(1, 2)]
    assert spans(4, 5) == []
    assert spans(0, 9) == [(0, 3)]


def test_masked_spans_travel_through_worker_processes():
    """The flat spans come back from a worker exactly as computed in this process."""
    from nemotron_assets.chat.chat_format import ChatFormatSpec
    from nemotron_assets_tests.chat.render_in_processes import samples_in_processes

    conversation = ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": "Hello."}], None)
    spec = ChatFormatSpec("chatml")
    (here,), = samples_in_processes([[conversation]], spec, workers=1)
    (there,), = samples_in_processes([[conversation]], spec, workers=2)
    assert np.array_equal(here.samples[0].masked_spans, there.samples[0].masked_spans)
    assert len(here.samples[0].masked_spans) == 4
