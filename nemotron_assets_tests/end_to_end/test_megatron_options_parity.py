"""Megatron's other preprocessing options, byte-identical to ``tools/preprocess_data.py`` run with them at the pinned
commit (fixtures/megatron/README.md, "Other options"): several JSON keys (``--json-keys text title``), ``--append-eod``
off, ``--split-sentences`` with ``--lang`` and ``--keep-newlines``. The references' file names are Megatron's own
(``<prefix>_<key>_document``, ``_sentence`` when split)."""

import hashlib
from pathlib import Path

import pytest

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.records import read_receipt
from nemotron_assets.core.storage import Storage
from nemotron_assets_tests.megatron_reader import read_raw
from nemotron_assets_tests.shards import build_every_shard

FIXTURES = Path(__file__).parents[1] / "fixtures" / "megatron"
BPE = FIXTURES / "bpe_tokenizer"
SENTENCES = {"split_sentences": True}

# references by text field (None: a single text_field), input file, blend settings, dataset settings
CASES = {
    "json-keys": ({"text": "bpe_keys_text_document", "title": "bpe_keys_title_document"}, "keys.jsonl", {},
                  {"text_field": ["text", "title"]}),
    "no-append-eod": ({None: "bpe_noeod_text_document"}, "tricky.jsonl", {"add_eos": False}, {}),
    "split-sentences": ({None: "bpe_sentences_text_sentence"}, "tricky.jsonl", SENTENCES, {}),
    "keep-newlines": ({None: "bpe_sentences_newlines_text_sentence"}, "tricky.jsonl",
                      {**SENTENCES, "keep_newlines": True}, {}),
    "lang-english": ({None: "bpe_sentences_english_text_sentence"}, "sentences.jsonl", SENTENCES, {}),
    "lang-german": ({None: "bpe_sentences_german_text_sentence"}, "sentences.jsonl",
                    {**SENTENCES, "sentence_language": "german"}, {}),
}


def _build(tmp_path: Path, input_name: str, num_shards: int, backend: str, settings: dict,
           dataset: dict) -> list[str]:
    """Materialize one fixture input into ``num_shards`` shards with the bpe tokenizer; their prefixes, in order."""
    blend = Blend(name="parity", tokenizer_model=str(BPE), num_shards=num_shards,
                  datasets=[DatasetEntry(name="opts", path=str(FIXTURES / input_name), **dataset)], **settings)
    return build_every_shard(tmp_path / "out", blend, FIXTURES, backend)


def _named(prefix: str, field: str | None, reference: str) -> str:
    """Our file prefix of ``field``: the shard's own, or Megatron's ``_<key>_<level>`` after it."""
    return prefix if field is None else prefix + reference[reference.index(f"_{field}_"):]


def _sequences(prefix: str | Path) -> list[list[list[int]]]:
    """Every document as its sequences (sentences, when split), each a token list: read independently."""
    raw = read_raw(prefix)
    itemsize = raw.tokens.dtype.itemsize
    return [[[int(t) for t in raw.tokens[int(raw.sequence_pointers[s]) // itemsize:][:int(raw.sequence_lengths[s])]]
             for s in range(int(raw.document_indices[d]), int(raw.document_indices[d + 1]))]
            for d in range(raw.num_document_indices - 1)]


@pytest.mark.parametrize("backend", ["auto", "hf"])
@pytest.mark.parametrize("case", list(CASES))
def test_single_shard_is_byte_identical_to_megatron(tmp_path, case, backend):
    references, input_name, settings, dataset = CASES[case]
    (prefix,) = _build(tmp_path, input_name, 1, backend, settings, dataset)
    for field, reference in references.items():
        ours = _named(prefix, field, reference)
        for ext in (".bin", ".idx"):
            assert Path(ours + ext).read_bytes() == (FIXTURES / f"{reference}{ext}").read_bytes(), (field, ext)


@pytest.mark.parametrize("case", list(CASES))
def test_shards_concatenate_to_megatrons_dataset(tmp_path, case):
    references, input_name, settings, dataset = CASES[case]
    prefixes = _build(tmp_path, input_name, 3, "auto", settings, dataset)
    assert len(prefixes) == 3
    for field, reference in references.items():
        ours = [_named(p, field, reference) for p in prefixes]
        assert b"".join(Path(p + ".bin").read_bytes() for p in ours) == (FIXTURES / f"{reference}.bin").read_bytes()
        assert [doc for p in ours for doc in _sequences(p)] == _sequences(FIXTURES / reference)


def test_one_receipt_lists_every_fields_files(tmp_path):
    """A list text_field: one receipt for the shard, naming each field's pair with its own counts."""
    (prefix,) = _build(tmp_path, "keys.jsonl", 1, "auto", {}, {"text_field": ["text", "title"]})
    store = Storage(str(tmp_path / "out"))
    receipt = read_receipt(store, "parity/pretrain/opts/shard_00000")
    assert sorted(receipt.files) == ["shard_00000_text_document.bin", "shard_00000_text_document.idx",
                                     "shard_00000_title_document.bin", "shard_00000_title_document.idx"]
    for name, digest in receipt.files.items():
        assert digest["sha256"] == hashlib.sha256(Path(prefix).with_name(name).read_bytes()).hexdigest()
    fields = receipt.stats["fields"]
    assert fields["text"]["documents"] == fields["title"]["documents"] == receipt.stats["documents"] == 10
    assert fields["text"]["tokens"] != fields["title"]["tokens"]
    assert not Path(prefix + ".bin").exists()


def test_option_references_exercise_what_they_claim():
    """The references differ where the options should make them differ (else a parity test could pass vacuously)."""
    plain = _sequences(FIXTURES / "bpe_text_document")
    no_eod = _sequences(FIXTURES / "bpe_noeod_text_document")
    assert no_eod == [[d[0][:-1]] if d else [] for d in plain]  # one sequence each, without its EOD
    sentences = _sequences(FIXTURES / "bpe_sentences_text_sentence")
    assert len(sentences) == len(plain) and max(len(d) for d in sentences) > 10  # documents of many sentences
    assert [sum(d, []) for d in sentences] != [sum(d, []) for d in plain]  # sentences tokenized on their own
    newlines = _sequences(FIXTURES / "bpe_sentences_newlines_text_sentence")
    assert [len(d) for d in newlines] == [len(d) for d in sentences] and newlines != sentences  # whitespace kept
    english = _sequences(FIXTURES / "bpe_sentences_english_text_sentence")
    german = _sequences(FIXTURES / "bpe_sentences_german_text_sentence")
    assert len(german[0]) < len(english[0])  # "am 3. Oktober", "z.B.": sentence ends in English punkt only
    title = _sequences(FIXTURES / "bpe_keys_title_document")
    assert [i for i, d in enumerate(title) if not d] == [1]  # the empty title of line 2: an empty document
