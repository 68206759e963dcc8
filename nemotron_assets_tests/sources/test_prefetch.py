"""Read-ahead keeps order, hands reader errors to the consumer, and stops when the consumer stops."""

import threading
import time

import pytest

from nemotron_assets.sources.prefetch import InOrderThread, prefetch


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


def test_in_order_thread_calls_in_submission_order_and_close_waits_for_all():
    done = []
    writer = InOrderThread(lambda item: (time.sleep(0.001 * (item % 3)), done.append(item)), depth=2)
    for item in range(200):
        writer.submit(item)
    writer.close()
    assert done == list(range(200))
    assert not writer._thread.is_alive()


def test_in_order_thread_error_reaches_the_submitter_and_stops_the_calls():
    done = []

    def write(item):
        if item == 3:
            raise OSError("disk full")
        done.append(item)

    writer = InOrderThread(write, depth=1)
    with pytest.raises(OSError, match="disk full"):
        for item in range(1000):
            writer.submit(item)
    with pytest.raises(OSError, match="disk full"):  # close says so too, after ending the thread
        writer.close()
    assert done == [0, 1, 2] and not writer._thread.is_alive()
