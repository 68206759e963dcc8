"""Templates without generation tags: trained spans by prefix rendering, and a clear error when that cannot work."""

import pytest

from nemotron_assets.chat.samples import samples_for_conversation
from nemotron_assets.chat.templates import (
    CHATML,
    JinjaChatTemplate,
    TemplateNotPrefixStable,
    end_of_turn_text,
    load_template,
)
from nemotron_assets_tests.chat.render_reference import FIXTURES, chat_tokenizer, transformers_text

NO_TAGS = str(FIXTURES / "chatml_no_tags.jinja")
TWO_TURNS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"},
             {"role": "assistant", "content": "Ciao"}]
WITH_REASONING = [{"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hello", "reasoning_content": "greet back"},
                  {"role": "user", "content": "Bye"},
                  {"role": "assistant", "content": "Ciao", "reasoning_content": "say bye"}]


def trained_texts(rendered) -> list[str]:
    return [rendered.text[start:end] for start, end in rendered.trained_spans]


def test_each_reply_is_what_it_adds_after_the_generation_prompt():
    """By hand: a reply's trained text is everything it adds after ``<|im_start|>assistant\\n``."""
    rendered = load_template(NO_TAGS).render(TWO_TURNS)
    assert rendered.text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
                             "<|im_start|>assistant\nCiao<|im_end|>\n")
    assert rendered.text == transformers_text(TWO_TURNS, None, (FIXTURES / "chatml_no_tags.jinja").read_text())
    assert trained_texts(rendered) == ["Hello<|im_end|>\n", "Ciao<|im_end|>\n"]


def test_prefix_spans_cover_the_tagged_spans_of_the_same_format():
    """The built-in ChatML marks the same replies with tags, without the newline after <|im_end|>."""
    tagged = JinjaChatTemplate(CHATML, "chatml").render(TWO_TURNS)
    untagged = load_template(NO_TAGS).render(TWO_TURNS)
    assert tagged.text == untagged.text
    assert [t + "\n" for t in trained_texts(tagged)] == trained_texts(untagged)


def test_trained_from_leaves_earlier_replies_untrained():
    rendered = load_template(NO_TAGS).render(TWO_TURNS, trained_from=4)
    assert trained_texts(rendered) == ["Ciao<|im_end|>\n"]


def test_a_template_that_rewrites_earlier_turns_fails_naming_the_template():
    path = str(FIXTURES / "drops_old_reasoning.jinja")
    with pytest.raises(TemplateNotPrefixStable) as caught:
        load_template(path).render(WITH_REASONING)
    error = caught.value
    assert error.path == path and error.field == "sft.chat_template"
    assert "not prefix-stable" in str(error) and "<think>" in str(error) and "{% generation %}" in str(error)


def test_splitting_per_user_turn_makes_such_a_template_usable():
    """Split per user turn, each sample's earlier replies are before its last user turn in every prefix render too,
    so the same template that fails on the whole conversation gives one sample per turn, each trained on its last
    reply with that reply's reasoning."""
    tokenizer = chat_tokenizer()
    template = load_template(str(FIXTURES / "drops_old_reasoning.jinja"))
    result = samples_for_conversation(WITH_REASONING, None, template, tokenizer)
    assert [sample.user_turn for sample in result.samples] == [0, 1] and not result.dropped
    trained = [tokenizer.reference.decode([int(i) for i in s.ids[s.assistant_mask == 1]]) for s in result.samples]
    assert trained == ["<think>\ngreet back\n</think>\n\nHello<|im_end|>\n",
                       "<think>\nsay bye\n</think>\n\nCiao<|im_end|>\n"]


def test_splitting_a_conversation_needs_a_template_stable_at_the_user_turn():
    """A tagged template is rendered once per sample, but restricting a split sample to the messages after its last
    user turn needs the render of the messages up to that turn to be the start of the sample's render."""
    path = str(FIXTURES / "counts_messages_tagged.jinja")
    template = load_template(path)
    assert template.render(TWO_TURNS).trained_spans  # a whole conversation is fine
    with pytest.raises(TemplateNotPrefixStable, match="cannot be restricted to the messages after its last user"):
        samples_for_conversation(WITH_REASONING, None, template, chat_tokenizer())


@pytest.mark.parametrize("template, expected", [
    (str(FIXTURES / "llama3_tagged.jinja"), "<|eot_id|>"),
    ("chatml", "<|im_end|>"),
    (NO_TAGS, "<|im_end|>\n"),
])
def test_end_of_turn_is_what_follows_a_reply_in_its_trained_text(template, expected):
    assert end_of_turn_text(load_template(template, {"bos_token": "<|begin_of_text|>"})) == expected
