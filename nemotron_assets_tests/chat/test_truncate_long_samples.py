"""Truncating an over-long sample keeps its head and still ends on the template's end-of-turn tokens."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemotron_assets.chat.chat_format import ChatFormatSpec, load_chat_format
from nemotron_assets.chat.masks import truncate_sample
from nemotron_assets.chat.samples import samples_for_conversation
from nemotron_assets_tests.chat.render_reference import FIXTURES, as_list

EOT = [9, 8]


def arrays(ids: list[int], mask: list[int]) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(ids, dtype=np.int32), np.asarray(mask, dtype=np.uint8)


def test_short_samples_are_unchanged():
    ids, mask = arrays([1, 2, 3], [0, 1, 1])
    out_ids, out_mask = truncate_sample(ids, mask, 3, EOT)
    assert out_ids is ids and out_mask is mask


def test_the_head_is_kept_and_the_end_of_turn_appended_untrained():
    """By hand: 7 tokens cut to 5 = the first 3 + [9, 8], the appended end-of-turn not trained."""
    ids, mask = arrays([1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 1, 1, 1, 1])
    out_ids, out_mask = truncate_sample(ids, mask, 5, EOT)
    assert (as_list(out_ids), as_list(out_mask)) == ([1, 2, 3, 9, 8], [0, 1, 1, 0, 0])
    assert out_ids.dtype == np.int32 and out_mask.dtype == np.uint8


def test_a_cut_just_after_a_turn_keeps_that_turn_as_it_was():
    ids, mask = arrays([1, 2, 9, 8, 3, 4, 9, 8], [0, 1, 1, 1, 0, 1, 1, 1])
    out_ids, out_mask = truncate_sample(ids, mask, 4, EOT)
    assert (as_list(out_ids), as_list(out_mask)) == ([1, 2, 9, 8], [0, 1, 1, 1])


def test_bad_arguments_are_refused():
    ids, mask = arrays([1, 2, 3, 4], [0, 1, 1, 1])
    with pytest.raises(ValueError, match="no room"):
        truncate_sample(ids, mask, 2, EOT)
    with pytest.raises(ValueError, match="end-of-turn token ids"):
        truncate_sample(ids, mask, 3, [])
    with pytest.raises(ValueError, match="differ in length"):
        truncate_sample(ids, mask[:2], 3, EOT)


@given(tokens=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 1)), min_size=1, max_size=60),
       max_tokens=st.integers(3, 70), eot=st.lists(st.integers(0, 20), min_size=1, max_size=2))
def test_truncation_properties(tokens, max_tokens, eot):
    ids, mask = arrays([t for t, _ in tokens], [m for _, m in tokens])
    out_ids, out_mask = truncate_sample(ids, mask, max_tokens, eot)
    assert len(out_ids) == len(out_mask) == min(len(ids), max_tokens)
    if len(ids) > max_tokens:
        assert as_list(out_ids[-len(eot):]) == eot
        head = max_tokens - len(eot)
        assert as_list(out_ids[:head]) == as_list(ids[:head]) and as_list(out_mask[:head]) == as_list(mask[:head])
        assert not out_mask[head:].any() or as_list(ids[head:max_tokens]) == eot


@pytest.mark.parametrize("template, end_of_turn", [
    (str(FIXTURES / "llama3_tagged.jinja"), "<|eot_id|>"),
    ("chatml", "<|im_end|>"),
    ("harmony", "<|end|>"),
])
def test_the_chat_format_gives_its_end_of_turn_ids(template, end_of_turn):
    tokenizer_model = "o200k_harmony" if template == "harmony" else "llama3"
    chat_format = load_chat_format(ChatFormatSpec(template, tokenizer_model))
    assert chat_format.end_of_turn_ids() == chat_format.tokenizer.token_ids(end_of_turn)
    conversation = [{"role": "user", "content": "Count."}, {"role": "assistant", "content": " one" * 50}]
    (sample,) = samples_for_conversation(conversation, None, chat_format.template, chat_format.tokenizer).samples
    ids, mask = chat_format.truncate(sample.ids, sample.assistant_mask, 30)
    assert len(ids) == 30 and as_list(ids[-len(chat_format.end_of_turn_ids()):]) == chat_format.end_of_turn_ids()
    assert as_list(ids[:20]) == as_list(sample.ids[:20])
