"""The one place that starts worker processes: the shards of a run built at the same time, and batches of SFT
rows rendered on every core.

**Forked calls** (`ForkedCalls`): known calls run in a few processes forked from this one, results collected in any
order. Why fork: a child starts with everything the parent has already loaded (a pretraining shard's tokenizer
takes ~1.5 s to parse, and the forked children share the parsed one), and runs on its own core without the parent's
GIL. Why a pool forked once, with every call known beforehand: the calls are inherited through the fork, never
pickled, and a process that runs several calls one after the other reuses the memory its first call touched (on
the 1 GB bench, 4 shards: a fresh process per shard made 489,000 page faults, two processes taking shards in turn
~400,000, one process 174,000-194,000; bench/README.md).

What a forked call may do: work on what it closes over, read and write local files, start threads of its own, and
talk to the parent through ``report`` and its return value. What it must not do: use anything the fork copied in
whatever state the parent's other threads left it in, such as the Dagster instance and its sqlite connections,
log handlers that write to the event log, S3 clients, or ``print`` (a stream's lock may be held). The children end
with ``os._exit`` (``multiprocessing``'s fork start), so none of the parent's ``atexit`` handlers or finalizers run
there. A child whose parent was killed learns it at its next ``report`` or result (the pipe is broken) and ends.

**Tasks in order** (`in_order`): a stream of picklable tasks to a pool of ``workers`` processes, results back in the
order given, at most ``workers * ahead`` in flight (the SFT samples step renders Harmony batches this way).
"""

import contextlib
import gc
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from nemotron_assets.core.allocator import libc_function

PR_SET_PDEATHSIG = 1  # Linux's prctl.h
Report = Callable[[Any], None]  # what a forked call uses to send a message (any picklable value) to its parent
Call = Callable[[Report], Any]


class ForkedCallDied(Exception):
    """The process running a forked call ended without sending its result (killed, or out of memory)."""


#: A bound on memory (each process holds a shard's batches in flight and its own tokenizer caches), not a measured
#: optimum: only 2 cores were available to measure on.
MAX_BUILD_PROCESSES = 8


def fork_available() -> bool:
    return hasattr(os, "fork") and "fork" in multiprocessing.get_all_start_methods()


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def build_processes(requested: int) -> int:
    """How many shards to build at once: ``requested`` (0: one per usable core), at most ``MAX_BUILD_PROCESSES``;
    1 (build in the step) when fork is not available."""
    return max(1, min(requested or usable_cores(), MAX_BUILD_PROCESSES)) if fork_available() else 1


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    connection: Connection  # names of calls go to the child; messages and results come back
    call: str | None = None  # the call it runs now


class ForkedCalls:
    """``calls`` (name -> call) run in ``processes`` processes forked now, in the order given, each process taking
    the next call as soon as it has sent the result of its last.

    ``result(name)`` waits for one call. While it waits, every running call's messages go to
    ``on_message(name, message)`` as they arrive. A process that dies fails only the call it was running, and a
    new one is forked for the calls still waiting. Use as a context manager: leaving it kills the processes
    (an error elsewhere, or results nobody asked for)."""

    def __init__(self, calls: dict[str, Call], processes: int, on_message: Callable[[str, Any], None]) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        self._calls = dict(calls)
        self._on_message = on_message
        self._context = multiprocessing.get_context("fork")
        self._waiting: deque[str] = deque(self._calls)
        self._ended: dict[str, tuple[bool, Any]] = {}  # name -> (succeeded, value or exception)
        self._workers: list[_Worker] = []
        for _ in range(min(processes, len(self._calls))):
            self._workers.append(self._fork())
        for worker in self._workers:
            self._give_next(worker)

    def __enter__(self) -> "ForkedCalls":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def result(self, name: str) -> Any:
        """The return value of call ``name``, or its exception raised here."""
        if name not in self._calls:
            raise KeyError(f"no call named {name!r}")
        with _signals_noted() as noted:
            while name not in self._ended:
                if not self._workers:
                    raise RuntimeError(f"no process is left to run {name!r}")
                ready = wait([worker.connection for worker in self._workers], timeout=SIGNAL_CHECK_SECONDS)
                _handle_again_if_lost(noted)
                for worker in [w for w in self._workers if w.connection in ready]:
                    self._receive(worker)
                _handle_again_if_lost(noted)  # one that came while a process was found dead of it (`_receive`)
        succeeded, value = self._ended.pop(name)
        del self._calls[name]
        if not succeeded:
            raise value
        return value

    def close(self) -> None:
        """Kill every process (what they wrote is in folders the caller removes); calls not ended are forgotten."""
        self._waiting.clear()
        for worker in self._workers:
            worker.process.kill()
        for worker in self._workers:
            worker.process.join()
            worker.connection.close()
        self._workers.clear()

    def _fork(self) -> _Worker:
        parent_end, child_end = self._context.Pipe()
        parents_ends = [parent_end, *(w.connection for w in self._workers)]
        with _signals_held() as mask:
            process = self._context.Process(target=_serve, args=(self._calls, child_end, parents_ends, mask),
                                            name="forked_calls", daemon=True)
            process.start()
        child_end.close()  # the parent keeps only its own end: EOF then means the child has gone
        return _Worker(process, parent_end)

    def _give_next(self, worker: _Worker) -> None:
        worker.call = self._waiting.popleft() if self._waiting else None
        with contextlib.suppress(ConnectionError):  # the child died: its next receive says so (`_receive`)
            worker.connection.send(worker.call)  # None: no more calls, the child ends

    def _receive(self, worker: _Worker) -> None:
        """One message from ``worker``: a report passed on, or the end of its call (then it gets the next one)."""
        try:
            kind, payload = worker.connection.recv()
        except (EOFError, ConnectionResetError):  # the process died (reset: before it read the name it was sent)
            worker.process.join()
            if worker.process.exitcode in (-signal.SIGINT, -signal.SIGTERM):
                # Ctrl-C reaches the whole process group: a child may die of it before this process's handler runs.
                # Waiting lets that handler interrupt the step here, instead of failing the call as one to retry.
                time.sleep(INTERRUPT_GRACE_SECONDS)
            worker.connection.close()
            self._workers.remove(worker)
            if worker.call is not None:
                self._ended[worker.call] = (False, ForkedCallDied(
                    f"the process of {worker.call} ended (exit code {worker.process.exitcode}) without a result"))
            if self._waiting:
                replacement = self._fork()
                self._workers.append(replacement)
                self._give_next(replacement)
            return
        if kind == "message":
            self._on_message(worker.call, payload)
            return
        self._ended[worker.call] = (kind == "value", payload)
        self._give_next(worker)


