"""Forked calls: values and errors come back to the parent, messages arrive as they are sent, at most ``processes``
run at once, a killed process fails only its own call, and leaving the context ends the processes still running.
The children are real forked processes; what they did is seen through files they write and process ids they
return."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nemotron_assets.core.workers import ForkedCallDied, ForkedCalls, fork_available
from nemotron_assets.sources.errors import InputError
from nemotron_assets_tests.process_helpers import process_ended, wait_for

pytestmark = pytest.mark.skipif(not fork_available(), reason="needs fork")


def test_each_value_comes_back_from_a_forked_process():
    loaded = {"tokenizer": "parsed before the fork"}  # the children see what the parent had loaded
    work = {name: (lambda report, name=name: (name, os.getpid(), loaded["tokenizer"])) for name in "abc"}
    with ForkedCalls(work, 2, on_message=lambda *_: None) as calls:
        results = {name: calls.result(name) for name in ("c", "a", "b")}  # any order

    assert {name: value[0] for name, value in results.items()} == {"a": "a", "b": "b", "c": "c"}
    pids = {value[1] for value in results.values()}
    assert len(pids) == 2 and os.getpid() not in pids  # two processes shared the three calls
    assert {value[2] for value in results.values()} == {"parsed before the fork"}


def test_messages_reach_the_parent_named_by_their_call():
    heard: list[tuple[str, object]] = []

    def call(report):
        report("started")
        report({"rows": 10})
        return "done"

    with ForkedCalls({"shard_00000": call}, 1, on_message=lambda name, message: heard.append((name, message))) as calls:
        assert calls.result("shard_00000") == "done"

    assert heard == [("shard_00000", "started"), ("shard_00000", {"rows": 10})]


def test_an_error_comes_back_as_the_same_exception_with_the_childs_traceback():
    def bad(report):
        raise InputError("not valid JSON", path="/data/web.jsonl", line=7, field="text")

    with ForkedCalls({"bad": bad, "good": lambda report: 42}, 1, on_message=lambda *_: None) as calls:
        with pytest.raises(InputError) as raised:
            calls.result("bad")
        assert calls.result("good") == 42  # one failing call does not stop the others

    assert str(raised.value) == "/data/web.jsonl:7 field 'text': not valid JSON"
    assert raised.value.__notes__[0].startswith("in the forked process:")
    assert "raise InputError" in raised.value.__notes__[0]


def test_an_exception_that_cannot_be_pickled_comes_back_as_a_runtime_error_naming_it():
    class Local(Exception):  # a class defined in a function cannot be pickled
        pass

    def bad(report):
        raise Local("lost in translation")

    with ForkedCalls({"bad": bad}, 1, on_message=lambda *_: None) as calls:
        with pytest.raises(RuntimeError, match="Local: lost in translation"):
            calls.result("bad")


def test_a_killed_process_fails_its_call_and_a_new_one_runs_the_rest():
    def killed(report):
        os.kill(os.getpid(), signal.SIGKILL)

    work = {"victim": killed, "next": lambda report: os.getpid()}
    with ForkedCalls(work, 1, on_message=lambda *_: None) as calls:
        with pytest.raises(ForkedCallDied, match=r"victim ended \(exit code -9\) without a result"):
            calls.result("victim")
        assert calls.result("next") != os.getpid()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_process_ended_by_a_signal_this_one_never_gets_still_fails_its_call(signum):
    """A child dead of SIGINT or SIGTERM: the wait gives the same signal time to reach this process too (Ctrl-C
    reaches the whole process group), and when it does not come, the call fails as a dead process's, to be
    retried."""
    def signalled(report):
        os.kill(os.getpid(), signum)

    with ForkedCalls({"victim": signalled}, 1, on_message=lambda *_: None) as calls:
        with pytest.raises(ForkedCallDied, match=rf"victim ended \(exit code -{int(signum)}\) without a result"):
            calls.result("victim")


def test_no_more_than_processes_calls_run_at_once(tmp_path):
    """Each call appends 'start'/'end' lines to one file (O_APPEND writes are atomic) and ends only once two calls
    have started: the count of calls running never exceeds the limit, and the limit is reached."""
    log = tmp_path / "log"

    def call(report, name):
        with open(log, "a") as out:
            out.write(f"start {name}\n")
        deadline = time.monotonic() + 60
        while log.read_text().count("start") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(log, "a") as out:
            out.write(f"end {name}\n")
        return name

    work = {name: (lambda report, name=name: call(report, name)) for name in "abcde"}
    with ForkedCalls(work, 2, on_message=lambda *_: None) as calls:
        assert [calls.result(name) for name in "abcde"] == list("abcde")

    running, most = 0, 0
    for line in log.read_text().splitlines():
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    assert most == 2


class Stop(Exception):
    pass


def _raise_stop(signum, frame):
    raise Stop


def test_leaving_the_context_ends_the_calls_still_running_whatever_handlers_the_parent_installed(tmp_path):
    """The parent turns SIGTERM and SIGINT into exceptions (as Dagster and test runners do); the child must still end
    when the context is left, not report the exception and wait for more work."""
    pid_file = tmp_path / "pid"

    def forever(report):
        pid_file.write_text(str(os.getpid()))
        while True:
            time.sleep(1)

    handlers = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with ForkedCalls({"forever": forever, "never started": lambda report: None}, 1, on_message=lambda *_: None):
            deadline = time.monotonic() + 30
            # the pid written, not only the file created: leaving the context between the two ended the child
            # before it wrote, and the test read an empty file (once, in a fresh-clone CI run on a busy machine)
            while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert not Path(f"/proc/{pid_file.read_text()}").exists()  # ended and reaped


def test_only_given_names_have_results_and_each_result_is_taken_once():
    with ForkedCalls({"a": lambda report: 1}, 1, on_message=lambda *_: None) as calls:
        with pytest.raises(KeyError, match="no call named 'b'"):
            calls.result("b")
        assert calls.result("a") == 1
        with pytest.raises(KeyError, match="no call named 'a'"):
            calls.result("a")


def test_a_child_whose_parent_was_killed_ends_at_its_next_report(tmp_path):
    """The parent is killed (``kill -9``) while its two children report: each then finds its pipe closed and ends,
    including the first one, which the fork of the second copied its pipe's parent end into."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time\n"
         "from nemotron_assets.core.workers import ForkedCalls\n"
         "def reporting(report):\n"
         "    os.write(1, f'{os.getpid()}\\n'.encode())  # one write: the two children's lines never mix\n"
         "    while True:\n"
         "        report('still here')\n"
         "        time.sleep(0.05)\n"
         "with ForkedCalls({'a': reporting, 'b': reporting}, 2, on_message=lambda *_: None) as calls:\n"
         "    calls.result('a')\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        children = [int(parent.stdout.readline()) for _ in range(2)]
        parent.kill()
        parent.wait()
        wait_for(lambda: all(process_ended(pid) for pid in children), "the children to end with their parent")
    finally:
        parent.kill()


