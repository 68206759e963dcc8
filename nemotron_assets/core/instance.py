"""Opening the Dagster instance from the command line, safely.

- **One initialisation at a time.** The first command on a fresh ``DAGSTER_HOME`` creates the sqlite schema. Two
  commands started together would race on it (``table alembic_version already exists``), so the instance is opened
  and its storages are initialised under an exclusive file lock (``$DAGSTER_HOME/.nemotron-instance.lock``).
  The same lock lets one CLI command run several runs at once once the schema exists.
- **Runs a killed command left behind.** A run that our CLI executes in its own process is tagged with that
  process (processes.py). If the process was killed (``kill -9``, a closed terminal), Dagster still shows the run
  ``STARTED`` forever; the next command marks such runs failed, saying why.
"""

import contextlib
import fcntl
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from nemotron_assets.core import settings
from nemotron_assets.core.processes import owner_alive
from nemotron_assets.core.runs import terminal_instance

LOCK_FILE = ".nemotron-instance.lock"
LAUNCHED_BY_TAG = "nemotron/launched_by"
PROCESS_TAG = "nemotron/cli_process"  # owner token of the CLI process executing the run in-process
SAMPLE_TAG = "nemotron/sample"


class InstanceError(RuntimeError):
    """DAGSTER_HOME does not point at a usable instance folder; the message says what to set."""


def dagster_home(*, launching: bool = False) -> Path:
    """``DAGSTER_HOME``, or the deployment's default instance folder (which then becomes ``DAGSTER_HOME``)."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        home = str(settings.default_dagster_home())
        if settings.deployment() == "cluster":
            settings.check_cluster_environment(need_launcher=launching)
        os.environ["DAGSTER_HOME"] = home
        print(f"DAGSTER_HOME not set; using {home}", file=sys.stderr)
    if not Path(home).is_absolute() or not Path(home, "dagster.yaml").is_file():
        raise InstanceError(f"DAGSTER_HOME={home} must be an absolute path to a folder holding dagster.yaml")
    return Path(home)


@contextlib.contextmanager
def instance_lock(home: Path) -> Iterator[None]:
    """Exclusive, process-wide lock on the instance folder (released when the holder exits, even if killed)."""
    with open(home / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def open_instance(*, launching: bool = False, console_level: str | None = None) -> dg.DagsterInstance:
    """The instance of ``DAGSTER_HOME`` with every storage initialised, under the lock. With ``console_level``:
    made for runs executed in this process and shown on a terminal at that level (runs.py ``terminal_instance``)."""
    home = dagster_home(launching=launching)
    with instance_lock(home):
        instance = dg.DagsterInstance.get() if console_level is None else terminal_instance(home, console_level)
        instance.get_runs(limit=1)  # run storage
        instance.get_dynamic_partitions("nemotron__init")  # event log storage (its index shard)
        instance.all_instigator_state()  # schedule storage
    return instance


def fail_runs_of_dead_processes(instance: dg.DagsterInstance) -> list[str]:
    """Mark failed the runs our CLI executed in a process that no longer exists; returns their ids."""
    unfinished = [dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED]
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=unfinished, tags={LAUNCHED_BY_TAG: "cli"}))
    failed = []
    for run in runs:
        token = run.tags.get(PROCESS_TAG)
        if token is None or owner_alive(token) is not False:
            continue  # launched elsewhere (a Ray job), or its process still runs
        instance.report_run_failed(run, f"the nemotron_assets command that executed this run (process {token}) "
                                        "is gone: it was killed before the run finished")
        failed.append(run.run_id)
    return failed
