"""``cached_tokenizer`` loads a tokenizer once per process even when threads ask at the same time (the CLI preloads
it in a thread while the shard step may ask for it), never keeps a failed load, and ``TokenizerPreload`` leaves the
loaded tokenizer for the step. A stand-in load records its calls; the real loading is tested elsewhere."""

import threading
import time

import pytest

from nemotron_assets.errors import InputError
from nemotron_assets.tokenize import documents
from nemotron_assets.tokenize.documents import DocumentOptions, TokenizerPreload, cached_tokenizer


@pytest.fixture
def loads(monkeypatch):
    calls = []

    def slow_load(spec, revision, options):
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


def test_a_failed_load_reaches_every_caller_and_is_tried_again(loads):
    preload = TokenizerPreload("broken", None, DocumentOptions())
    with pytest.raises(InputError, match="not a valid tokenizer.json"):
        cached_tokenizer("broken", None, DocumentOptions())  # waits for the preload's load and gets its error
    preload.join()
    with pytest.raises(InputError):
        cached_tokenizer("broken", None, DocumentOptions())
    assert loads == ["broken", "broken"]


def test_a_preload_leaves_the_tokenizer_for_the_step(loads):
    preload = TokenizerPreload("tok", None, DocumentOptions())
    preload.join()
    first = cached_tokenizer("tok", None, DocumentOptions())
    assert loads == ["tok"] and cached_tokenizer("tok", None, DocumentOptions()) is first
