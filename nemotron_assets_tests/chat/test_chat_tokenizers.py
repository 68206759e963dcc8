"""Byte offsets (the fast path's char -> token map) equal Hugging Face ``tokenizers`` offsets, and the tokenizer
paths choose and check themselves as documented."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from nemotron_assets.chat import tokenizers as chat_tokenizers
from nemotron_assets.chat.tokenizers import HFChatTokenizer, TokenLiterals, byte_level_lengths
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.loading import TokenizerFiles, locate_tokenizer
from nemotron_assets_tests.chat.render_reference import PIECES, as_list, chat_tokenizer

TEXTS = st.lists(PIECES, max_size=20).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(TEXTS, min_size=1, max_size=4))
def test_byte_offsets_equal_hf_offsets(texts):
    tokenizer = chat_tokenizer()
    encodings = tokenizer.reference.encode_batch(texts, add_special_tokens=False)
    for text, ours, reference in zip(texts, tokenizer.encode_batch(texts), encodings):
        assert as_list(ours.ids) == reference.ids
        assert ours.locator.char_offsets() == [tuple(offset) for offset in reference.offsets]
        chars = list(range(-1, len(text) + 2))
        assert ours.locator.tokens_at(chars) == [reference.char_to_token(c) if c >= 0 else None for c in chars]


# --- tokenizers built here from a tiny corpus (deterministic training) ----------------------------------------------

CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, hello tokenizers", "numbers 12345 café"] * 5


def files_for(tokenizer: Tokenizer, folder) -> TokenizerFiles:
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return TokenizerFiles(str(path), path, "</s>", "<s>", None)


def byte_level_bpe(normalizer=None) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def word_piece() -> Tokenizer:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=200, special_tokens=["[UNK]", "<s>",
                                                                    "</s>"], show_progress=False))
    return tokenizer


def test_a_byte_level_bpe_gets_the_fast_path(tmp_path, monkeypatch):
    monkeypatch.setattr(chat_tokenizers, "FAST_PATH_AFTER_CHARS", 1)  # auto parses fastokens at its first text
    tokenizer = HFChatTokenizer(files_for(byte_level_bpe(), tmp_path))
    tokenizer.encode_batch(["hello"])
    assert tokenizer.backend == "fastokens", tokenizer.backend_reason
    assert tokenizer.template_tokens == {"bos_token": "<s>", "eos_token": "</s>"}


def test_auto_never_parses_fastokens_from_a_file_changed_after_the_reference_was_loaded(tmp_path, monkeypatch):
    """``auto`` parses fastokens late (`FAST_PATH_AFTER_CHARS`): from the same file, or not at all."""
    monkeypatch.setattr(chat_tokenizers, "FAST_PATH_AFTER_CHARS", 1)
    files = files_for(byte_level_bpe(), tmp_path)
    tokenizer = HFChatTokenizer(files)
    loaded = tokenizer.reference.encode("hello world", add_special_tokens=False).ids
    word_piece().save(str(files.tokenizer_json))  # another tokenizer in its place
    (tokens,) = tokenizer.encode_batch(["hello world"])
    assert tokenizer.backend == "hf-tokenizers"
    assert tokenizer.backend_reason == f"{files.tokenizer_json} changed after it was loaded; using hf-tokenizers"
    assert as_list(tokens.ids) == loaded


def test_a_normalizer_that_changes_text_keeps_the_reference(tmp_path, monkeypatch):
    """NFC turns "e\\u0301" into "é": the tokens' bytes no longer spell the text, so offsets cannot come from ids."""
    monkeypatch.setattr(chat_tokenizers, "FAST_PATH_AFTER_CHARS", 1)  # auto parses fastokens at its first text
    tokenizer = HFChatTokenizer(files_for(byte_level_bpe(normalizers.NFC()), tmp_path))
    tokenizer.encode_batch(["hello"])
    assert tokenizer.backend == "hf-tokenizers" and "probe text" in tokenizer.backend_reason
    with pytest.raises(InputError, match="fastokens cannot be used"):
        HFChatTokenizer(files_for(byte_level_bpe(normalizers.NFC()), tmp_path), backend="fastokens")


def test_a_tokenizer_that_is_not_byte_level_keeps_the_reference(tmp_path):
    raw = word_piece()
    assert byte_level_lengths(raw) is None
    tokenizer = HFChatTokenizer(files_for(raw, tmp_path))
    assert tokenizer.backend == "hf-tokenizers" and "not a byte-level BPE" in tokenizer.backend_reason
    (tokens,) = tokenizer.encode_batch(["hello world"])
    assert as_list(tokens.ids) == raw.encode("hello world", add_special_tokens=False).ids