def _serve(calls: dict[str, Call], connection: Connection, parents_ends: list[Connection],
           mask: set[signal.Signals]) -> None:
    """In a forked process: run the calls the parent names, one at a time, until it sends None, or until the
    parent has gone (a broken pipe: nothing is left to tell; the process ends quietly).

    The fork copied the parent's ends of the pipes; they are closed first, so that the
    parent's death closes this process's pipe (a socket pair stays open while any process holds either end).

    Every object inherited from the parent is first put out of the garbage collector's reach (``gc.freeze``): a
    full collection walks them all, and writing their headers would copy the parent's pages into this process. (On
    the 1 GB bench it made no difference that could be measured: ~400,000 page faults with it and without.)
    SIGTERM and SIGINT get their default action back (`_default_signals`); ``mask`` is the parent's signal mask
    before it held them for the fork."""
    _default_signals(mask)
    for end in parents_ends:
        end.close()
    gc.freeze()
    try:
        while (name := connection.recv()) is not None:
            try:
                value = calls[name](lambda message: connection.send(("message", message)))
            except BaseException as exc:  # noqa: BLE001 - every error goes to the parent, which raises it
                connection.send(("error", picklable_error(exc)))
            else:
                connection.send(("value", value))
    except (EOFError, ConnectionError):
        return
    connection.close()


#: How often a wait for forked calls looks whether a signal's exception was lost (`_signals_noted`).
SIGNAL_CHECK_SECONDS = 0.25
#: How long a child's death by SIGINT or SIGTERM waits for the same signal to reach this process (`_receive`).
INTERRUPT_GRACE_SECONDS = 1.0


@contextlib.contextmanager
def _signals_noted() -> Iterator[list[tuple[int, Callable]]]:
    """While this (main) thread waits for forked calls: each SIGINT or SIGTERM is noted, with the handler it found,
    before that handler runs.

    A handler that raises (Dagster's, inside a step: the run is interrupted) raises wherever Python happens to be
    when the signal is handled. When that is a ``__del__`` or a weakref callback (SQLAlchemy's, during a garbage
    collection), Python prints "Exception ignored" and goes on: the builds would run to their end. So the wait calls
    the handler again itself (`_handle_again_if_lost`); when the first call's exception did get through, the wait
    has already ended and nothing is called twice."""
    noted: list[tuple[int, Callable]] = []
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield noted
        return
    found = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def noting(signum: int, frame) -> None:
        noted.append((signum, found[signum]))
        found[signum](signum, frame)

    for signum, handler in found.items():
        if callable(handler):
            signal.signal(signum, noting)
    try:
        yield noted
    finally:
        for signum, handler in found.items():
            if callable(handler) and signal.getsignal(signum) is noting:
                signal.signal(signum, handler)


