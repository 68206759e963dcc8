"""Ctrl-C (SIGINT) and SIGTERM while ``materialize`` runs: the first signal stops the build, a second exits at once.

While a Dagster run executes here, Dagster owns SIGINT (and maps SIGTERM to it): inside a step it raises
``DagsterExecutionInterruptedError`` in the step's code, which unwinds it (a shard run kills its forked builds and
removes their staging folders, core/step.py), and the run ends failed; elsewhere it keeps the signal until the next
step starts. Either way Dagster resets its record of the signal when the run ends, so the command could not tell
an interrupted run from a failed one, and would go on to the next.

So the command learns of signals itself, whoever handles them: Python writes the number of every signal it
catches to a "wakeup" file descriptor (``signal.set_wakeup_fd``), and a thread here reads them. The first
SIGINT/SIGTERM marks the command interrupted (it stops after the run in progress has unwound); the second ends the
process at once (exit status 130). Between runs, our own handler raises ``KeyboardInterrupt`` for both signals.

Dagster raises its interrupt in whatever code runs when the signal lands. Two places swallow it and print it:

- SQLAlchemy closing one of the instance's database connections logs the exception with its traceback (logger
  ``sqlalchemy.pool``) and goes on;
- a finalizer (a weakref callback, a ``__del__``; SQLAlchemy has both) cannot raise: Python hands the exception to
  ``sys.unraisablehook``, which prints "Exception ignored in ..." with the traceback.

The command's own line already said it is stopping, so while it handles signals those two reports of our own
interrupt are dropped (`QuietInterruptedClose`, `Interrupts._unraisable`); every other one is printed as before. A
swallowed interrupt never reached the step, whose run would go on to its end: so the command raises SIGINT again
(`Interrupts.redeliver`), Dagster raises its interrupt at the next line Python runs, and the watcher does not count
that signal as the user's second.
"""

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from nemotron_assets.cli.console import console_stream

SIGNALS = (signal.SIGINT, signal.SIGTERM)
REDELIVER_AFTER_S = 0.05  # a swallowed interrupt raised again after this (`Interrupts.redeliver`)
EXIT_STATUS = 130  # 128 + SIGINT, the shell's convention for a command stopped by Ctrl-C


class Interrupted(Exception):
    """The command was stopped by a signal (its name in ``str``)."""


class Interrupts:
    """The signals of one command: ``signalled`` names the first one (None until then). A context manager; outside
    it, the signal handlers are the ones it found. Off the main thread (where Python delivers no signal), or made
    with ``handle_signals=False`` (the Python API: a notebook's Ctrl-C stays its own ``KeyboardInterrupt``, and a
    second one must not end the kernel), it does nothing and ``handling`` is False."""

    def __init__(self, handle_signals: bool = True) -> None:
        self.handle_signals = handle_signals
        self.signalled: str | None = None
        self._count = 0
        self._redelivered = 0  # SIGINTs this command raised itself (`redeliver`), not yet seen by the watcher
        self._previous: dict[int, object] = {}
        self._read_end = self._write_end = -1
        self._old_wakeup = -1
        self._pool_handler: logging.Handler | None = None
        self._old_unraisablehook = sys.unraisablehook
        self._notices = sys.stderr  # where the command's own notices go (`__enter__`)

    @property
    def handling(self) -> bool:
        return self._write_end >= 0

    def __enter__(self) -> "Interrupts":
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return self
        # The terminal, taken before any run: while a step runs, stderr is its captured output, whose copy to the
        # terminal ends with the process (a second signal's notice would be lost)
        self._notices = console_stream()
        self._read_end, self._write_end = os.pipe()
        os.set_blocking(self._write_end, False)
        self._old_wakeup = signal.set_wakeup_fd(self._write_end, warn_on_full_buffer=False)
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, _raise_keyboard_interrupt)
        self._pool_handler = QuietInterruptedClose(self.redeliver)
        POOL_LOGGER.addHandler(self._pool_handler)
        POOL_LOGGER.propagate = False
        self._old_unraisablehook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        threading.Thread(target=self._watch, name="signals", daemon=True).start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._write_end < 0:
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        POOL_LOGGER.removeHandler(self._pool_handler)
        POOL_LOGGER.propagate = True
        sys.unraisablehook = self._old_unraisablehook
        signal.set_wakeup_fd(self._old_wakeup)
        os.close(self._write_end)  # the watcher reads EOF and ends; it closes the read end
        self._write_end = -1

    def check(self) -> None:
        """Raise `Interrupted` if a signal came (call it after each run)."""
        if self.signalled:
            raise Interrupted(self.signalled)

    def redeliver(self) -> None:
        """Our interrupt was swallowed where it was raised: raise SIGINT again for Dagster to raise it anew. From
        another thread, a moment later, so that Python runs the handler once the code that swallowed it (this hook
        and its caller) is left; if it is swallowed again, it comes back here."""
        self._redelivered += 1

        def later() -> None:
            time.sleep(REDELIVER_AFTER_S)
            signal.raise_signal(signal.SIGINT)

        threading.Thread(target=later, name="redeliver", daemon=True).start()

    def _unraisable(self, unraisable) -> None:
        """``sys.unraisablehook`` while signals are handled: our interrupt raised in a finalizer is redelivered,
        without its report."""
        if _is_our_interrupt(unraisable.exc_value):
            self.redeliver()
        else:
            self._old_unraisablehook(unraisable)

    def _watch(self) -> None:
        try:
            while data := os.read(self._read_end, 64):
                for signum in data:
                    if signum in SIGNALS:
                        self._received(signal.Signals(signum).name)
        finally:
            os.close(self._read_end)

    def _received(self, name: str) -> None:
        if name == "SIGINT" and self._redelivered:  # ours (`redeliver`), not the user's
            self._redelivered -= 1
            return
        self._count += 1
        if self._count == 1:
            self.signalled = name
            print(f"\n{name}: stopping (builds in progress are killed, committed outputs stay done); "
                  "a second Ctrl-C exits at once", file=self._notices, flush=True)
            return
        print(f"{name} again: exiting now", file=self._notices, flush=True)
        os._exit(EXIT_STATUS)


def _raise_keyboard_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


class QuietInterruptedClose(logging.StreamHandler):
    """Prints ``sqlalchemy.pool``'s warnings and errors on stderr (as Python's last-resort handler would), except the
    one that reports our own interrupt raised inside a connection's close: that one is redelivered."""

    def __init__(self, redeliver: Callable[[], None]) -> None:
        super().__init__(sys.stderr)
        self.setLevel(logging.WARNING)
        self.redeliver = redeliver

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if _is_our_interrupt(error):
            self.redeliver()
            return False
        return super().filter(record)


def _is_our_interrupt(error: BaseException | None) -> bool:
    """Dagster's interrupt, raised by its signal handler (by name: importing Dagster here would slow every command)."""
    return type(error).__name__ == "DagsterExecutionInterruptedError"


POOL_LOGGER = logging.getLogger("sqlalchemy.pool")
