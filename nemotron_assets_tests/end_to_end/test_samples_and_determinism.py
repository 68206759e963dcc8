"""Two promises of the command line, checked on real processes: a sample never touches the full build, and the
same inputs give the same bytes in fresh processes, whatever the hash seed or the executor."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from nemotron_assets_tests.commands import command_here
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.end_to_end.conftest import tree_bytes

pytestmark = pytest.mark.slow


def _env(tmp_path: Path, home: str = "dagster_home", **extra) -> dict:
    folder = tmp_path / home
    folder.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", folder / "dagster.yaml")
    return {**os.environ, "DAGSTER_HOME": str(folder), "NEMOTRON_DATA_ROOT": str(tmp_path / "data"),
            "NEMOTRON_BLENDS_DIR": str(REPO / "blends"), "HF_HUB_OFFLINE": "1", **extra}


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "nemotron_assets", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _snapshot(root: Path, skip: str | None = None) -> dict[str, tuple[str, int]]:
    """relative path -> (sha256, modification time) of every file under ``root`` (except the ``skip`` folder)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and (skip is None or skip not in p.relative_to(root).parts)}


def _materializations(home: str, asset: list[str]) -> int:
    os.environ["DAGSTER_HOME"] = home
    try:
        with dg.DagsterInstance.get() as instance:
            return len(instance.fetch_materializations(dg.AssetKey(asset), limit=1000).records)
    finally:
        del os.environ["DAGSTER_HOME"]


def test_a_sample_never_touches_the_full_build(tmp_path):
    env = _env(tmp_path)
    _cli("materialize", "sample", env=env)
    full = tmp_path / "data" / "sample"
    before = _snapshot(full, skip="samples")
    recorded = _materializations(env["DAGSTER_HOME"], ["sample", "pretrain_shard"])

    _cli("materialize", "sample", "--max-rows", "5", env=env)
    _cli("materialize", "sample", "--scale", "tiny", env=env)

    assert _snapshot(full, skip="samples") == before  # same bytes, not even rewritten
    assert _materializations(env["DAGSTER_HOME"], ["sample", "pretrain_shard"]) == recorded  # the UI's view
    assert _materializations(env["DAGSTER_HOME"], ["sample", "samples", "pretrain_shard"]) > 0
    rows_5 = json.loads((full / "samples" / "rows_5" / "sources" / "wiki" / "manifest.json").read_text())
    assert rows_5["total_rows"] == 5
    sample_blend = json.loads((full / "samples" / "rows_5" / "pretrain" / "blend.json").read_text())
    assert all("/samples/rows_5/pretrain/" in p for split in sample_blend.values() if split for p in split[1::2])

    status = json.loads(command_here(env, "status", "sample", "--json")[1])["blends"][0]
    assert all(d["done"] == d["planned"] and d["planned"] > 0 for d in status["datasets"])
    samples = {s["sample"]: s for s in status["samples"]}
    assert set(samples) == {"rows_5", "tiny"}
    assert all(d["done"] == d["planned"] for s in samples.values() for d in s["datasets"])
    text = command_here(env, "status", "sample")[1]
    assert "  sample rows_5: 5/5 shard(s) done" in text and "  sample tiny: 7/7 shard(s) done" in text
    assert command_here(env, "verify", "sample")[0] == 0


def test_builds_are_byte_identical_across_processes_hash_seeds_executors_and_build_processes(tmp_path,
                                                                                             sample_outputs):
    # The reference: the bundled samples as the command builds them by default, each run in one process, in the test
    # process (conftest.py ``sample_outputs``, with that process's own random hash seed). Then fresh command processes
    # with other hash seeds, each another way. The multiprocess executor (a step per process) builds only the
    # pretraining blend: the post-training one's twelve step processes would double the test's time, and its
    # hash-seed variation is covered by the other build.
    blends_of = {"in_process": ("sample", "posttrain_sample"), "multiprocess": ("sample",),
                 "one_process": ("sample", "posttrain_sample")}
    builds = {"in_process": {path: data for path, data in sample_outputs.built.items()
                             if path.split("/")[0] in blends_of["in_process"]}}
    assert "building 7 shard(s) in 2 processes" in sample_outputs.logs["sample"]
    assert "building 13 pools' views in 2 processes" in sample_outputs.logs["posttrain_sample"]
    # the pools' 60 rows are 29 distinct rows, whose texts the views step computes once (defs/harmony/row_texts.py)
    assert "view texts: 29 distinct rows of 60 pool rows, 4 piece(s) in 2 processes" in sample_outputs.logs[
        "posttrain_sample"]
    assert not any(" - dagster - " in log or "did not yield" in log for log in sample_outputs.logs.values())
    with sample_outputs.data_path_lent() as data:  # the same root: blend.json and its receipt hold its path
        for name, seed, options in (("multiprocess", "2", ["--executor", "multiprocess"]),  # a step per process
                                    ("one_process", "3", ["--build-processes", "1"])):  # shards one after the other
            env = _env(tmp_path, f"home_{name}", NEMOTRON_DATA_ROOT=str(data), PYTHONHASHSEED=seed)
            for blend in blends_of[name]:
                done = _cli("materialize", blend, *options, env=env)
                if blend == "sample":  # the shard run builds its shards in forked processes, unless told not to
                    assert ("building 7 shard(s) in 2 processes" in done.stdout + done.stderr) == (
                        name != "one_process")
                else:  # and the views of the 13 pools, the same way
                    assert ("building 13 pools' views in 2 processes" in done.stdout + done.stderr) == (
                        name != "one_process")
                # one compact line per message whatever the executor: no line in Dagster's own format (a
                # multiprocess step process's STEP_WORKER_STARTED), no warning about the checks' outputs
                assert " - dagster - " not in done.stderr and "did not yield" not in done.stderr, done.stderr[-2000:]
            builds[name] = tree_bytes(data)
            shutil.move(data, tmp_path / f"build_{name}")
    first = builds["in_process"]
    assert {"sample/sources/wiki/manifest.json", "sample/pretrain/data_path.txt", "sample/pretrain/blend.json",
            "sample/pretrain/wiki/shard_00002.bin", "posttrain_sample/harmony/nemotron_agentic/shard_00000.parquet",
            "posttrain_sample/pools/tool_use/part-00000.parquet"} <= set(first)
    for name, files in builds.items():
        expected = {path: data for path, data in first.items() if path.split("/")[0] in blends_of[name]}
        assert sorted(files) == sorted(expected), name
        assert [path for path in expected if files[path] != expected[path]] == [], name
