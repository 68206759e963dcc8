"""A step's output, with the bundled instance (core/runs.py ``MirroredComputeLogManager``, named in its
``dagster.yaml``): Python's prints, a library's writes to the file descriptor and a forked child's output all land in
Dagster's compute-log files, which the UI reads, and reach the process's own stdout and stderr, in order, copied by a
thread: no ``tail`` or watcher process is started. Each case runs in a fresh process, as ``dagster asset materialize``
or a run worker does, with its stdout and stderr collected here."""

import json
import subprocess
import sys

from nemotron_assets_tests.conftest import REPO

STEP = """
import json, os, sys
from pathlib import Path
import dagster as dg

@dg.asset
def talkative():
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    for i in range(200):
        print(f"print {i}")
    sys.stdout.flush()
    os.write(2, b"written to fd 2\\n")
    pid = os.fork()
    if pid == 0:
        os.write(1, b"from a forked child\\n")
        os._exit(0)
    os.waitpid(pid, 0)
    print("after the child", flush=True)
    Path(sys.argv[2]).write_text(json.dumps(children))

with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    assert type(instance.compute_log_manager).__name__ == "MirroredComputeLogManager"
    result = dg.materialize([talkative], instance=instance)
    print("RUN", result.run_id, flush=True)
"""


def test_a_steps_output_reaches_the_compute_logs_and_the_process_without_helper_processes(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    children = tmp_path / "children.json"
    done = subprocess.run([sys.executable, "-c", STEP, str(home), str(children)], cwd=REPO, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(children.read_text()) == []  # no tail, no watcher: nothing but the step's own fork

    printed = [f"print {i}" for i in range(200)] + ["from a forked child", "after the child"]
    out_lines = done.stdout.splitlines()
    assert [line for line in out_lines if line in printed] == printed  # every line, in order
    assert "written to fd 2" in done.stderr

    captured_out = "".join(p.read_text() for p in (home / "storage").rglob("*.out"))
    captured_err = "".join(p.read_text() for p in (home / "storage").rglob("*.err"))
    assert [line for line in captured_out.splitlines() if line in printed] == printed
    assert "written to fd 2" in captured_err
    assert list((home / "storage").rglob("*.complete"))  # the UI's sign that the capture ended


def test_a_stream_without_a_file_descriptor_is_left_alone(tmp_path):
    """A notebook's stdout has no file descriptor: the step's prints reach it as they would without a capture."""
    import contextlib
    import io

    from nemotron_assets.core.runs import _mirrored

    notebook = io.StringIO()
    with contextlib.redirect_stdout(notebook), _mirrored(sys.stdout, str(tmp_path / "step.out")):
        print("a step's print")
    assert notebook.getvalue() == "a step's print\n"
