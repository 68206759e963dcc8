"""A tokenizer.json is parsed by fastokens and by the reference at the same time (tokenize/encoders.py
``parse_tokenizer``): the reference starts only once fastokens' parse has.

fastokens lets go of the GIL while it parses and the reference holds it, so a reference started first kept the
fastokens thread from even reaching its parse, and the two parses ran one after the other (Llama-3: 1.2-1.3 s
against 0.9-1.1 s, bench/README.md). The fast parse here is a stand-in that takes its time getting started, so the
order does not depend on how the threads happen to be scheduled; the reference is the real one.
"""

import signal
import threading
import time

import pytest

from nemotron_assets.tokenize import encoders
from nemotron_assets_tests.tokenize.builders import trained_bpe

TOKENIZER_JSON = trained_bpe().to_str()


@pytest.fixture
def events(monkeypatch) -> list[str]:
    """What happened, in order: the fast parse's start and the reference's."""
    happened: list[str] = []
    reference_parse = encoders.Tokenizer.from_str

    class Reference:
        @staticmethod
        def from_str(text):
            happened.append("reference starts")
            return reference_parse(text)

    monkeypatch.setattr(encoders, "Tokenizer", Reference)
    return happened


def test_the_reference_starts_once_the_fast_parse_has(monkeypatch, events):
    def slow_to_start(text, parsing=lambda: None):
        time.sleep(0.2)  # importing fastokens, say: the GIL is free meanwhile
        parsing()
        events.append("fast parse starts")
        return "fast", ""

    monkeypatch.setattr(encoders, "parse_fastokens", slow_to_start)
    parsed = encoders.parse_tokenizer(TOKENIZER_JSON, "tokenizer.json", with_fast=True)
    assert events == ["fast parse starts", "reference starts"]
    assert parsed.fast == "fast"
    assert parsed.reference.get_vocab_size() == trained_bpe().get_vocab_size()


@pytest.mark.parametrize("ending", ["unavailable", "raises"])
def test_a_fast_parse_that_never_starts_does_not_hold_the_reference_up(monkeypatch, events, ending):
    def never_starts(text, parsing=lambda: None):
        if ending == "raises":
            raise MemoryError("out of memory before parsing")
        return None, "fastokens unavailable (no module)"

    monkeypatch.setattr(encoders, "parse_fastokens", never_starts)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(_parse_or_error()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "parse_tokenizer waited for a fast parse that never started"
    assert events == ["reference starts"]
    if ending == "raises":
        assert isinstance(result[0], MemoryError)
    else:
        assert result[0].fast is None and result[0].fast_error == "fastokens unavailable (no module)"


def _parse_or_error():
    try:
        return encoders.parse_tokenizer(TOKENIZER_JSON, "tokenizer.json", with_fast=True)
    except MemoryError as exc:
        return exc


class Interrupted(BaseException):
    """What a Ctrl-C raises (a BaseException, as KeyboardInterrupt is), without pytest taking it for one."""


def test_an_interrupt_while_waiting_for_the_fast_parse_still_joins_its_thread(monkeypatch, events):
    threads: list[threading.Thread] = []

    def slow_to_start(text, parsing=lambda: None):
        threads.append(threading.current_thread())
        time.sleep(0.3)
        parsing()
        return "fast", ""

    def interrupt(signum, frame):
        raise Interrupted

    monkeypatch.setattr(encoders, "parse_fastokens", slow_to_start)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Interrupted):
            encoders.parse_tokenizer(TOKENIZER_JSON, "tokenizer.json", with_fast=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert not threads[0].is_alive(), "parse_tokenizer left with the fast parse still running"
    assert events == []