# The parent of the two signal tests below: SIGINT raises Stop (as Dagster's handler raises in a step), and every
# signal Python catches is written to a wakeup fd (as the command line counts them, cli/interrupts.py).
PARENT_HANDLER_AND_WAKEUP_FD = """
import os, signal

class Stop(Exception):
    pass

def stop(signum, frame):
    raise Stop

signal.signal(signal.SIGINT, stop)
read_end, write_end = os.pipe()
os.set_blocking(read_end, False)
os.set_blocking(write_end, False)
signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
"""


def test_a_signal_reaching_a_child_as_it_is_forked_ends_it_without_the_parents_handler():
    """Ctrl-C reaches the whole process group, so also a child that has just been forked, before it could put its
    own signal handling in place. There the parent's handler (Dagster's raises an exception, cli/interrupts.py's
    wakeup fd counts signals) must not run: the child ends quietly, the parent hears nothing but its death. The
    signal is sent by an at-fork callback in the child, the earliest a real one could arrive."""
    script = PARENT_HANDLER_AND_WAKEUP_FD + """
from nemotron_assets.core.workers import ForkedCallDied, ForkedCalls

os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGINT))
with ForkedCalls({"a": lambda report: "ran"}, 1, on_message=lambda *_: None) as calls:
    try:
        print(calls.result("a"))
    except ForkedCallDied as exc:
        print(exc)
try:
    print("wakeup fd:", list(os.read(read_end, 64)))
except BlockingIOError:
    print("wakeup fd: nothing")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the process of a ended (exit code -2) without a result", "wakeup fd: nothing"]
    assert done.stderr == ""


def test_ctrl_c_that_reaches_a_child_first_interrupts_the_wait_instead_of_failing_the_call():
    """Ctrl-C reaches every process of the group, but not at the same instant: a child can be dead of it before
    this process's handler has run. The wait must end with the handler's interrupt, not fail the call as one to
    retry (a run was once recorded "up for retry" before it failed as interrupted). Here the child ends itself with
    SIGINT and this process's own SIGINT comes 0.3 s later."""
    script = PARENT_HANDLER_AND_WAKEUP_FD + """
import threading
from nemotron_assets.core.workers import ForkedCallDied, ForkedCalls

with ForkedCalls({"a": lambda report: os.kill(os.getpid(), signal.SIGINT)}, 1, on_message=lambda *_: None) as calls:
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    try:
        calls.result("a")
    except Stop:
        print("interrupted")
    except ForkedCallDied as exc:
        print(exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["interrupted"]


def test_ctrl_c_reaches_forked_pool_workers_with_the_default_action_not_the_parents_handler():
    """``in_order`` with fork: Ctrl-C (SIGINT to the process group, here sent by a task) ends the workers; they do
    not run the parent's handler, which would write the signal to its wakeup fd once per worker (the command line
    took those for a second and third Ctrl-C and exited at once, cli/interrupts.py)."""
    script = PARENT_HANDLER_AND_WAKEUP_FD + """
