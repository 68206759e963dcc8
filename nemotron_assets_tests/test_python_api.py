"""``nemotron_assets.materialize`` / ``status`` / ``verify`` called from Python, in this process, against a real sqlite
instance: the same runs and document as the command, twice in one process, from a thread, and a failure raising
``MaterializeError`` with the document."""

import subprocess
import sys
import threading

import dagster as dg
import pytest
import yaml

import nemotron_assets
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.megatron_reader import read_raw

pytestmark = pytest.mark.slow


def _in_thread(function, *args, **kwargs):
    """``function(*args, **kwargs)`` called in a new thread (not the main one); its result, or its exception raised."""
    outcome = {}

    def call():
        try:
            outcome["result"] = function(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert thread is not threading.main_thread()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def test_importing_the_package_imports_no_dagster():
    code = "import sys, nemotron_assets; print(sorted(m for m in sys.modules if m.split('.')[0] == 'dagster'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_materialize_twice_in_one_process_and_from_a_thread_builds_the_blend_as_it_is_then(deployment, sample_blends):
    first = nemotron_assets.materialize("sample", max_rows=20)
    assert (first["ok"], first["sample"], first["exit_status"]) == (True, "rows_20", 0)
    built = first["assets"]["pretrain_shard"]["built"]
    assert built and all(raw.tokens[-1] == 128001 for raw in map(read_raw, first["assets"]["pretrain_shard"]
                                                                   ["outputs"]))  # EOD ends the last document

    # the same runs as the command: recorded in the instance of DAGSTER_HOME, tagged as the command tags them
    with dg.DagsterInstance.get() as instance:
        runs = [instance.get_run_by_id(run["run_id"]) for run in first["runs"]]
    assert [r.is_success for r in runs] == [True] * 3
    assert all(r.tags["nemotron/launched_by"] == "cli" and r.tags["nemotron/sample"] == "rows_20" for r in runs)

    # a setting changed between the calls: the second call, from another thread, builds with the new one
    blend_file = sample_blends / "sample.yaml"
    blend = yaml.safe_load(blend_file.read_text())
    blend["add_eos"] = False
    blend_file.write_text(yaml.safe_dump(blend))
    second = _in_thread(nemotron_assets.materialize, "sample", max_rows=20, select=["pretrain_shard"])
    shards = second["assets"]["pretrain_shard"]
    assert (shards["built"], shards["up_to_date"]) == (built, [])
    assert shards["counts"]["tokens"] == first["assets"]["pretrain_shard"]["counts"]["tokens"] - shards["counts"][
        "documents"]  # one EOD fewer per document
    assert [r["asset"] for r in second["runs"]] == ["pretrain_shard"]
    sample_status = second["status"]["samples"][0]
    assert sample_status["sample"] == "rows_20"
    assert all(d["done"] == d["planned"] > 0 for d in sample_status["datasets"])

    third = nemotron_assets.materialize("sample", max_rows=20, select="pretrain_shard")
    assert third["assets"]["pretrain_shard"]["up_to_date"] == built


def test_a_failed_run_raises_materialize_error_with_the_located_message_and_the_document(deployment, sample_blends):
    (sample_blends / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "cut off\n')
    (sample_blends / "three.yaml").write_text("datasets:\n  - {name: first, path: sample_data/test.jsonl}\n"
                                              "  - {name: bad, path: bad.jsonl}\n")
    with pytest.raises(nemotron_assets.MaterializeError) as raised:
        _in_thread(nemotron_assets.materialize, "three")
    assert "bad.jsonl:2: malformed JSON" in str(raised.value) and "bad/shard_00000" in str(raised.value)
    document = raised.value.document
    assert (document["ok"], document["exit_status"]) == (False, 1)
    assert [run["success"] for run in document["runs"]] == [True, False]
    assert document["assets"]["pretrain_shard"]["built"] == ["first/shard_00000"]

    with pytest.raises(LookupError, match="no blend 'nope'"):  # refused before any run, as the command does
        nemotron_assets.materialize("nope")


def test_status_and_verify_return_the_documents_of_the_command(deployment, sample_blends):
    nemotron_assets.materialize("sample")
    status = nemotron_assets.status("sample")
    assert [b["blend"] for b in status["blends"]] == ["sample"]
    assert all(d["done"] == d["planned"] for d in status["blends"][0]["datasets"])
    assert nemotron_assets.verify("sample") == {"blend": "sample", "ok": True, "problems": [], "skipped": []}

    shard = deployment / "data" / "sample" / "pretrain" / "code" / "shard_00000.bin"
    shard.write_bytes(shard.read_bytes()[:-2])
    found = nemotron_assets.verify("sample")
    assert not found["ok"] and str(shard) in [p["path"] for p in found["problems"]]
