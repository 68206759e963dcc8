"""``cached_tokenizer`` loads a tokenizer once per process even when threads ask at the same time, and never keeps a
failed load. A stand-in load records its calls; the real loading is tested elsewhere."""

import threading
import time

import pytest

from nemotron_assets.sources.errors import InputError
from nemotron_assets.tokenize import documents
from nemotron_assets.tokenize.documents import DocumentOptions, cached_tokenizer
from nemotron_assets.tokenize.model_files import TiktokenSettings


@pytest.fixture
def loads(monkeypatch):
    calls = []

    def slow_load(spec, revision, options, tiktoken):
        calls.append(spec)
        time.sleep(0.2)
        if spec.startswith("broken"):
            raise InputError("not a valid tokenizer.json", path=spec)
        return object()

    monkeypatch.setattr(documents, "load_tokenizer", slow_load)
    monkeypatch.setattr(documents, "_LOADED", {})
    return calls


def test_threads_asking_at_once_share_one_load(loads):
    got = []
    threads = [threading.Thread(target=lambda: got.append(cached_tokenizer("tok", None, DocumentOptions())))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["tok"] and len(got) == 4 and all(g is got[0] for g in got)
    assert cached_tokenizer("tok", None, DocumentOptions()) is got[0]
    assert cached_tokenizer("tok", None, DocumentOptions(add_bos=True)) is not got[0]  # another setting: its own
    assert cached_tokenizer("tok", None, DocumentOptions(), TiktokenSettings(pattern="v1")) is not got[0]


def test_a_failed_load_reaches_every_caller_and_is_tried_again(loads):
    first = threading.Thread(target=lambda: pytest.raises(InputError, cached_tokenizer, "broken", None,
                                                          DocumentOptions()))
    first.start()
    time.sleep(0.05)  # the thread's load is under way
    with pytest.raises(InputError, match="not a valid tokenizer.json"):
        cached_tokenizer("broken", None, DocumentOptions())  # waits for the thread's load and gets its error
    first.join()
    with pytest.raises(InputError):
        cached_tokenizer("broken", None, DocumentOptions())
    assert loads == ["broken", "broken"]
