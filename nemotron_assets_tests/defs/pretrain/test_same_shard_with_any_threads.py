"""A shard's bytes do not depend on how many batches are tokenized at a time, and the reference backend's
cross-check stays within its character budget. Expected documents come from the tokenizer file through the
``tokenizers`` library and Megatron's rules (``tokenize/builders.py``), and the files are read back by the
independent reader."""

import pytest

from nemotron_assets.defs.pretrain.shard import CROSS_CHECK_CHARS, CROSS_CHECK_DOCS, build_shard
from nemotron_assets.formats.megatron import DType
from nemotron_assets.tokenize.documents import DocumentOptions, load_tokenizer
from nemotron_assets.tokenize.encoders import HFEncoder
from nemotron_assets_tests.megatron_reader import read_dataset
from nemotron_assets_tests.tokenize.builders import megatron_documents, reference, sample_texts, save, trained_bpe


@pytest.fixture(scope="module")
def bpe_folder(tmp_path_factory):
    return save(trained_bpe(corpus=sample_texts(), vocab_size=1000), tmp_path_factory.mktemp("tok") / "bpe",
                eos_token="</s>")


def batches_of(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_shard_is_megatrons_documents_whatever_the_threads(bpe_folder, tmp_path, threads):
    tokenizer = load_tokenizer(str(bpe_folder), None, DocumentOptions())
    assert tokenizer.backend == "fastokens"  # the threads tokenize with the fast backend, cross-checked
    texts = sample_texts() + ["", "   ", "last one"]
    expected = megatron_documents(reference(bpe_folder / "tokenizer.json"), texts, eod=1)

    stats = build_shard(batches_of(texts, 7), tokenizer, DType.uint16, tmp_path / "shard", threads=threads)

    assert read_dataset(tmp_path / "shard") == (8, expected)  # dtype code 8: uint16
    assert (stats.rows, stats.documents, stats.tokens) == (len(texts), len(texts), sum(map(len, expected)))


def test_the_files_are_the_same_bytes_with_one_thread_or_four(bpe_folder, tmp_path):
    tokenizer = load_tokenizer(str(bpe_folder), None, DocumentOptions())
    batches = batches_of(sample_texts() * 3, 5)
    one = build_shard(batches, tokenizer, DType.int32, tmp_path / "one", threads=1)
    four = build_shard(batches, tokenizer, DType.int32, tmp_path / "four", threads=4)
    for ext in (".bin", ".idx"):
        assert (tmp_path / f"one{ext}").read_bytes() == (tmp_path / f"four{ext}").read_bytes()
    assert one.as_dict() == four.as_dict()


def test_the_cross_check_gives_the_reference_at_most_its_budget_per_batch(bpe_folder, tmp_path, monkeypatch):
    tokenizer = load_tokenizer(str(bpe_folder), None, DocumentOptions())
    given_to_reference: list[int] = []  # characters per call of the reference encoder
    original = HFEncoder.encode

    def encode(self, texts, add_special_tokens=True):
        given_to_reference.append(sum(len(t) for t in texts))
        return original(self, texts, add_special_tokens=add_special_tokens)

    monkeypatch.setattr(HFEncoder, "encode", encode)
    long_texts = [f"document {i} " + "some words and more words " * 600 for i in range(6)]  # ~15,600 chars each
    build_shard([long_texts[:3], long_texts[3:], ["short", "texts"]], tokenizer, DType.uint16, tmp_path / "s",
                threads=1)

    # one call per batch (every sample is a short document: encoded with the template), in batch order
    assert given_to_reference == [CROSS_CHECK_CHARS, CROSS_CHECK_CHARS, len("short") + len("texts")]
    assert CROSS_CHECK_DOCS >= 2