import time
from nemotron_assets.core.workers import in_order

def task(i):
    if i == 3:
        os.killpg(0, signal.SIGINT)
    time.sleep(0.2)
    return i

try:
    for _ in in_order(task, [(i,) for i in range(20)], 2, start="fork"):
        pass
except Stop:
    print("stopped")
time.sleep(0.5)
print("wakeup fd:", list(os.read(read_end, 64)))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["stopped", f"wakeup fd: [{int(signal.SIGINT)}]"]  # the parent's own only
    assert done.stderr == ""


def test_forked_pool_workers_end_when_their_parent_is_killed():
    """``in_order``'s workers wait for tasks on a pipe they hold both ends of, so nothing would tell them that their
    parent was killed (``kill -9``, or `ForkedCalls.close` killing a shard build that normalizes on two cores): the
    kernel kills them with it."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import os, time\n"
         "from nemotron_assets.core.workers import in_order\n"
         "def task(i):\n"
         "    time.sleep(0.05)\n"
         "    return os.getpid()\n"
         "workers = set()\n"
         "for pid in in_order(task, [(i,) for i in range(100_000)], 2, start='fork'):\n"
         "    workers.add(pid)\n"
         "    if len(workers) == 2:\n"
         "        print(*workers, flush=True)\n"
         "        time.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2
        parent.kill()
        parent.wait()
        wait_for(lambda: all(process_ended(pid) for pid in workers), "the workers to end with their parent")
    finally:
        parent.kill()


class _Interrupted(Exception):
    pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # what Python printed, on purpose
def test_a_signal_whose_exception_python_ignored_still_ends_the_wait():
    """A handler that raises (Dagster's, in a step) may be run inside a ``__del__`` or a weakref callback, where
    Python prints "Exception ignored" and goes on: the wait for the builds runs the handler again itself."""
    def slow_call(report):
        report("started")
        time.sleep(10)
        return "finished"

    class DiesSlowly:
        def __del__(self):
            time.sleep(0.5)  # the signal lands here: its handler's exception is ignored

    def on_message(_name, _message):
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()
        DiesSlowly()  # gone at once: __del__ runs here, in the wait

    def interrupt(signum, frame):
        raise _Interrupted(signum)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        started = time.monotonic()
        with ForkedCalls({"slow": slow_call}, 1, on_message=on_message) as calls:
            with pytest.raises(_Interrupted):
                calls.result("slow")
        assert time.monotonic() - started < 3  # not the call's 10 s
        assert signal.getsignal(signal.SIGTERM) is interrupt  # the handler the wait found is back
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_forked_pool_workers_inherit_what_arrow_loads_at_its_first_conversion():
    """``in_order`` with fork, in a process that has imported pyarrow: pyarrow imports pandas (when installed) at a
    process's first conversion of Python objects, and the tasks send back tables made from Python rows. The parent
    loads it before the fork, so no worker imports it again (~0.15 s each)."""
    pytest.importorskip("pandas")
    script = """
import sys
import pyarrow
from nemotron_assets.core.workers import in_order

def pandas_was_there(_task):
    return "pandas" in sys.modules

assert "pandas" not in sys.modules
print(list(in_order(pandas_was_there, [(task,) for task in range(4)], 2, start="fork")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[True, True, True, True]"]
