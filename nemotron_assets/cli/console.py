"""The command line's console: one short line per message instead of Dagster's full event log.

Dagster's console logger prints every event, and a failed step as a stack trace of a hundred lines in which the
one line that matters (the located error: dataset, file, line, field) is hard to find. ``compact_console`` prints
``HH:MM:SS step: message`` for the steps' own messages and one line for each failure or retry. The CLI selects it
through the run config and prints the located errors last itself; the full event log stays in the instance
(``dagster dev`` → Runs → the run id the CLI prints).
"""

import contextlib
import io
import logging
import os
import sys
import time
from collections.abc import Iterator

import dagster as dg

SHOWN_EVENTS = {"STEP_FAILURE": "FAILED", "STEP_UP_FOR_RETRY": "retrying", "RUN_FAILURE": "run failed"}


class CompactFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        meta = getattr(record, "dagster_meta", None) or {}
        step = _step_name(meta.get("step_key") or "")
        clock = time.strftime("%H:%M:%S", time.localtime(record.created))
        event = meta.get("dagster_event")
        message = meta.get("orig_message") or record.getMessage()
        if event is not None:
            message = f"{SHOWN_EVENTS[event.event_type_value]}: {_error_line(event) or message}"
        first, *rest = message.strip().splitlines() or [""]
        more = f" (+{len(rest)} lines)" if rest else ""
        return f"  {clock} {step + ': ' if step else ''}{first}{more}"


class CompactFilter(logging.Filter):
    """Keep the steps' own messages and failure/retry events; drop Dagster's bookkeeping events."""

    def filter(self, record: logging.LogRecord) -> bool:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event")
        return event is None or event.event_type_value in SHOWN_EVENTS


def _open_terminal() -> io.TextIOBase | None:
    """A second handle on this process's stderr as it is on import, before any step runs (None without one)."""
    try:
        return os.fdopen(os.dup(sys.__stderr__.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (AttributeError, OSError, ValueError):  # no stderr, or no file behind it
        return None


TERMINAL = _open_terminal()


def console_stream():
    """Where the console's lines go: the terminal itself, past Dagster's capture of a step's output.

    The compute log manager points a step's stdout and stderr at files and copies them to the terminal: Dagster's own
    with ``tail -F``, which it stops when the step ends, so a line the copy had not reached by then never reached the
    terminal (on a busy machine, every line of a short step was lost); the bundled instance's with a thread
    (core/runs.py ``MirroredComputeLogManager``), which ends with the process. So the lines are written to the handle on
    stderr taken on import, when stderr is still that file; the run's event log keeps them too. When stderr has been
    replaced since (a caller that captures the command's output), they go where it points now."""
    if TERMINAL is not None and sys.stderr is sys.__stderr__:
        with contextlib.suppress(OSError, ValueError):
            now, then = os.fstat(sys.stderr.fileno()), os.fstat(TERMINAL.fileno())
            if (now.st_dev, now.st_ino) == (then.st_dev, then.st_ino):
                return TERMINAL
    return sys.stderr


@dg.logger(config_schema={"log_level": dg.Field(str, default_value="INFO", is_required=False)},
           description="One line per message: the nemotron_assets command line's console.")
def compact_console(init_context) -> logging.Logger:
    logger = logging.Logger("nemotron_assets", level=init_context.logger_config["log_level"].upper())
    handler = logging.StreamHandler(console_stream())  # chosen when the run starts, before any step
    handler.setFormatter(CompactFormatter())
    handler.addFilter(CompactFilter())
    logger.addHandler(handler)
    return logger


def _step_name(step_key: str) -> str:
    """``sample__samples__pretrain_shard`` -> ``pretrain_shard``: the blend is in every line's context already."""
    return step_key.rsplit("__", 1)[-1]


def _error_line(event) -> str:
    data = event.event_specific_data
    error = getattr(data, "error", None)
    while error is not None and error.cause is not None and error.cls_name == "DagsterExecutionStepExecutionError":
        error = error.cause
    if error is None:
        return ""
    if error.cls_name == "DagsterExecutionInterruptedError":  # the step unwound after a signal (cli/interrupts.py)
        return "interrupted"
    return error.message.split(": ", 1)[-1] if error.cls_name == "Failure" else error.message


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Inside, file descriptor 1 is the process's stderr: whatever this process, its threads or the processes it
    starts meanwhile write to stdout (Dagster's compute-log mirrors, a library's print, a forked build) goes to
    stderr, so that a command whose stdout is one JSON document prints nothing else there. Restored on leaving."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(kept, 1)
        os.close(kept)
