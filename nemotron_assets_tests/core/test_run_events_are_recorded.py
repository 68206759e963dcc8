"""The bundled instance records runs' events through core/runs.py ``KeptOpenSqliteEventLogStorage`` (its
``dagster.yaml`` names it): Dagster's own sqlite files and tables, so Dagster's default storage reads back every
event, asset materialization and check it wrote; in the folder of the instance that opened it, whatever
``DAGSTER_HOME`` says; with a handful of files open however many runs it reads; and a forked process opens its own
connections."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from nemotron_assets.core.runs import KeptOpenSqliteEventLogStorage
from nemotron_assets_tests.conftest import REPO

PARTS = dg.StaticPartitionsDefinition(["a", "b"])


@dg.asset(partitions_def=PARTS, check_specs=[dg.AssetCheckSpec("positive", asset="toy")])
def toy(context: dg.AssetExecutionContext):
    context.log.info(f"toy {context.partition_key}")
    yield dg.Output(1)
    yield dg.AssetCheckResult(passed=True, check_name="positive")


def home_with(folder: Path, config: str) -> Path:
    folder.mkdir()
    (folder / "dagster.yaml").write_text(config)
    return folder


def bundled_home(tmp_path: Path) -> Path:
    return home_with(tmp_path / "dagster_home", (REPO / "dagster_home" / "dagster.yaml").read_text())


def build(instance: dg.DagsterInstance, partition: str) -> str:
    return dg.materialize([toy], instance=instance, partition_key=partition).run_id


def events(instance: dg.DagsterInstance, run_id: str) -> list[tuple]:
    return [(e.dagster_event_type, e.user_message) for e in instance.all_logs(run_id)]


def dagsters_own_reader(home: Path) -> dg.DagsterInstance:
    """The same folder through Dagster's default storage: a configuration without our event log lines."""
    (home / "plain.yaml").write_text("telemetry:\n  enabled: false\n")
    return dg.DagsterInstance.from_config(str(home), config_filename="plain.yaml")


def test_dagsters_own_storage_reads_back_every_event_materialization_and_check(tmp_path):
    home = bundled_home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as ours:
        assert isinstance(ours.event_log_storage, KeptOpenSqliteEventLogStorage)
        run_ids = [build(ours, "a"), build(ours, "b")]
        written = {run_id: events(ours, run_id) for run_id in run_ids}
    with dagsters_own_reader(home) as theirs:
        assert type(theirs.event_log_storage).__name__ == "SqliteEventLogStorage"
        assert {run_id: events(theirs, run_id) for run_id in run_ids} == written
        for run_id in run_ids:
            kinds = {kind for kind, _ in written[run_id]}
            assert {dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION,
                    dg.DagsterEventType.RUN_SUCCESS} <= kinds
            assert theirs.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
        assert theirs.get_materialized_partitions(dg.AssetKey("toy")) == {"a", "b"}  # the index's asset records
        check = theirs.event_log_storage.get_latest_asset_check_execution_by_key([
            dg.AssetCheckKey(dg.AssetKey("toy"), "positive")])
        assert check[dg.AssetCheckKey(dg.AssetKey("toy"), "positive")].run_id == run_ids[-1]
    for path in (home / "history" / "runs").glob("*.db"):
        with sqlite3.connect(path) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",), path.name


def test_a_new_runs_file_is_the_file_dagster_makes(tmp_path):
    ours = bundled_home(tmp_path)
    theirs = home_with(tmp_path / "plain_home", "telemetry:\n  enabled: false\n")
    for home in (ours, theirs):
        with dg.DagsterInstance.from_config(str(home)) as instance:
            build(instance, "a")
            build(instance, "b")  # ours: the second run's file is written from the first one's empty copy

    def schema(home: Path) -> list:
        found = []
        for path in sorted((home / "history" / "runs").glob("*.db"), key=os.path.getmtime):
            if path.name == "index.db":
                continue
            with sqlite3.connect(path) as db:
                found.append((db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall(),
                               db.execute("SELECT version_num FROM alembic_version").fetchall(),
                               db.execute("PRAGMA journal_mode").fetchone()))
        return found

    assert schema(ours) == schema(theirs)
    assert len(schema(ours)) == 2 and schema(ours)[0][2] == ("wal",)


def test_an_instance_opened_by_its_folder_records_there_whatever_dagster_home_says(tmp_path, monkeypatch):
    home = bundled_home(tmp_path)
    elsewhere = home_with(tmp_path / "elsewhere", "telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(elsewhere))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run_id = build(instance, "a")
    assert (home / "history" / "runs" / f"{run_id}.db").is_file()
    assert not (elsewhere / "history").exists()


def test_reading_many_runs_keeps_a_handful_of_files_open(tmp_path):
    home = bundled_home(tmp_path)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run_ids = [build(instance, partition) for partition in ["a", "b"] * 5]
        for run_id in run_ids:
            assert events(instance, run_id)
        runs_folder = str(home / "history" / "runs")
        open_files = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                      if os.path.exists(f"/proc/self/fd/{fd}")}
        open_runs = {Path(path).name for path in open_files if path.startswith(runs_folder) and
                     path.endswith(".db") and not path.endswith("index.db")}
        assert 0 < len(open_runs) <= KeptOpenSqliteEventLogStorage.KEEP_OPEN


#: In a fresh interpreter, as a command that forks its builds: one run, a fork that runs another through the same
#: storage object, one more run in the parent. Prints the child's exit status and the three run ids.
FORKING = """
import json, os, sys
import dagster as dg
from nemotron_assets_tests.core.test_run_events_are_recorded import build

with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    first = build(instance, "a")
    storage = instance.event_log_storage
    parents = set(map(id, storage._engines.values()))
    child = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the same storage object, through connections of its own
        code = 1
        try:
            second = build(instance, "b")
            mine = set(map(id, storage._engines.values()))
            os.write(child[1], second.encode())
            code = 0 if mine and not mine & parents else 3
        finally:
            os._exit(code)
    os.close(child[1])
    _, status = os.waitpid(pid, 0)
    second = os.read(child[0], 100).decode()
    third = build(instance, "a")
print(json.dumps({"child_exit": os.waitstatus_to_exitcode(status), "runs": [first, second, third]}))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_process_records_through_connections_of_its_own(tmp_path):
    home = bundled_home(tmp_path)
    done = subprocess.run([sys.executable, "-c", FORKING, str(home)], cwd=REPO, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["child_exit"] == 0  # 3: the child used an engine of its parent's
    with dagsters_own_reader(home) as theirs:
        for run_id in report["runs"]:
            assert theirs.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
            assert events(theirs, run_id)[-1][0] == dg.DagsterEventType.RUN_SUCCESS
