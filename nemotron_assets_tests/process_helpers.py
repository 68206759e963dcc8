"""Watching real processes end, for the tests of forked processes (core/test_parallel_calls_in_forked_processes.py)."""

import time
from collections.abc import Callable
from pathlib import Path


def process_ended(pid: int) -> bool:
    """The process has ended (exited, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_for(condition: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fail the test naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