def _handle_again_if_lost(noted: list[tuple[int, Callable]]) -> None:
    """Run the handler of a signal noted while waiting (its exception, if it raised one, was lost: else the wait
    would have ended)."""
    if noted:
        signum, handler = noted.pop(0)
        handler(signum, None)


@contextlib.contextmanager
def _signals_held() -> Iterator[set[signal.Signals]]:
    """SIGINT and SIGTERM blocked in this thread while it forks (yields the mask before), so that a child never
    runs the parent's handlers: it starts with them blocked and gets their default action before unblocking them
    (`_default_signals`). Ctrl-C reaches the whole process group, a child included: in a child just forked, a
    handler the parent installed (Dagster's, inside a step) raised in whatever ran first (a library's at-fork
    callback printed the traceback), and Python wrote the signal to the parent's wakeup fd, which the command line
    took for a second Ctrl-C (cli/interrupts.py). A signal for the parent meanwhile is delivered to another thread,
    or to this one when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield previous
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _default_signals(mask: set[signal.Signals]) -> None:
    """In a child forked under `_signals_held`: SIGTERM and SIGINT get their default action (a handler the parent
    installed, Dagster's or a test runner's, would turn them into an exception that a loop reports and survives),
    the parent's wakeup fd is forgotten, and the parent's signal mask comes back (a signal that came meanwhile is
    delivered now: the process ends)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def picklable_error(exc: BaseException) -> BaseException:
    """``exc`` itself when it survives pickling (the parent then raises the same type and message), else a
    RuntimeError that names its type; either way with the child's traceback as a note."""
    note = "in the forked process:\n" + "".join(traceback.format_exception(exc)).rstrip()
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if str(copy) != str(exc):
            raise TypeError("the message changed")
    except Exception:  # noqa: BLE001 - any exception type may refuse pickling
        copy = RuntimeError(f"{type(exc).__name__}: {exc}")
    copy.add_note(note)
    return copy


# --- tasks in order ---------------------------------------------------------------------------------------------
def in_order(function: Callable[..., Any], tasks: Iterable[tuple], workers: int, *, start: str = "spawn",
             initializer: Callable[..., None] | None = None, initargs: tuple = (), ahead: int = 2,
             started: Callable[[], None] | None = None) -> Iterator[Any]:
    """``function(*task)`` of each task, in order, computed by ``workers`` processes started with ``start``
    (``fork`` or ``spawn``), each running ``initializer(*initargs)`` first; ``workers <= 1``: here, in this
    process. ``started()`` runs once every worker exists (with fork: the parent may drop what it loaded for them).
    An error raised by a task is raised here."""
    if workers <= 1:
        for task in tasks:
            yield function(*task)
        return
    context = multiprocessing.get_context(start)
    forked = start == "fork"
    if forked:  # the workers do not run this process's signal handlers (`_signals_held`), nor outlive it
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())  # this thread's, as it is
        initializer, initargs = _forked_worker, (os.getpid(), mask, initializer, initargs)
        _arrow_conversions_loaded()
    with ProcessPoolExecutor(workers, mp_context=context, initializer=initializer, initargs=initargs) as pool:
        if forked:
            gc.freeze()  # the workers' collections skip what they inherit (nor copy its pages to mark it)
            try:
                with _signals_held():
                    pool.submit(os.getpid)  # with fork, the first task forks every worker, here and now
            finally:
                gc.unfreeze()
        if started is not None:
            started()
        pending: deque[Future] = deque()
        for task in tasks:
            pending.append(pool.submit(function, *task))
            if len(pending) >= workers * ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _arrow_conversions_loaded() -> None:
    """Before forking: load what pyarrow loads at a process's first conversion of Python objects to Arrow, so that
    the workers inherit it. The tasks of `in_order` send back tables made from Python rows (normalized records,
    rendered samples), and that first conversion imports pandas when it is installed (~0.15 s); each worker paid it
    again before its first result (bench/README.md, "Workers no longer import pandas")."""
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        pa.array([])


def _forked_worker(parent: int, mask: set[signal.Signals], initializer: Callable[..., None] | None,
                   initargs: tuple) -> None:
    """A forked worker of `in_order` first gets the default action of SIGINT and SIGTERM (`_default_signals`), and
    ends with its parent (`_killed_with_parent`)."""
    _default_signals(mask)
    _killed_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


def _killed_with_parent(parent: int) -> None:
    """On Linux, this process is killed when the thread that forked it ends (``PR_SET_PDEATHSIG``), or now if its
    parent ``parent`` has gone already. A pool worker waits for its next task on a pipe whose other end it holds
    itself, so it would otherwise wait for ever after its parent was killed: e.g. a shard build forked by
    `ForkedCalls` that normalizes on two cores, killed by ``close``."""
    prctl = libc_function("prctl")
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
