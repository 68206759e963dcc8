"""Threads that overlap the stages of a shard build: reading ahead, and working on several batches at once.

The tokenizer backends run in Rust without the GIL, so while they work on batch ``i`` a reader thread can
decompress and parse batch ``i+1`` (``prefetch``), and two threads can tokenize two batches at the same time
(``map_in_threads``). Order is preserved; an exception is re-raised in the consumer at the point the failed
item would have arrived; a consumer that stops early stops the threads.
"""

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
_DONE = object()


def prefetch(items: Iterable[T], depth: int = 1) -> Iterator[T]:
    """Yield ``items`` in order while a thread produces up to ``depth`` items ahead."""
    buffer: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if not _put(buffer, (item, None), stop):
                    return
            _put(buffer, (_DONE, None), stop)
        except BaseException as exc:  # handed to the consumer, which re-raises it
            _put(buffer, (_DONE, exc), stop)

    reader = threading.Thread(target=produce, name="prefetch", daemon=True)
    reader.start()
    try:
        while True:
            item, error = buffer.get()
            if error is not None:
                raise error
            if item is _DONE:
                return
            yield item
    finally:
        stop.set()
        reader.join(timeout=30)


def _put(buffer: queue.Queue, entry: tuple, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            buffer.put(entry, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def map_in_threads(function: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """``function(item)`` for every item, results in order, up to ``workers`` calls at a time in threads.

    For work that lets go of the GIL (tokenizers written in Rust, numpy, hashing): while the consumer handles one
    result, the next ``workers`` items are being worked on. Like ``map``, an error arrives where its result would
    have (an error of ``items`` itself after the results of the items before it), and a consumer that stops early
    stops the work: calls not yet started are cancelled, running ones are waited for.
    """
    if workers <= 1:
        yield from map(function, items)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="map_in_threads")
    pending: deque[Future] = deque()
    try:
        source = iter(items)
        while True:
            try:
                item = next(source)
            except StopIteration:
                break
            except Exception:
                while pending:
                    yield pending.popleft().result()
                raise
            pending.append(pool.submit(function, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class InOrderThread:
    """Calls ``function(item)`` for each ``submit``-ted item, in order, in one thread of its own.

    For the last stage of a pipeline whose work lets go of the GIL (writing and hashing a shard's ids): the
    submitter goes on feeding the earlier stages meanwhile. At most ``depth`` items wait (bounded memory). An
    error of ``function`` stops the thread; it is re-raised by the next ``submit`` or by ``close``, which waits for
    every submitted call. ``close`` must be called (also after an error elsewhere) so the thread ends.
    """

    def __init__(self, function: Callable[[T], object], depth: int = 2, name: str = "in_order") -> None:
        self._function = function
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._failed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (entry := self._queue.get()) is not _DONE:
            if self._error is None:
                try:
                    self._function(entry)
                except BaseException as exc:  # handed to the submitter
                    self._error = exc
                    self._failed.set()

    def submit(self, item: T) -> None:
        self._raise_if_failed()
        while not _put(self._queue, item, self._failed):
            self._raise_if_failed()

    def close(self) -> None:
        """Wait for every submitted call; raise the first error of any."""
        self._queue.put(_DONE)
        self._thread.join()
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error
