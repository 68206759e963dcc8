"""The S3 deployment as a user runs it: the CLI in a subprocess, ``NEMOTRON_DATA_ROOT=s3://...`` plus the standard
AWS variables, against moto's standalone server (a separate process on loopback), a sqlite instance in a temp
``DAGSTER_HOME``.

1. The whole sample blend lands in S3 and reads back as valid Megatron shards; the secret key never reaches the
   CLI's output or anything the Dagster instance stores (it is configured as an ``EnvVar``).
2. The S3 server dies in the middle of a multi-shard run and comes back: the run is reported failed, every shard
   is either complete (.bin + .idx + receipt of the recorded sizes) or has no receipt, ``status`` counts exactly
   the complete ones as done, and re-running finishes the rest and verifies. moto keeps its state in memory, so
   the restarted server replays the old one's request recording (moto's recorder) to come back with the objects
   a real S3 would still hold.
"""

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import pytest
import requests
import s3fs

from nemotron_assets.core import settings
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.definitions import build_definitions
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.megatron_reader import read_raw
from nemotron_assets_tests.s3_server import free_port, make_bucket, moto_server

BUCKET = "deploy"
PREFIX = "team/nemotron"
CLI_TIMEOUT = 240


@pytest.fixture
def secret() -> str:
    """A secret no code path could produce by accident, so finding it anywhere means it leaked."""
    return f"nemotron-test-secret-{uuid.uuid4().hex}"


