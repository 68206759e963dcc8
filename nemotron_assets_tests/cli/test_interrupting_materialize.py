"""Ctrl-C and SIGTERM stop ``materialize`` (nemotron_assets/cli/interrupts.py), each case in a real subprocess: the
builds in progress are killed and their staging removed, committed shards stay done, the run is recorded as not
successful, one line says how to go on, the exit status is 130; a second signal exits at once. A re-run then
completes and ``verify`` passes."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dagster as dg
import pytest

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.process_helpers import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def env(tmp_path, cli_env) -> dict:
    """A blend of one dataset in 4 shards of ~9 MB (3.2 M tokens), seconds each with the hf tokenizer backend."""
    blends = tmp_path / "blends"
    blends.mkdir()
    text = (REPO / "blends" / "sample_data" / "wiki" / "part-00000.jsonl").read_text()
    with open(blends / "big.jsonl", "w") as big:
        for _ in range(560):
            big.write(text)
    (blends / "big.yaml").write_text("shard_size: 9MB\ndatasets:\n  - {name: big, path: big.jsonl}\n")
    return dict(cli_env, NEMOTRON_BLENDS_DIR=str(blends))


class Command:
    """``materialize big`` in its own process group, its stderr collected line by line."""

    def __init__(self, env: dict, *args: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "nemotron_assets", "materialize", "big", "--tokenizer-backend", "hf",
             "--shards-per-run", "2", *args], env=env, cwd=REPO,
            stdout=subprocess.PIPE if "--json" in args else subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        self._reader = threading.Thread(target=lambda: self.lines.extend(self.process.stderr), daemon=True)
        self._reader.start()

    def wait_for(self, predicate, what: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.process.poll() is None, f"the command ended before {what}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"no {what} after {timeout} s:\n{self.stderr}"
            time.sleep(0.02)

    def exit_after(self, signalled: float) -> tuple[int, float]:
        code = self.process.wait(timeout=60)
        seconds = time.monotonic() - signalled
        self._reader.join(timeout=10)
        return code, seconds

    @property
    def stderr(self) -> str:
        return "".join(self.lines)


def _second_run_building(command: Command, data: Path) -> bool:
    first_done = any("pretrain_shard big/shard_00000...big/shard_00001: ok" in line for line in command.lines)
    return first_done and bool(list((data / ".staging").glob("*/shard.bin")))


@contextlib.contextmanager
def _instance(home: str):
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = home
    try:
        with dg.DagsterInstance.get() as instance:
            yield instance
    finally:
        if previous is None:
            del os.environ["DAGSTER_HOME"]
        else:
            os.environ["DAGSTER_HOME"] = previous


def _runs(home: str) -> list[dg.DagsterRun]:
    with _instance(home) as instance:
        return list(reversed(instance.get_runs()))


def _failure_message(home: str, run_id: str) -> str:
    """The run's failure message; it must not have been retried."""
    with _instance(home) as instance:
        kinds = {dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.STEP_UP_FOR_RETRY}
        events = [r.dagster_event for r in instance.all_logs(run_id, of_type=kinds)]
        assert [e.event_type for e in events] == [dg.DagsterEventType.RUN_FAILURE]
        return events[0].message


def test_an_interrupted_json_command_prints_its_document(env):
    data = Path(env["NEMOTRON_DATA_ROOT"])
    command = Command(env, "--json")
    command.wait_for(lambda: _second_run_building(command, data), "second shard run building")
    os.killpg(command.process.pid, signal.SIGINT)
    code, _ = command.exit_after(time.monotonic())
    assert code == 130, command.stderr[-3000:]
    document = json.loads(command.process.stdout.read())
    assert (document["ok"], document["exit_status"], document["interrupted"]) == (False, 130, "SIGINT")
    # every run of the command, as the instance recorded it (the interrupted one may have ended either way)
    runs = _runs(env["DAGSTER_HOME"])
    assert [(run["run_id"], run["success"]) for run in document["runs"]] == [
        (run.run_id, run.status == dg.DagsterRunStatus.SUCCESS) for run in runs]
    assert document["runs"][1]["success"] and document["assets"]["pretrain_shard"]["built"][:2] == [
        "big/shard_00000", "big/shard_00001"]


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nemotron_assets", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize(("signum", "to_group"), [(signal.SIGINT, True), (signal.SIGTERM, False)],
                         ids=["ctrl-c-to-the-process-group", "sigterm-to-the-command"])
