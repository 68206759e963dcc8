"""``cached_tokenizer`` loads a tokenizer once per process even when threads ask at the same time, and never keeps a
failed load (a stand-in load records its calls); and it keeps one tokenizer per file content, so a file replaced
in place is loaded again (the real load)."""

import shutil
import threading
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from nemotron_assets.chat.chat_format import cached_chat_tokenizer
from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize import documents
from nemotron_assets.tokenize.documents import DocumentOptions, cached_tokenizer
from nemotron_assets.tokenize.file_hashes import file_sha256
from nemotron_assets.tokenize.model_files import TiktokenSettings
from nemotron_assets_tests.conftest import REPO

FIXTURES = REPO / "nemotron_assets_tests" / "fixtures" / "megatron"


@pytest.fixture
def loads(monkeypatch, tmp_path):
    """The specs a stand-in load was called with (its names: ``tok``, or ``broken`` whose load fails); the specs
    are real tokenizer folders in tmp_path, since the cache keys on their files."""
    calls = []

    def slow_load(spec, revision, options, tiktoken):
        calls.append(Path(spec).name)
        time.sleep(0.2)
        if Path(spec).name == "broken":
            raise InputError("not a valid tokenizer.json", path=spec)
        return object()

    for name in ("tok", "broken"):
        shutil.copytree(FIXTURES / "bpe_tokenizer", tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(documents, "load_tokenizer", slow_load)
    monkeypatch.setattr(documents, "_LOADED", {})
    return calls


def test_threads_asking_at_once_share_one_load(loads):
    got = []
    threads = [threading.Thread(target=lambda: got.append(cached_tokenizer("./tok", None, DocumentOptions())))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["tok"] and len(got) == 4 and all(g is got[0] for g in got)
    assert cached_tokenizer("./tok", None, DocumentOptions()) is got[0]
    assert cached_tokenizer("./tok", None, DocumentOptions(add_bos=True)) is not got[0]  # another setting: its own
    assert cached_tokenizer("./tok", None, DocumentOptions(), TiktokenSettings(pattern="v1")) is not got[0]


def test_a_failed_load_reaches_every_caller_and_is_tried_again(loads):
    first = threading.Thread(target=lambda: pytest.raises(InputError, cached_tokenizer, "./broken", None,
                                                          DocumentOptions()))
    first.start()
    time.sleep(0.05)  # the thread's load is under way
    with pytest.raises(InputError, match="not a valid tokenizer.json"):
        cached_tokenizer("./broken", None, DocumentOptions())  # waits for the thread's load and gets its error
    first.join()
    with pytest.raises(InputError):
        cached_tokenizer("./broken", None, DocumentOptions())
    assert loads == ["broken", "broken"]


# --- the real load: a tokenizer file replaced in place is loaded again ------------------------------------------
def _swap_tokenizer(folder, source) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, folder / name)


def test_a_tokenizer_file_replaced_in_place_is_loaded_again(tmp_path):
    """A long-lived process (the Python API, twice in one process) builds with the tokenizer file as it is now:
    the cache keeps one tokenizer per file content, not per path."""
    folder = tmp_path / "tok"
    shutil.copytree(FIXTURES / "bpe_tokenizer", folder)
    first = cached_tokenizer(str(folder), None, DocumentOptions())
    assert cached_tokenizer(str(folder), None, DocumentOptions()) is first  # the same file: loaded once

    _swap_tokenizer(folder, FIXTURES / "bert_tokenizer")
    second = cached_tokenizer(str(folder), None, DocumentOptions())
    assert second.vocab_size == Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size() != \
        first.vocab_size
    assert second.files.sha256 == file_sha256(folder / "tokenizer.json")


def test_a_chat_tokenizer_file_replaced_in_place_is_loaded_again(tmp_path):
    folder = tmp_path / "tok"
    shutil.copytree(FIXTURES / "bpe_tokenizer", folder)
    first = cached_chat_tokenizer(str(folder), None, "auto")
    assert cached_chat_tokenizer(str(folder), None, "auto") is first

    _swap_tokenizer(folder, FIXTURES / "bert_tokenizer")
    second = cached_chat_tokenizer(str(folder), None, "auto")
    assert second.reference.get_vocab_size() == Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()
    assert second.reference.get_vocab_size() != first.reference.get_vocab_size()
