"""Failure modes a probe of the command line found, each reproduced for real: concurrent first runs on a fresh
instance, a full or read-only disk (a real tmpfs in a private mount namespace), ``kill -9`` in the middle of a
shard, and blend problems that must be refused before any data is read."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.core.reporting import describe_failure
from nemotron_assets_tests.conftest import REPO

pytestmark = pytest.mark.slow


def _home(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", folder / "dagster.yaml")
    return folder


@pytest.fixture
def env(tmp_path) -> dict:
    blends = tmp_path / "blends"
    shutil.copytree(REPO / "blends", blends)
    return dict(os.environ, DAGSTER_HOME=str(_home(tmp_path / "dagster_home")),
                NEMOTRON_DATA_ROOT=str(tmp_path / "data"), NEMOTRON_BLENDS_DIR=str(blends), HF_HUB_OFFLINE="1")


def _cli(*args: str, env: dict, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "nemotron_assets", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def _runs(home: str) -> list:
    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = home
    try:
        with dg.DagsterInstance.get() as instance:
            return list(instance.get_runs())
    finally:
        if previous is None:
            del os.environ["DAGSTER_HOME"]
        else:
            os.environ["DAGSTER_HOME"] = previous


def test_two_first_runs_on_a_fresh_instance_both_succeed(tmp_path, env):
    blends = Path(env["NEMOTRON_BLENDS_DIR"])
    (blends / "second.yaml").write_text("datasets:\n  - {name: one, path: sample_data/test.jsonl}\n")
    for attempt in range(3):
        home = str(_home(tmp_path / f"fresh_{attempt}"))
        procs = [subprocess.Popen([sys.executable, "-m", "nemotron_assets", "materialize", blend, "--select",
                                   "source_split"], env=dict(env, DAGSTER_HOME=home), cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for blend in ("sample", "second")]
        results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
        for code, err in results:
            assert code == 0, err[-2000:]
            assert "alembic_version" not in err
        assert len(_runs(home)) == 2


# --- disk full, read-only ---------------------------------------------------------------------------------
def test_permanent_errors_are_decided_by_errno_and_connection_errors_stay_retryable(tmp_path):
    with pytest.raises(OSError) as full:
        with open("/dev/full", "wb", buffering=0) as device:
            device.write(b"x")
    message, retryable = describe_failure(OSError(full.value.errno, full.value.strerror, str(tmp_path)))
    assert not retryable and message.startswith(f"{tmp_path}: No space left on device (ENOSPC")
    for code in (errno.EDQUOT, errno.EROFS, errno.EACCES):
        assert not describe_failure(OSError(code, os.strerror(code), "/x"))[1]
    assert describe_failure(OSError("Connection was closed before we received a valid response"))[1]
    assert describe_failure(TimeoutError(errno.ETIMEDOUT, "timed out"))[1]
    assert describe_failure(ConnectionResetError(errno.ECONNRESET, "reset"))[1]


def _mount_namespace_available() -> bool:
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=16k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.parametrize(("mount", "cause"), [
    ("size=96k", "No space left on device (ENOSPC: the disk is full; not retried)"),
    ("ro", "Read-only file system (EROFS: the file system is read-only; not retried)"),
])
def test_a_full_or_read_only_disk_fails_at_once_naming_the_path_and_the_cause(tmp_path, env, mount, cause):
    if not _mount_namespace_available():
        pytest.fail("this test needs `unshare -rm` (a user and mount namespace) to mount a real tmpfs")
    data = tmp_path / "small_disk"
    data.mkdir()
    script = (f'mount -t tmpfs -o size=96k tmpfs "{data}" && '
              + (f'mkdir -p "{data}/sample/sources" && mount -o remount,ro "{data}" && ' if mount == "ro" else "")
              + f'exec "{sys.executable}" -m nemotron_assets materialize sample')
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=dict(env, NEMOTRON_DATA_ROOT=str(data)),
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]
    assert cause in done.stderr and f"{data}/" in done.stderr
    assert "retrying" not in done.stderr  # decided by errno: no retries of an error that cannot succeed
    assert len(done.stderr.splitlines()) < 40


# --- kill -9 ------------------------------------------------------------------------------------------------
def test_kill_9_mid_shard_leaves_nothing_that_the_next_run_does_not_clean_up(tmp_path, env):
    blends = Path(env["NEMOTRON_BLENDS_DIR"])
    text = (REPO / "blends" / "sample_data" / "wiki" / "part-00000.jsonl").read_text()
    with open(blends / "big.jsonl", "w") as big:
        for _ in range(140):
            big.write(text)  # ~18 MB: seconds of tokenizing with the hf backend
    (blends / "big.yaml").write_text("datasets:\n  - {name: big, path: big.jsonl}\n")
    data = Path(env["NEMOTRON_DATA_ROOT"])
    cli = subprocess.Popen([sys.executable, "-m", "nemotron_assets", "materialize", "big", "--tokenizer-backend",
                            "hf"], env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.monotonic() + 120
    while not list((data / ".staging").glob("*/shard.bin")):
        assert cli.poll() is None and time.monotonic() < deadline, "the shard never started"
        time.sleep(0.05)
    os.killpg(cli.pid, signal.SIGKILL)
    cli.wait()
    [orphan] = list((data / ".staging").iterdir())
    assert _runs(env["DAGSTER_HOME"])[0].status == dg.DagsterRunStatus.STARTED  # what kill -9 leaves behind

    status = _cli("status", "big", env=env)
    assert "staging folder(s) left by killed runs" in status.stdout and str(orphan) in status.stdout
    verify = _cli("verify", "big", env=env)
    assert verify.returncode == 1 and ".staging" not in verify.stdout  # staging is never an output

    again = _cli("materialize", "big", env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"removed {orphan}" in again.stderr and "failed: the command that executed it was killed" in again.stderr
    assert not orphan.exists() and not list((data / ".staging").iterdir())
    killed = [r for r in _runs(env["DAGSTER_HOME"]) if r.status == dg.DagsterRunStatus.FAILURE]
    assert len(killed) == 1
    assert _cli("verify", "big", env=env).returncode == 0


# --- blend problems before any data is read ------------------------------------------------------------------
def test_a_missing_tokenizer_is_refused_before_reading_with_exit_2(env):
    blends = Path(env["NEMOTRON_BLENDS_DIR"])
    text = (blends / "sample.yaml").read_text().replace("tokenizer_model: llama3", "tokenizer_model: ./nope/tok.json")
    (blends / "sample.yaml").write_text(text)
    done = _cli("materialize", "sample", env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "nope/tok.json" in done.stderr and "does not exist" in done.stderr
    assert f"{blends / 'sample.yaml'} field 'tokenizer_model'" in done.stderr  # the blend file that chose it
    assert not Path(env["NEMOTRON_DATA_ROOT"], "sample").exists()  # nothing was read, hashed or written
    assert _runs(env["DAGSTER_HOME"]) == []


def test_a_parquet_file_without_the_text_column_is_refused_before_reading_with_exit_2(env):
    blends = Path(env["NEMOTRON_BLENDS_DIR"])
    pq.write_table(pa.table({"content": ["a", "b"]}), blends / "notext.parquet")
    (blends / "notext.yaml").write_text("datasets:\n  - {name: ok, path: sample_data/test.jsonl}\n"
                                        "  - {name: cols, path: notext.parquet}\n")
    done = _cli("materialize", "notext", env=env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"dataset 'cols': {blends / 'notext.parquet'} field 'text': no such column (columns: content)" \
        in done.stderr
    assert not Path(env["NEMOTRON_DATA_ROOT"], "notext").exists()