@pytest.fixture
def dagster_home(tmp_path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def cli_environment(endpoint: str, secret: str, home: Path, blends_dir: Path) -> dict[str, str]:
    """Only documented settings: the s3:// root, the four AWS variables, the instance and the blends folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "NEMOTRON_", "MOTO_"))}
    env.update(NEMOTRON_DEPLOYMENT="s3", NEMOTRON_DATA_ROOT=f"s3://{BUCKET}/{PREFIX}",
               NEMOTRON_BLENDS_DIR=str(blends_dir), DAGSTER_HOME=str(home), HF_HUB_OFFLINE="1",
               AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="nemotron-test-key", AWS_SECRET_ACCESS_KEY=secret,
               AWS_DEFAULT_REGION="us-east-1")
    return env


def cli(*args: str, env: dict[str, str]) -> list[str]:
    return [sys.executable, "-m", "nemotron_assets", *args]


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cli(*args, env=env), env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT)


def cli_in_process(monkeypatch, capsys, env: dict[str, str], *args: str) -> tuple[int, str]:
    """(exit status, stdout) of the CLI run in this process under ``env``: the same code as the console
    command without another interpreter start (seconds each), for commands that launch no runs."""
    from nemotron_assets.cli import main

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr().out


def s3(endpoint: str) -> s3fs.S3FileSystem:
    return s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint}, key="reader", secret="reader",
                             skip_instance_cache=True, use_listings_cache=False)


def blend_root(blend: str) -> str:
    return f"{BUCKET}/{PREFIX}/{blend}"


# --- 0. configuration --------------------------------------------------------------------------------------
def test_s3_root_takes_each_set_aws_variable_as_an_env_var_and_a_local_root_none(monkeypatch):
    for name in settings.S3_ENVIRONMENT.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-secret")
    resource = StorageResource.from_environment("s3://bucket/prefix")
    assert resource.aws_access_key_id == dg.EnvVar("AWS_ACCESS_KEY_ID")
    assert resource.aws_secret_access_key == dg.EnvVar("AWS_SECRET_ACCESS_KEY")
    assert resource.endpoint_url is None and resource.region_name is None  # unset: not a run-time error
    assert "the-secret" not in repr(resource) and "the-secret" not in repr(resource.get())
    local = StorageResource.from_environment("/tmp/data")
    assert (local.aws_access_key_id, local.aws_secret_access_key, local.endpoint_url) == (None, None, None)


@pytest.mark.parametrize(("deployment", "root", "message"), [
    ("s3", "/tmp/data", "NEMOTRON_DEPLOYMENT='s3' needs NEMOTRON_DATA_ROOT=s3://"),
    ("k8s", "/tmp/data", "NEMOTRON_DEPLOYMENT='k8s' is not one of local, s3, cluster"),
])
def test_unusable_deployment_settings_fail_naming_the_setting(monkeypatch, deployment, root, message):
    monkeypatch.setenv("NEMOTRON_DEPLOYMENT", deployment)
    monkeypatch.setenv("NEMOTRON_DATA_ROOT", root)
    with pytest.raises(settings.DeploymentError, match=message):
        build_definitions(blends_dir=REPO / "blends")


def test_local_and_s3_deployments_use_the_checkouts_instance(monkeypatch):
    monkeypatch.setenv("NEMOTRON_DEPLOYMENT", "s3")
    monkeypatch.setenv("NEMOTRON_DATA_ROOT", "s3://b/p")
    assert settings.default_dagster_home() == REPO / "dagster_home"
    monkeypatch.delenv("NEMOTRON_DEPLOYMENT")
    assert settings.deployment() == "local"


# --- 1. the whole sample blend into S3 --------------------------------------------------------------------
@pytest.mark.slow
def test_cli_materializes_the_sample_blend_into_s3_without_leaking_the_secret(tmp_path, dagster_home, secret):
    with moto_server() as endpoint:
        make_bucket(endpoint, BUCKET)
        env = cli_environment(endpoint, secret, dagster_home, REPO / "blends")
        done = run_cli("materialize", "sample", env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        fs = s3(endpoint)
        blend = json.loads(fs.cat_file(f"{blend_root('sample')}/pretrain/blend.json"))
        prefixes = [p for split in blend.values() if split for p in split[1::2]]
        assert all(p.startswith(f"s3://{blend_root('sample')}/pretrain/") for p in prefixes)  # absolute by default
        assert {p.rsplit("/", 2)[-2] for p in prefixes} == {"wiki", "reference", "code", "wiki_valid",
                                                             "reference_test"}
        for prefix in prefixes:
            check_shard_from_s3(fs, prefix[len("s3://"):], tmp_path / "download")
        assert not [p for p in fs.find(f"{BUCKET}/{PREFIX}") if "staging" in p]
        verified = run_cli("verify", "sample", env=env)
        assert verified.returncode == 0, verified.stdout + verified.stderr[-2000:]
    for output in (done.stdout, done.stderr, verified.stdout, verified.stderr):
        assert secret not in output
    assert_secret_not_stored(dagster_home, secret)


def check_shard_from_s3(fs: s3fs.S3FileSystem, prefix: str, download: Path) -> None:
    """Download one shard and check it against its receipt with the independent Megatron reader."""
    local = download / prefix
    local.parent.mkdir(parents=True, exist_ok=True)
    for ext in (".bin", ".idx"):
        fs.get_file(prefix + ext, f"{local}{ext}")
    folder, _, stem = prefix.rpartition("/")
    receipt = json.loads(fs.cat_file(f"{folder}/.receipts/{stem}.json"))["stats"]
    raw = read_raw(local)
    assert raw.version == 1
    assert raw.num_document_indices - 1 == receipt["documents"] > 0
    assert int(raw.sequence_lengths.sum()) == len(raw.tokens) == receipt["tokens"]
    for ext in ("bin", "idx"):
        data = Path(f"{local}.{ext}").read_bytes()
        assert len(data) == receipt[f"{ext}_bytes"]
        assert hashlib.sha256(data).hexdigest() == receipt[f"{ext}_sha256"]


def assert_secret_not_stored(home: Path, secret: str) -> None:
    """Nothing the instance keeps (run records, event logs, compute logs) holds the secret's value, while the
    event logs it scans do hold the runs' events."""
    scanned = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in scanned)
    assert not [p for p in scanned if secret.encode() in p.read_bytes()]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert runs and all(r.is_success for r in runs)
        for run in runs:
            events = instance.all_logs(run.run_id)
            assert events and not [e for e in events if secret in repr(e)]
            assert secret not in json.dumps(run.run_config)


# --- 2. the S3 server restarts in the middle of a multi-shard run -----------------------------------------
SHARDS = 24


@pytest.fixture
def load_blend(tmp_path) -> Path:
    """A blend whose one dataset (~2.4 MB of JSONL) is cut into many shards, so a shard run takes long enough
    for the server to die between two of its shards."""
    blends = tmp_path / "blends"
    blends.mkdir()
    words = ["data", "token", "shard", "model", "train", "index", "blend", "megatron", "nemotron", "asset",
             "storage", "bucket", "restart", "receipt", "retry", "commit", "écrire", "数据", "λ", "42"]
    rng = random.Random(4)
    with open(blends / "load.jsonl", "w") as out:
        for i in range(6000):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 80)))
            out.write(json.dumps({"text": f"doc {i}: {text}"}) + "\n")
    (blends / "load.yaml").write_text(f"datasets:\n  - {{name: big, path: load.jsonl, num_shards: {SHARDS}}}\n")
    return blends


