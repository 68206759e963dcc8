"""The cluster deployment as a user runs it: Debian's PostgreSQL and a Ray head on loopback, the CLI with
``NEMOTRON_DEPLOYMENT=cluster`` launching the sample blend's shard runs as Ray jobs, the runs recorded in Postgres.

Both servers are real processes started here in /tmp and stopped by their process ids afterwards (see
``cluster_services``). The Ray node gets none of the Dagster settings in its own environment: they reach the run
workers only through the launcher's ``env_vars``, as on a real cluster.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from nemotron_assets.core import settings
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.end_to_end.cluster_services import (
    POSTGRES_PASSWORD,
    postgres_bin_dir,
    postgres_server,
    ray_head,
)
from nemotron_assets_tests.megatron_reader import read_raw

CLUSTER_HOME = REPO / "deployments" / "cluster"
SHARDS_PER_RUN = 2
CLI_TIMEOUT = 240


def _cli(args, env):
    return subprocess.run([sys.executable, "-m", "nemotron_assets", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=CLI_TIMEOUT)


def test_cluster_settings_pick_the_cluster_instance(monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("NEMOTRON_DEPLOYMENT", "cluster")
    assert settings.deployment() == "cluster"
    assert settings.default_dagster_home() == CLUSTER_HOME
    assert (CLUSTER_HOME / "dagster.yaml").is_file()


@pytest.mark.slow
def test_cluster_cli_names_the_missing_or_wrong_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMOTRON_", "DAGSTER_"))}
    env.update(NEMOTRON_DEPLOYMENT="cluster", NEMOTRON_DATA_ROOT=str(tmp_path / "data"))
    done = _cli(["materialize", "sample"], env)
    assert done.returncode != 0 and "NEMOTRON_POSTGRES_URL=postgresql+psycopg2://" in done.stderr
    done = _cli(["materialize", "sample"], dict(env, NEMOTRON_POSTGRES_URL="postgresql://u:p@127.0.0.1:1/d"))
    assert done.returncode != 0 and "must start with postgresql+psycopg2://" in done.stderr
    assert "u:p@" not in done.stderr  # the URL's credentials are never printed
    done = _cli(["materialize", "sample"], dict(env, NEMOTRON_POSTGRES_URL="postgresql+psycopg2://u:p@127.0.0.1:1/d"))
    assert done.returncode != 0 and "NEMOTRON_RAY_ADDRESS" in done.stderr


@pytest.mark.slow
def test_cluster_backfill_runs_each_shard_range_as_a_ray_job_recorded_in_postgres(tmp_path):
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL (initdb, pg_ctl) is missing: run .ci/install_system_deps.sh (apt-get install "
                    "postgresql)")
    started = time.monotonic()
    # a private copy of the cluster instance folder: the run workers write compute logs under DAGSTER_HOME
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(CLUSTER_HOME / "dagster.yaml", home / "dagster.yaml")
    data = tmp_path / "data"
    node_env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMOTRON_", "DAGSTER_", "AWS_"))}
    with postgres_server() as postgres_url, ray_head(node_env) as ray_address:
        env = dict(node_env, NEMOTRON_DEPLOYMENT="cluster", NEMOTRON_POSTGRES_URL=postgres_url,
                   NEMOTRON_RAY_ADDRESS=ray_address, NEMOTRON_DATA_ROOT=str(data),
                   NEMOTRON_BLENDS_DIR=str(REPO / "blends"), DAGSTER_HOME=str(home), HF_HUB_OFFLINE="1")
        services_up = time.monotonic()

        # Ctrl-C once the shard runs are handed to Ray: the command asks the launcher to stop them and exits 130.
        interrupted = _interrupt_once_shard_runs_are_launched(env)
        _check_interrupted_runs_stopped(env, home, ray_address, interrupted)

        # The same command again builds everything (what the interrupted runs left is cleaned up or rebuilt).
        done = _cli(["materialize", "sample", "--shards-per-run", str(SHARDS_PER_RUN)], env)
        assert done.returncode == 0, done.stderr[-4000:]
        assert "launched 1 source_split run(s) through RayRunLauncher" in done.stderr
        assert POSTGRES_PASSWORD not in done.stdout + done.stderr
        materialized = time.monotonic()
        print("\n".join(line for line in done.stderr.splitlines() if line.startswith(("launched", "run ", "done"))))

        # every planned shard is on disk, readable, and listed in blend.json
        manifests = sorted((data / "sample" / "sources").glob("*/manifest.json"))
        planned = [f"{m.parent.name}/shard_{i:05d}" for m in manifests
                   for i in range(len(json.loads(m.read_text())["shards"]))]
        assert len(planned) >= 6, planned
        for key in planned:
            raw = read_raw(data / "sample" / "pretrain" / key)
            assert raw.num_document_indices >= 1 and raw.tokens.size == int(raw.sequence_lengths.sum())
        blend = json.loads((data / "sample" / "pretrain" / "blend.json").read_text())
        listed = {p for split in blend.values() if split for p in split[1::2]}
        assert listed and {str(Path(p).relative_to(data / "sample" / "pretrain")) for p in listed} <= set(planned)

        # `verify` with DAGSTER_HOME unset picks deployments/cluster, i.e. the same Postgres run records
        unset = {k: v for k, v in env.items() if k != "DAGSTER_HOME"}
        verified = _cli(["verify", "sample"], unset)
        assert verified.returncode == 0, verified.stdout + verified.stderr[-3000:]
        assert f"using {CLUSTER_HOME}" in verified.stderr and "every output verified" in verified.stderr

        run_ids = _check_runs_in_instance(env, home, ray_address, planned, before=interrupted)
        import psycopg2

        with psycopg2.connect(postgres_url.replace("postgresql+psycopg2://", "postgresql://")) as connection:
            with connection.cursor() as cursor:  # the rows themselves, not through Dagster
                cursor.execute("SELECT run_id, status FROM runs")
                rows = dict(cursor.fetchall())
                assert {run_id: rows[run_id] for run_id in run_ids} == dict.fromkeys(run_ids, "SUCCESS")
                assert set(rows) == run_ids | interrupted
    finished = time.monotonic()
    print(f"services {services_up - started:.1f} s, materialize {materialized - services_up:.1f} s, "
          f"checks {finished - materialized:.1f} s (incl. stopping the servers)")


def _interrupt_once_shard_runs_are_launched(env) -> set[str]:
    """``materialize sample`` in cluster mode, SIGINT as soon as it says it launched the shard runs: it must exit 130
    within seconds, with the line that says how to go on. Returns the ids of the runs it had launched."""
    process = subprocess.Popen([sys.executable, "-m", "nemotron_assets", "materialize", "sample", "--shards-per-run",
                                str(SHARDS_PER_RUN)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + CLI_TIMEOUT
        while not any("pretrain_shard run(s) through RayRunLauncher" in line for line in lines):
            assert process.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "".join(lines)
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        process.wait(timeout=60)
        stopped_after = time.monotonic() - signalled
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = "".join(lines)
    assert process.returncode == 130, stderr
    assert stopped_after < 10, stderr
    assert "stopping" in stderr and "to go on, run the same command again: python -m nemotron_assets materialize " \
        "sample --shards-per-run 2" in stderr, stderr
    import dagster as dg

    with _environment(env), dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return {run.run_id for run in instance.get_runs()}


def _check_interrupted_runs_stopped(env, home, ray_address, run_ids: set[str]) -> None:
    """Each shard run the interrupted command launched ends canceled (or had finished), and its Ray job is not left
    running."""
    import dagster as dg
    from ray.job_submission import JobStatus, JobSubmissionClient

    stopped = (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)

    def told_to_stop(instance, run) -> bool:
        """The launcher marked the run canceling, then stopped its Ray job. A run worker that ends on the job's
        stop may still record a failure (its own race with the canceling status): that is a stopped run too."""
        return any(record.dagster_event is not None
                   and record.dagster_event.event_type == dg.DagsterEventType.RUN_CANCELING
                   for record in instance.all_logs(run.run_id))

    with _environment(env), dg.DagsterInstance.from_config(str(home)) as instance:
        shard_key = dg.AssetKey(["sample", "pretrain_shard"])
        shard_runs = [r for r in instance.get_runs() if r.run_id in run_ids and shard_key in (r.asset_selection or ())]
        assert shard_runs and any(r.status in stopped for r in shard_runs), [r.status for r in shard_runs]
        assert all(r.status in stopped or r.status == dg.DagsterRunStatus.SUCCESS
                   or (r.status == dg.DagsterRunStatus.FAILURE and told_to_stop(instance, r)) for r in shard_runs), \
            [(r.status, [record.user_message for record in instance.all_logs(r.run_id)][-5:]) for r in shard_runs]
    client = JobSubmissionClient(ray_address)
    deadline = time.monotonic() + 60
    while True:
        jobs = {(j.metadata or {}).get("dagster/run-id"): j for j in client.list_jobs()}
        going = [run_id for run_id in run_ids if run_id in jobs and not jobs[run_id].status.is_terminal()]
        if not going:
            break
        assert time.monotonic() < deadline, f"Ray jobs still going after the interrupt: {going}"
        time.sleep(1)
    assert all(jobs[r.run_id].status in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)
               for r in shard_runs if r.run_id in jobs)


@contextlib.contextmanager
def _environment(env):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _check_runs_in_instance(env, home, ray_address, planned, before: set[str]) -> set[str]:
    import dagster as dg
    from dagster._core.storage.dagster_run import DagsterRunStatus
    from dagster_postgres import PostgresRunStorage
    from dagster_ray import RayRunLauncher
    from ray.job_submission import JobStatus, JobSubmissionClient

    with _environment(env), dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.run_launcher, RayRunLauncher)
        runs = [run for run in instance.get_runs() if run.run_id not in before]  # the second command's
        shard_runs = [r for r in runs if dg.AssetKey(["sample", "pretrain_shard"]) in (r.asset_selection or ())]
        expected_shard_runs = -(-len(planned) // SHARDS_PER_RUN)  # at least; ranges break at dataset ends
        assert len(shard_runs) >= expected_shard_runs and len(runs) == len(shard_runs) + 2
        assert all(r.status == DagsterRunStatus.SUCCESS for r in runs)
        for run in runs:
            assert run.remote_job_origin.location_name == "nemotron_assets.definitions"
            messages = [e.message for e in instance.all_logs(run.run_id) if e.is_dagster_event]
            assert "[RayRunLauncher] Ray run job created" in messages, (run.run_id, messages[:10])
        forked = [run.run_id for run in shard_runs  # a Ray worker's step forks its shard builds too
                  if any(" shard(s) in 2 processes" in entry.user_message
                         for entry in instance.all_logs(run.run_id))]
        assert forked, "no shard run built its shards in forked processes"
        materialized = instance.get_materialized_partitions(dg.AssetKey(["sample", "pretrain_shard"]))
        assert materialized == set(planned)
        run_ids = {r.run_id for r in runs}

    # Ray ran one job per Dagster run, each finished
    jobs = JobSubmissionClient(ray_address).list_jobs()
    by_run = {(j.metadata or {}).get("dagster/run-id"): j for j in jobs}
    assert run_ids <= set(by_run), (run_ids - set(by_run))
    assert all(by_run[r].status == JobStatus.SUCCEEDED for r in run_ids)
    # the Postgres URL travels as the instance config's `env:` reference, never in the job's command line
    assert all(POSTGRES_PASSWORD not in by_run[r].entrypoint for r in run_ids)
    return run_ids
