"""``materialize --json`` as a recipe's next step reads it: real processes, a real sqlite instance, one JSON document
on stdout whatever happens, every other line on stderr, and the outputs it names read back independently."""

import json
import shutil
import subprocess
import sys

import dagster as dg
import pytest

from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.megatron_reader import read_raw

pytestmark = pytest.mark.slow

# A step that writes to stdout, as a library or a user's code may: Python's print and a raw write to descriptor 1.
NOISY = """
import os
import nemotron_assets.core.reporting as reporting
quiet = reporting.materialize_partitions
def noisy(*args, **kwargs):
    print("noise from print")
    os.write(1, b"noise on fd 1\\n")
    yield from quiet(*args, **kwargs)
reporting.materialize_partitions = noisy
from nemotron_assets.cli import run
run()
"""


@pytest.fixture
def env(cli_env, tmp_path) -> dict:
    """cli_env with a blends folder of its own (a copy of the bundled one) that a test may add to."""
    shutil.copytree(REPO / "blends", tmp_path / "blends")
    return {**cli_env, "NEMOTRON_BLENDS_DIR": str(tmp_path / "blends")}


def _materialize(env: dict, *args: str, script: str | None = None) -> subprocess.CompletedProcess:
    command = ["-c", script, "materialize", *args] if script else ["-m", "nemotron_assets", "materialize", *args]
    return subprocess.run([sys.executable, *command], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)


def _status(env: dict, blend: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "nemotron_assets", "status", blend, "--json"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout)["blends"][0]


def _runs(env: dict, run_ids: list[str]) -> list:
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        return [instance.get_run_by_id(run_id) for run_id in run_ids]


def test_stdout_is_one_document_naming_every_output_even_when_a_step_prints(env, tmp_path):
    done = _materialize(env, "sample", "--json", script=NOISY)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)  # the whole of stdout is one document
    assert "noise from print" in done.stderr and "noise on fd 1" in done.stderr  # the step's output went to stderr
    assert done.stderr.splitlines()[-1].startswith("done: 3 run(s) in ")

    pretrain = tmp_path / "data" / "sample" / "pretrain"
    assert (document["blend"], document["sample"], document["ok"], document["exit_status"], document["error"]) == (
        "sample", None, True, 0, "")
    assert document["root"] == str(tmp_path / "data" / "sample")
    assert document["blend_json"] == str(pretrain / "blend.json")
    assert json.loads((pretrain / "blend.json").read_text())["train"][1::2] == [
        str(pretrain / key) for key in ("wiki/shard_00000", "wiki/shard_00001", "wiki/shard_00002",
                                        "reference/shard_00000", "code/shard_00000")]
    datasets = ["wiki", "reference", "code", "wiki_valid", "reference_test"]
    assert document["manifests"] == [str(tmp_path / "data" / "sample" / "sources" / d / "manifest.json")
                                     for d in datasets]
    assert all(json.loads(open(path).read())["dataset"] for path in document["manifests"])

    shards = document["assets"]["pretrain_shard"]
    assert len(shards["built"]) == 7 and shards["up_to_date"] == []
    # every shard it names is a Megatron prefix whose files an independent reader takes, with the tokens it counts
    raws = [read_raw(prefix) for prefix in shards["outputs"]]
    assert sorted(shards["outputs"]) == sorted(str(pretrain / key) for key in shards["built"])
    assert shards["counts"]["tokens"] == sum(len(raw.tokens) for raw in raws)
    assert shards["counts"]["documents"] == sum(raw.num_document_indices - 1 for raw in raws)
    assert document["assets"]["megatron_blend"] == {"built": [""], "up_to_date": [], "outputs": [
        str(pretrain / "blend.json")], "counts": {}}

    runs = _runs(env, [run["run_id"] for run in document["runs"]])
    assert [r.is_success for r in runs] == [True] * 3
    assert [run["asset"] for run in document["runs"]] == ["source_split", "pretrain_shard", "megatron_blend"]
    assert document["runs"][1]["partitions"] == ["wiki/shard_00000", "reference_test/shard_00000"]
    # the vocabulary of status --json: the document carries the very status the command prints
    assert document["status"] == _status(env, "sample")

    again = _materialize(env, "sample", "--json", "--max-rows", "20")
    sample = json.loads(again.stdout)
    assert (sample["sample"], sample["root"]) == ("rows_20", str(tmp_path / "data" / "sample" / "samples" / "rows_20"))
    sample_shards = sample["assets"]["pretrain_shard"]["built"]  # the full build's keys, also for a sample
    assert sample_shards and set(sample_shards) <= set(shards["built"])
    assert sample["blend_json"] == str(tmp_path / "data" / "sample" / "samples" / "rows_20" / "pretrain" / "blend.json")


def test_a_failed_run_is_in_the_document_with_its_located_error_and_the_exit_status_is_kept(env, tmp_path):
    blends = tmp_path / "blends"
    (blends / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "cut off\n')
    (blends / "three.yaml").write_text("datasets:\n  - {name: first, path: sample_data/test.jsonl}\n"
                                       "  - {name: bad, path: bad.jsonl}\n")
    done = _materialize(env, "three", "--json")
    assert done.returncode == 1, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert (document["ok"], document["exit_status"]) == (False, 1)
    failed = [run for run in document["runs"] if not run["success"]]
    assert [run["asset"] for run in failed] == ["pretrain_shard"]
    assert "bad/shard_00000" in failed[0]["error"] and "bad.jsonl:2: malformed JSON" in failed[0]["error"]
    assert f"error in run {failed[0]['run_id']} (pretrain_shard" in document["error"]
    assert "bad.jsonl:2: malformed JSON" in document["error"]
    assert document["assets"]["pretrain_shard"]["built"] == ["first/shard_00000"]  # the shard that finished
    assert document["blend_json"] is None  # the command stopped before megatron_blend
    bad = next(d for d in document["status"]["datasets"] if d["dataset"] == "bad")
    assert bad["failed"] == ["bad/shard_00000"] and "malformed JSON" in bad["failed_because"]["bad/shard_00000"]


def test_a_refused_command_still_prints_one_document(env):
    done = _materialize(env, "no_such_blend", "--json")
    assert done.returncode == 2
    document = json.loads(done.stdout)
    assert (document["ok"], document["exit_status"], document["runs"]) == (False, 2, [])
    assert "no blend 'no_such_blend'" in document["error"] and document["error"] in done.stderr
