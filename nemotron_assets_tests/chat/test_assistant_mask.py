"""Spans -> token mask: transformers' rule, quirks included, checked against transformers and by hand."""

import pytest

from nemotron_assets.chat.masks import assistant_mask
from nemotron_assets.chat.samples import render_sample, tokenize_sample
from nemotron_assets.chat.templates import JinjaChatTemplate
from nemotron_assets_tests.chat.render_reference import as_list, chat_tokenizer, transformers_sample

# Templates whose generation spans land on the awkward places of the rule.
QUIRKS = {
    # the last trained character is an emoji split over several byte-level tokens: only the first is marked
    "ends_inside_a_split_character": "{% for m in messages %}[{{ m.role }}]{% generation %}{{ m.content }}"
                                     "{% endgeneration %}{% endfor %}",
    # an empty block: its "last character" is the one before it, so it marks a token only if one token holds both
    "empty_blocks": "{% for m in messages %}{{ m.content }}{% generation %}{% endgeneration %}|{% endfor %}",
    # the span's last character is in token 0: transformers reads `if end_token` as false and marks to the end
    "last_token_is_token_0": "{% generation %}Z{% endgeneration %}{% for m in messages %}{{ m.content }}{% endfor %}",
    # a block after the end of the text: its start is in no token, so the loop stops there
    "block_at_the_end": "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
                        "{% generation %}{% endgeneration %}",
}
MESSAGES = [{"role": "user", "content": "hi 👩‍👩‍👧"}, {"role": "assistant", "content": "ok 😀"},
            {"role": "assistant", "content": "e\u0301🇫🇷"}]


@pytest.mark.parametrize("name", sorted(QUIRKS))
@pytest.mark.parametrize("backend", ["fastokens", "reference"])
def test_quirks_match_transformers(name, backend):
    tokenizer = chat_tokenizer("llama3", backend)
    rendered = render_sample(MESSAGES, None, JinjaChatTemplate(QUIRKS[name], name))
    ids, mask = tokenize_sample(rendered, tokenizer)
    assert (as_list(ids), as_list(mask)) == transformers_sample(MESSAGES, None, QUIRKS[name])


def test_a_split_character_marks_only_its_first_token():
    """By hand: "😀" is 4 UTF-8 bytes that Llama-3 writes as two tokens; ending a span on it marks the first."""
    tokenizer = chat_tokenizer()
    text = "a😀"
    (tokens,) = tokenizer.encode_batch([text])
    assert len(tokens.ids) == 3  # "a", then the emoji's bytes in two tokens
    assert tokens.locator.tokens_at([0, 1, 2, -1]) == [0, 1, None, None]
    assert as_list(assistant_mask(3, [(1, 2)], tokens.locator)) == [0, 1, 0]
    assert as_list(assistant_mask(3, [(0, 2)], tokens.locator)) == [1, 1, 0]


def test_the_rule_by_hand():
    """Three tokens: a plain span, a span ending in token 0 (marks to the end), and a stop."""
    tokenizer = chat_tokenizer()
    (tokens,) = tokenizer.encode_batch(["a b c"])  # "a", " b", " c": characters 0 | 1-2 | 3-4
    assert len(tokens.ids) == 3
    assert as_list(assistant_mask(3, [(1, 3)], tokens.locator)) == [0, 1, 0]
    assert as_list(assistant_mask(3, [(0, 1)], tokens.locator)) == [1, 1, 1]  # last token 0 -> to the end
    assert as_list(assistant_mask(3, [(5, 5), (1, 3)], tokens.locator)) == [0, 0, 0]  # start outside: stop
    assert as_list(assistant_mask(3, [(3, 5), (5, 5)], tokens.locator)) == [0, 0, 1]
