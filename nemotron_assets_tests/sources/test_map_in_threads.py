"""``map_in_threads`` is ``map`` with several calls at a time: same results in the same order, errors where ``map``
would raise them, and nothing left running when the consumer stops. ``count_rows_and_hash`` hashes in a thread of
its own and leaves none behind, also when the file is broken."""

import gzip
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.files import SourceFile
from nemotron_assets.sources.prefetch import map_in_threads
from nemotron_assets.sources.readers import ReadOptions, count_rows_and_hash


def no_worker_threads_left() -> bool:
    return not any(t.name.startswith(("map_in_threads", "sha256")) and t.is_alive() for t in threading.enumerate())


@settings(max_examples=50, deadline=None)
@given(items=st.lists(st.integers(), max_size=40), workers=st.integers(1, 5))
def test_results_are_map_results_in_order(items, workers):
    def slow_square(x: int) -> int:
        time.sleep(0.0005 * (x % 3))  # later items often finish first
        return x * x

    assert list(map_in_threads(slow_square, items, workers)) == [x * x for x in items]
    assert no_worker_threads_left()


def test_calls_run_at_the_same_time():
    # Two calls meet at a barrier: run one after the other, the first would wait for the second forever.
    barrier = threading.Barrier(2, timeout=10)

    def meet(x: int) -> int:
        barrier.wait()
        return x

    assert list(map_in_threads(meet, [1, 2, 3, 4], workers=2)) == [1, 2, 3, 4]


def test_an_error_of_a_call_arrives_in_its_place():
    def fail_on_three(x: int) -> int:
        if x == 3:
            raise ValueError("three")
        return x

    got = []
    with pytest.raises(ValueError, match="three"):
        for result in map_in_threads(fail_on_three, range(10), workers=3):
            got.append(result)
    assert got == [0, 1, 2]
    assert no_worker_threads_left()


def test_an_error_of_the_items_arrives_after_the_results_before_it():
    def items():
        yield from range(5)
        raise InputError("row 6 is broken")

    got = []
    with pytest.raises(InputError, match="row 6 is broken"):
        for result in map_in_threads(lambda x: x + 100, items(), workers=4):
            got.append(result)
    assert got == [100, 101, 102, 103, 104]


def test_a_consumer_that_stops_stops_the_calls():
    started = []

    def record(x: int) -> int:
        started.append(x)
        return x

    results = map_in_threads(record, range(1000), workers=2)
    assert next(results) == 0
    results.close()
    assert len(started) <= 4  # the first result, two more at work, and one waiting at most
    assert no_worker_threads_left()


def test_counting_a_broken_file_leaves_no_hashing_thread(tmp_path):
    path = tmp_path / "broken.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "a"}\n' * 100_000)[:40])
    source = SourceFile(url=str(path), size=path.stat().st_size, format="jsonl", compression="gzip")
    with pytest.raises(InputError, match="cannot decompress"):
        count_rows_and_hash(source, ReadOptions(dataset="d"))
    assert no_worker_threads_left()
