"""Read-ahead keeps order, hands reader errors to the consumer, and stops when the consumer stops."""

import threading
import time

import pytest

from nemotron_assets.sources.prefetch import prefetch


def test_prefetch_yields_every_item_in_order():
    assert list(prefetch(range(1000), depth=3)) == list(range(1000))


def test_reader_error_arrives_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise ValueError("line 3 is broken")

    got = []
    with pytest.raises(ValueError, match="line 3 is broken"):
        for item in prefetch(items()):
            got.append(item)
    assert got == [1, 2]


def test_consumer_stopping_early_stops_the_reader():
    produced = []

    def items():
        for i in range(10_000):
            produced.append(i)
            yield i

    stream = prefetch(items(), depth=2)
    assert next(stream) == 0
    stream.close()
    time.sleep(0.3)
    assert len(produced) < 10
    assert not any(t.name == "prefetch" and t.is_alive() for t in threading.enumerate())