def test_a_signal_stops_the_build_keeps_committed_shards_and_a_rerun_completes(env, signum, to_group):
    data = Path(env["NEMOTRON_DATA_ROOT"])
    command = Command(env)
    command.wait_for(lambda: _second_run_building(command, data), "second shard run building")
    builders = _forked_builders(command.process.pid)
    assert builders, "the shard run builds in forked processes"
    signalled = time.monotonic()
    (os.killpg if to_group else os.kill)(command.process.pid, signum)
    code, seconds = command.exit_after(signalled)

    assert code == 130, command.stderr[-3000:]
    assert seconds < 5, f"stopped {seconds:.1f} s after the signal"
    # Ctrl-C reaches the whole process group: the bundled instance starts no compute log helper (core/runs.py), so
    # none prints a KeyboardInterrupt traceback (Dagster's watch_orphans.py did, twice)
    assert "Traceback" not in command.stderr, command.stderr[-3000:]
    name = signal.Signals(signum).name
    assert f"interrupted by {name} after" in command.stderr
    assert "DagsterExecutionInterruptedError" not in command.stderr  # a step that unwound says "interrupted"
    assert "2 run(s) finished" in command.stderr, command.stderr  # the split and the first shard run
    assert ("to go on, run the same command again: python -m nemotron_assets materialize big --tokenizer-backend hf "
            "--shards-per-run 2") in command.stderr
    assert "megatron_blend" not in command.stderr  # the command did not go on to the next step
    assert not list((data / ".staging").iterdir())  # the killed builds' staging is gone
    receipts = data / "big" / "pretrain" / "big" / ".receipts"
    assert (receipts / "shard_00000.json").exists() and (receipts / "shard_00001.json").exists()
    assert not (receipts / "shard_00002.json").exists() and not (receipts / "shard_00003.json").exists()
    runs = _runs(env["DAGSTER_HOME"])
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.SUCCESS,
                                            dg.DagsterRunStatus.FAILURE]
    assert "interrupted" in _failure_message(env["DAGSTER_HOME"], runs[-1].run_id)  # recorded why, not retried
    time.sleep(1)
    assert not [pid for pid in builders if _alive(pid)], "forked builds outlived the command"
    if signum != signal.SIGINT:  # what follows depends on the state left, not on the signal: checked once
        return

    again = _cli(env, "materialize", "big", "--shards-per-run", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "big/shard_00000: up to date" in again.stderr and "big/shard_00002: up to date" not in again.stderr
    assert _cli(env, "verify", "big").returncode == 0


def test_a_second_ctrl_c_exits_at_once(env):
    data = Path(env["NEMOTRON_DATA_ROOT"])
    command = Command(env)
    command.wait_for(lambda: bool(list((data / ".staging").glob("*/shard.bin"))), "a shard building")
    os.kill(command.process.pid, signal.SIGINT)
    command.wait_for(lambda: any("a second Ctrl-C exits at once" in line for line in command.lines), "the notice")
    signalled = time.monotonic()
    os.kill(command.process.pid, signal.SIGINT)
    code, seconds = command.exit_after(signalled)
    assert code == 130 and seconds < 2, command.stderr[-3000:]
    assert "SIGINT again: exiting now" in command.stderr or "interrupted by SIGINT" in command.stderr

    again = _cli(env, "materialize", "big")
    assert again.returncode == 0, again.stderr[-3000:]
    assert _cli(env, "verify", "big").returncode == 0


def _forked_builders(pid: int) -> list[int]:
    """The command's children that run its own code: processes forked from it (same command line)."""
    command_line = Path(f"/proc/{pid}/cmdline").read_bytes()
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children if _read(Path(f"/proc/{child}/cmdline")) == command_line]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def _alive(pid: int) -> bool:
    stat = _read(Path(f"/proc/{pid}/stat"))
    return bool(stat) and stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def test_the_interrupt_module_leaves_the_handlers_it_found():
    from nemotron_assets.cli.interrupts import Interrupts

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with Interrupts():
        assert signal.getsignal(signal.SIGINT) is not before[signal.SIGINT]
    assert {s: signal.getsignal(s) for s in before} == before


