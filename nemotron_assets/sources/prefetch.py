"""Read ahead in a background thread, so parsing the next batch overlaps tokenizing this one.

The tokenizer backends run in Rust without the GIL, so while they work on batch ``i`` a reader thread can
decompress and parse batch ``i+1``. Order is preserved; an exception in the reader is re-raised in the
consumer at the point the failed batch would have arrived; a consumer that stops early stops the reader.
"""

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
_DONE = object()


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
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
