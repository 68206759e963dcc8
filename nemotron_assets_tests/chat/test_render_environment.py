"""The Jinja environment and variables a template gets are transformers' (5.23), checked against transformers itself.

`environment.jinja` uses tojson with every option, strftime_now, dict, namespace, break/continue, raise_exception,
the special-token variables, whitespace control, dict methods through attribute syntax (`message.get`, `.keys()`,
`.items()`) and a generation block inside a macro. transformers reads the wall
clock in strftime_now; the tests freeze its clock at our fixed `RENDER_DATE` to compare.
"""

from datetime import datetime

import pytest

from nemotron_assets.chat.samples import TEMPLATE_ERROR, render_sample, samples_for_conversation, tokenize_sample
from nemotron_assets.chat.templates import (
    RENDER_DATE,
    JinjaChatTemplate,
    TemplateRenderError,
    load_template,
    prepare_messages,
)
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.chat.render_reference import (
    FIXTURES,
    TOOLS,
    as_list,
    chat_tokenizer,
    fixture_template,
    transformers_sample,
    transformers_text,
)

ENVIRONMENT = fixture_template("environment.jinja")


@pytest.fixture
def frozen_transformers_clock(monkeypatch):
    """transformers' strftime_now calls ``datetime.now()`` of its module: make it our fixed date."""
    import transformers.utils.chat_template_utils as chat_template_utils

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return RENDER_DATE

    monkeypatch.setattr(chat_template_utils, "datetime", Frozen)


def ours(source: str, messages, tools=None, now: datetime = RENDER_DATE):
    tokenizer = chat_tokenizer()
    template = JinjaChatTemplate(source, "test.jinja", tokenizer.template_tokens, now)
    rendered = render_sample(messages, tools, template)
    ids, mask = tokenize_sample(rendered, tokenizer)
    return rendered, as_list(ids), as_list(mask)


CONVERSATIONS = {
    "two_turns": [{"role": "system", "content": "S"}, {"role": "assistant", "content": "macro reply"},
                  {"role": "user", "content": "Q \u00e9 ", "name": None},
                  {"role": "assistant", "content": "A", "reasoning_content": "hmm",
                   "tool_calls": [{"id": None, "type": "function",
                                   "function": {"name": "search", "arguments": {"q": "<b>&'x'</b>", "n": 1}}}]},
                  {"role": "tool", "content": "[]", "tool_call_id": None, "name": "search"},
                  {"role": "system", "content": "skipped by continue"},
                  {"role": "assistant", "content": "done"}],
    "break_stops_the_loop": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                             {"role": "stop", "content": ""}, {"role": "assistant", "content": "never"}],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("tools", [None, TOOLS], ids=["no_tools", "tools"])
def test_environment_features_render_as_in_transformers(frozen_transformers_clock, name, tools):
    rendered, ids, mask = ours(ENVIRONMENT, CONVERSATIONS[name], tools)
    assert rendered.text == transformers_text(CONVERSATIONS[name], tools, ENVIRONMENT)
    assert (ids, mask) == transformers_sample(CONVERSATIONS[name], tools, ENVIRONMENT)


def test_strftime_now_reads_the_given_date_not_the_clock():
    messages = CONVERSATIONS["two_turns"]
    first, _, _ = ours(ENVIRONMENT, messages)
    assert "Date: 01 Jan 2026" in first.text
    assert ours(ENVIRONMENT, messages)[0] == first
    assert "Date: 05 Mar 2027" in ours(ENVIRONMENT, messages, now=datetime(2027, 3, 5))[0].text


def test_generation_in_a_macro_is_placed_where_transformers_places_it(frozen_transformers_clock):
    """Jinja buffers a macro's output, so when the block inside fires, the macro's "(reply) " has not been yielded
    yet: the span starts at the macro's start, 8 characters early, with the reply's length. That is transformers'
    span (the parity test above checks the mask), not the reply's true position."""
    rendered, _, _ = ours(ENVIRONMENT, CONVERSATIONS["two_turns"])
    start, end = rendered.trained_spans[0]
    assert rendered.text[start:end] == "(reply) macro reply<|end_o"
    assert end - start == len("macro reply<|end_of_text|>")


def test_messages_reach_the_template_as_transformers_prepares_them():
    """None values are dropped (top level only) and reasoning is aliased under reasoning_content and thinking."""
    source = "{{ messages | tojson }}"
    messages = [{"role": "user", "content": "a", "name": None},
                {"role": "assistant", "content": "b", "reasoning_content": "r1", "tool_calls": None},
                {"role": "assistant", "content": "c", "reasoning": "r2"},
                {"role": "assistant", "content": "d", "thinking": "r3", "reasoning_content": None},
                {"role": "tool", "content": "e", "tool_call_id": None, "extra": {"keep": None}}]
    assert JinjaChatTemplate(source, "dump.jinja").render_text(messages) == transformers_text(messages, None, source)
    assert prepare_messages(messages)[1] == {"thinking": "r1", "role": "assistant", "content": "b",
                                             "reasoning_content": "r1"}
    assert messages[0] == {"role": "user", "content": "a", "name": None}  # the caller's messages are untouched


def test_raise_exception_refuses_the_conversation_with_the_template_name():
    template = JinjaChatTemplate(ENVIRONMENT, "environment.jinja", chat_tokenizer().template_tokens)
    with pytest.raises(TemplateRenderError, match="environment.jinja.*role boom is not allowed"):
        template.render([{"role": "user", "content": "a"}, {"role": "boom", "content": ""}])


def test_a_refused_conversation_is_dropped_and_counted():
    source = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system') }}{% endif %}" \
             "{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    template = JinjaChatTemplate(source, "no_system.jinja")
    result = samples_for_conversation([{"role": "system", "content": "x"}, {"role": "user", "content": "y"},
                                       {"role": "assistant", "content": "z"}], None, template, chat_tokenizer())
    assert result.samples == [] and result.dropped == {TEMPLATE_ERROR: 1}
    assert "no_system.jinja" in result.why[0] and "no system" in result.why[0]


@pytest.mark.parametrize("source, error", [
    ("{% set ns = namespace(_secret=1) %}", "_secret"),
    ("{% set ns = namespace(a=1) %}{% set ns._b = 2 %}", "_b"),
    ("{{ messages.append(1) }}", "append"),
    ("{{ dict.__class__.__subclasses__() }}", "__class__"),
])
def test_the_sandbox_refuses_what_transformers_refuses(source, error):
    template = JinjaChatTemplate(source, "escape.jinja")
    with pytest.raises(TemplateRenderError, match=error):
        template.render([{"role": "user", "content": "a"}])
    with pytest.raises(Exception, match=error):  # transformers refuses it too
        transformers_text([{"role": "user", "content": "a"}], None, source)


def test_a_syntax_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "broken.jinja"
    path.write_text("line one\n{% for m in messages %}\n{{ m.content }\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_template(str(path))
    assert caught.value.path == str(path) and caught.value.line == 3 and caught.value.field == "sft.chat_template"


def test_loading_names_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(InputError, match="harmony, chatml or a path to a .jinja file"):
        load_template("llama3")
    assert load_template(str(FIXTURES / "llama3_tagged.jinja")).has_generation_tags
    assert load_template("chatml").has_generation_tags
    assert not load_template(str(FIXTURES / "chatml_no_tags.jinja")).has_generation_tags