def test_our_interrupt_inside_a_database_connection_close_prints_no_traceback(capsys):
    """Ctrl-C can land while SQLAlchemy closes one of the instance's connections: Dagster's interrupt is raised there,
    and SQLAlchemy logs it with a traceback and goes on (a fresh-clone CI run caught it once). While the command handles
    signals that record is dropped; the logger's other errors still print, and the logger is as it was afterwards."""
    import logging

    from dagster._core.errors import DagsterExecutionInterruptedError
    from sqlalchemy.pool import NullPool

    from nemotron_assets.cli.interrupts import Interrupts

    pool_logger = logging.getLogger(f"{NullPool.__module__}.{NullPool.__name__}")  # how SQLAlchemy names it
    parent = logging.getLogger("sqlalchemy.pool")
    handlers, propagate = parent.handlers[:], parent.propagate

    def closing_fails_with(error: BaseException) -> None:
        try:
            raise error
        except BaseException:
            pool_logger.error("Exception closing connection %r", "<sqlite3.Connection>", exc_info=True)

    with Interrupts() as interrupts:
        with pytest.raises(KeyboardInterrupt):  # redelivered: Dagster's handler would raise its interrupt in the step
            closing_fails_with(DagsterExecutionInterruptedError())
            _sleep_until_a_signal()
        closing_fails_with(OSError("disk I/O error"))
        wait_for(lambda: interrupts._redelivered == 0, "the watcher to read the redelivered SIGINT")
        assert interrupts.signalled is None  # not counted as a signal of the user's
    err = capsys.readouterr().err
    assert "DagsterExecutionInterruptedError" not in err
    assert err.count("Exception closing connection") == 1 and "OSError: disk I/O error" in err
    assert (parent.handlers, parent.propagate) == (handlers, propagate)


def test_our_interrupt_inside_a_finalizer_prints_no_traceback(capsys, monkeypatch):
    """Ctrl-C can land in a finalizer (fresh-clone CI runs caught SQLAlchemy's ``_collection_gced`` weakref callback):
    Python cannot raise there and prints "Exception ignored in" with the traceback, and the step never hears of it.
    While the command handles signals our interrupt is raised again (here our own handler's ``KeyboardInterrupt``)
    and its report dropped; any other error of a finalizer still prints, and the hook is as it was afterwards."""
    import gc
    import sys

    from dagster._core.errors import DagsterExecutionInterruptedError

    from nemotron_assets.cli.interrupts import Interrupts

    class FailsWhenCollected:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        def __del__(self) -> None:
            raise self.error

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's own, which prints (not pytest's)
    with Interrupts() as interrupts:
        with pytest.raises(KeyboardInterrupt):  # redelivered: Dagster's handler would raise its interrupt in the step
            FailsWhenCollected(DagsterExecutionInterruptedError())
            _sleep_until_a_signal()
        FailsWhenCollected(OSError("disk I/O error"))
        gc.collect()
        wait_for(lambda: interrupts._redelivered == 0, "the watcher to read the redelivered SIGINT")
        assert interrupts.signalled is None  # not counted as a signal of the user's
    err = capsys.readouterr().err
    assert "DagsterExecutionInterruptedError" not in err
    assert err.count("Exception ignored in") == 1 and "OSError: disk I/O error" in err
    assert sys.unraisablehook is sys.__unraisablehook__


def _sleep_until_a_signal(seconds: float = 10.0) -> None:
    """Python code running until a signal's handler raises (it runs between two lines, in this thread)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    raise AssertionError(f"no signal within {seconds} s")