def test_a_fast_path_that_disagrees_on_a_batch_is_dropped_for_good(tmp_path):
    """A real fastokens tokenizer of another vocabulary stands in for a fast path gone wrong: the first text of the
    next batch disagrees, so the whole batch and everything after it goes through the reference."""
    import fastokens

    tokenizer = HFChatTokenizer(locate_tokenizer("llama3"), backend="fastokens")
    other = tmp_path / "other.json"
    byte_level_bpe().save(str(other))
    tokenizer.fast = fastokens.Tokenizer.from_file(str(other))
    texts = ["the quick brown fox", "日本語 😀"]
    results = tokenizer.encode_batch(texts)
    assert tokenizer.backend == "hf-tokenizers" and "real text" in tokenizer.backend_reason
    assert [as_list(r.ids) for r in results] == [e.ids for e in tokenizer.reference.encode_batch(texts,
                                                                                               add_special_tokens=False)]


def test_a_text_whose_bytes_do_not_add_up_goes_through_the_reference(tmp_path):
    """A byte-length table that is wrong for one token stands for a token the table cannot describe: texts holding
    it are tokenized by the reference, the others by the fast path, and they are counted."""
    tokenizer = HFChatTokenizer(locate_tokenizer("llama3"), backend="fastokens")
    hello = tokenizer.reference.token_to_id("hello")
    tokenizer.byte_lengths = tokenizer.byte_lengths.copy()
    tokenizer.byte_lengths[hello] += 1
    texts = ["hello", "bonjour", "hello hello"]
    results = tokenizer.encode_batch(texts)  # "bonjour", the first text it can map, is the batch's cross-check
    assert tokenizer.texts_through_reference == 2 and tokenizer.backend == "fastokens"
    assert [type(r.locator).__name__ for r in results] == ["EncodingLocator", "ByteOffsets", "EncodingLocator"]
    assert [as_list(r.ids) for r in results] == [tokenizer.reference.encode(t, add_special_tokens=False).ids
                                                 for t in texts]


def test_unknown_backend_is_refused():
    with pytest.raises(InputError, match="auto, reference, fastokens"):
        HFChatTokenizer(locate_tokenizer("llama3"), backend="gigatoken")


def test_literals_are_found_longest_first_and_whitespace_tokens_are_text():
    literals = TokenLiterals(["<|a|>", "<|a|>b", "\n\n", "<x>", ""])
    assert literals.tokens == ("<|a|>b", "<|a|>", "<x>")
    assert literals.first_in("x <|a|>b y <x>") == "<|a|>b"
    assert literals.first_in("one\n\ntwo <|a") is None
    assert literals.first_in("<|<|a|> <x>") == "<|a|>"  # a prefix that starts no literal, then one that does
    assert TokenLiterals([]).first_in("<|a|>") is None


LITERAL = st.text(alphabet="<|>ab", min_size=1, max_size=5)


@settings(max_examples=300)
@given(data=st.data())
def test_the_first_literal_is_the_one_a_regex_of_every_literal_longest_first_finds(data):
    """Found by prefix and length (no regex compiled when the literals share a prefix): the answer of Python's own
    regex alternation, which takes the leftmost position and, there, the first alternative that matches."""
    prefix = data.draw(st.sampled_from(["", "<|"]))
    tokens = [prefix + token for token in data.draw(st.lists(LITERAL, min_size=1, max_size=8))]
    noise = st.text(alphabet="<|>abc\n", max_size=3)
    text = "".join(data.draw(st.lists(st.one_of(st.sampled_from(tokens), noise), max_size=8)))
    literals = TokenLiterals(tokens)
    expected = re.search("|".join(map(re.escape, literals.tokens)), text)
    assert literals.first_in(text) == (expected.group() if expected else None)


def test_llama3_literals_are_its_special_tokens():
    tokenizer = chat_tokenizer()
    assert len(tokenizer.literals.tokens) == 256
    assert tokenizer.literals.first_in("say <|eot_id|> now") == "<|eot_id|>"
    assert tokenizer.literals.first_in("<|im_end|> is text for Llama-3") is None


def test_ids_are_int32():
    (tokens,) = chat_tokenizer().encode_batch(["int32 ids"])
    assert tokens.ids.dtype == np.int32