@pytest.mark.slow
def test_s3_restart_mid_run_leaves_no_half_shard_and_a_rerun_completes(tmp_path, dagster_home, secret,
                                                                      load_blend, monkeypatch, capsys):
    port = free_port()
    recording = tmp_path / "moto_recording.jsonl"
    monkeypatch.setenv("MOTO_ENABLE_RECORDING", "True")  # moto_server inherits these
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(recording))
    receipts = f"{blend_root('load')}/pretrain/big/.receipts/*.json"
    with moto_server(port) as endpoint:
        make_bucket(endpoint, BUCKET)
        # one HTTP attempt per request (botocore's default retries a dead endpoint for ~7 s); our step's
        # transient-error retries still retry it twice, so the retry path runs, just without the waiting
        env = dict(cli_environment(endpoint, secret, dagster_home, load_blend), AWS_MAX_ATTEMPTS="1")
        planned = run_cli("materialize", "load", "--select", "source_split", env=env)
        assert planned.returncode == 0, planned.stderr[-3000:]
        log = tmp_path / "shard_run.log"  # a file, not a pipe: a full pipe would stall the run we wait on
        with open(log, "w") as out:
            shard_run = subprocess.Popen(cli("materialize", "load", "--select", "pretrain_shard", "--shards-per-run",
                                             str(SHARDS), env=env), env=env, cwd=REPO, stdout=out, stderr=out)
        fs = s3(endpoint)
        wait_until(lambda: bool(fs.glob(receipts)), "the first shard receipt", shard_run, log)
    # the server is gone now, between two shards of the run: the run must fail (retries included)
    shard_run.wait(timeout=CLI_TIMEOUT)
    stderr = log.read_text()
    assert shard_run.returncode == 1, stderr[-3000:]
    assert "pretrain_shard" in stderr and "FAILED" in stderr and "Exceeded max_retries of 2" in stderr
    assert secret not in stderr

    with moto_server(port) as endpoint:
        requests.post(f"{endpoint}/moto-api/recorder/replay-recording", timeout=120).raise_for_status()
        fs = s3(endpoint)
        complete, _ = shard_states(fs, f"{blend_root('load')}/pretrain/big")
        assert 0 < len(complete) < SHARDS, "the server should have died between the first and the last shard"
        code, report = cli_in_process(monkeypatch, capsys, env, "status", "load", "--json")
        assert code == 0
        status = json.loads(report)["blends"][0]["datasets"][0]
        assert status["planned"] == SHARDS
        assert status["done"] == len(complete)
        # each shard's own fate: the finished ones are done even though their run failed, the rest failed
        assert set(status["failed"]) == {f"big/shard_{i:05d}" for i in range(SHARDS) if i not in complete}
        assert status["missing"] == [] and status["stale"] == {}

        rerun = run_cli("materialize", "load", "--select", "pretrain_shard,megatron_blend", "--shards-per-run",
                        str(SHARDS), env=env)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
        assert rerun.stderr.count(": up to date,") == len(complete)  # finished shards are not rebuilt
        code, problems = cli_in_process(monkeypatch, capsys, env, "verify", "load")
        assert code == 0, problems
        complete, incomplete = shard_states(fs, f"{blend_root('load')}/pretrain/big")
        assert len(complete) == SHARDS and not incomplete


def wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen, log: Path,
               timeout: float = 120) -> None:
    """Poll ``condition``; the outcome never depends on timing, only how long we look does."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout} s")
        time.sleep(0.02)


def shard_states(fs: s3fs.S3FileSystem, folder: str) -> tuple[list[int], list[int]]:
    """(complete, incomplete) shard indices among those with any object; a receipt (in ``.receipts/``) only ever
    sits beside a .bin and .idx of the sizes it records, so nothing half-written can pass for done."""
    sizes = {path.removeprefix(f"{folder}/"): info["size"] for path, info in fs.find(folder, detail=True).items()}
    indices = sorted({int(name.rpartition("/")[2][len("shard_"):len("shard_00000")]) for name in sizes})
    complete, incomplete = [], []
    for index in indices:
        stem = f"shard_{index:05d}"
        if f".receipts/{stem}.json" not in sizes:
            incomplete.append(index)
            continue
        stats = json.loads(fs.cat_file(f"{folder}/.receipts/{stem}.json"))["stats"]
        assert sizes.get(f"{stem}.bin") == stats["bin_bytes"], f"{stem}: receipt without its .bin"
        assert sizes.get(f"{stem}.idx") == stats["idx_bytes"], f"{stem}: receipt without its .idx"
        complete.append(index)
    return complete, incomplete
