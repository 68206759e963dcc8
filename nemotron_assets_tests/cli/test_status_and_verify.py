"""``status`` and ``verify`` as a user runs them (``cli.main``), against a sqlite instance in a temp DAGSTER_HOME that
holds real runs of the sample blend (built once per test process and copied back for each test, `built`), and files
or settings that a test then changes. Every consumer uses one definition of "up to date" (records.py): these tests
change each class of input and watch status, verify, the listing asset and materialize agree."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nemotron_assets.cli import main
from nemotron_assets_tests.conftest import REPO, set_up_deployment
from nemotron_assets_tests.materialize_helpers import materialize_all, pipeline_for, run_asset, shard_keys

BERT = REPO / "nemotron_assets_tests" / "fixtures" / "megatron" / "bert_tokenizer"


def _fresh_deployment(place: Path, patch: pytest.MonkeyPatch) -> None:
    """A fresh deployment in ``place`` (conftest.py `set_up_deployment`, with a copy of the bundled blends)."""
    shutil.rmtree(place, ignore_errors=True)
    shutil.copytree(REPO / "blends", place / "blends")
    set_up_deployment(place, patch)


@pytest.fixture(scope="session")
def place(tmp_path_factory) -> Path:
    """Where this test process's deployment lives, one test at a time: always the same folder, because receipts
    name their input files by absolute path, so a deployment built here can be copied back here as it was."""
    return tmp_path_factory.getbasetemp() / "deployment"


@pytest.fixture(scope="session")
def built_once(place, tmp_path_factory) -> Path:
    """A copy of a deployment in ``place`` whose instance holds real runs of the whole sample blend, made once per
    test process; `built` copies it back for each test."""
    with pytest.MonkeyPatch.context() as patch:
        _fresh_deployment(place, patch)
        with dg.DagsterInstance.get() as instance:
            _, pipeline = pipeline_for(place / "blends" / "sample.yaml")
            materialize_all(pipeline, str(place / "data"), instance)
    kept = tmp_path_factory.mktemp("built_sample") / "deployment"
    shutil.copytree(place, kept)  # copy2 keeps modification times: inputs and outputs look as they did when built
    return kept


@pytest.fixture
def deployment(place, monkeypatch) -> Path:
    """A fresh deployment in ``place`` as this process's environment; returns ``place``."""
    _fresh_deployment(place, monkeypatch)
    return place


@pytest.fixture
def sample_blends(deployment) -> Path:
    """The deployment's copy of the bundled blends, which a test may modify."""
    return deployment / "blends"


@pytest.fixture
def env(deployment) -> Path:
    """The data root of a fresh deployment (DAGSTER_HOME, data root and blends folder set); returns the data root."""
    return deployment / "data"


@pytest.fixture
def built(deployment, built_once) -> Path:
    """The deployment after the whole sample blend was materialized into its DAGSTER_HOME instance (copied back from
    `built_once`); returns its pretrain folder."""
    shutil.rmtree(deployment)
    shutil.copytree(built_once, deployment)
    return deployment / "data" / "sample" / "pretrain"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _status(capsys, blend: str = "sample") -> dict:
    code, out, _ = _run(capsys, "status", blend, "--json")
    assert code == 0
    return {d["dataset"]: d for d in json.loads(out)["blends"][0]["datasets"]}


def _receipt_file(pretrain: Path, shard: str) -> Path:
    dataset, name = shard.split("/")
    return pretrain / dataset / ".receipts" / f"{name}.json"


def _receipt(pretrain: Path, shard: str) -> dict:
    return json.loads(_receipt_file(pretrain, shard).read_text())


def _edit_blend(blends: Path, **settings) -> None:
    path = blends / "sample.yaml"
    blend = yaml.safe_load(path.read_text())
    blend.update(settings)
    path.write_text(yaml.safe_dump(blend))


def _statuses_of_last_run(instance: dg.DagsterInstance, pipeline) -> dict[str, str]:
    """partition -> "built" / "up to date", as the latest shard run reported them."""
    run = instance.get_runs(filters=dg.RunsFilter(tags={}), limit=1)[0]
    found = {}
    for record in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        materialization = record.dagster_event.event_specific_data.materialization
        if materialization.asset_key == pipeline.pretrain_shard.key:
            found[materialization.partition] = materialization.metadata["status"].value
    return found


def test_status_counts_done_shards_tokens_and_rows_and_failed_runs(built, env, sample_blends, capsys):
    (sample_blends / "broken.jsonl").write_text('{"text": "ok"}\n{"text": "cut off\n')
    (sample_blends / "broken.yaml").write_text("datasets:\n  - {name: fine, path: sample_data/test.jsonl}\n"
                                               "  - {name: bad, path: broken.jsonl}\n")
    with dg.DagsterInstance.get() as instance:
        _, broken = pipeline_for(sample_blends / "broken.yaml")
        run_asset(broken, broken.source_split, str(env), instance, ["fine", "bad"])
        run_asset(broken, broken.pretrain_shard, str(env), instance, ["fine/shard_00000"])
        run_asset(broken, broken.pretrain_shard, str(env), instance, ["bad/shard_00000"], raise_on_error=False)

    code, out, _ = _run(capsys, "status", "--json")
    assert code == 0
    reports = {b["blend"]: b for b in json.loads(out)["blends"]}
    sample = {d["dataset"]: d for d in reports["sample"]["datasets"]}
    assert sample["wiki"]["planned"] == sample["wiki"]["done"] == 3
    for dataset in sample.values():
        shards = sorted((built / dataset["dataset"] / ".receipts").glob("shard_*.json"))
        assert dataset["done"] == dataset["planned"] == len(shards)
        assert not dataset["missing"] + dataset["failed"] and not dataset["stale"]
        assert dataset["tokens"] == sum(json.loads(p.read_text())["stats"]["tokens"] for p in shards) > 0
        assert dataset["rows"] == sum(json.loads(p.read_text())["stats"]["rows"] for p in shards) > 0
        assert dataset["outputs"] == str(built / dataset["dataset"])
    outputs = {o["asset"]: o for o in reports["sample"]["outputs"]}
    assert outputs["megatron_blend"]["state"] == "done"  # blend.json, by its receipt like every output
    broken_status = {d["dataset"]: d for d in reports["broken"]["datasets"]}
    assert broken_status["fine"]["done"] == 1 and not broken_status["fine"]["failed"]
    assert broken_status["bad"]["failed"] == ["bad/shard_00000"] and broken_status["bad"]["missing"] == []

    code, out, _ = _run(capsys, "status", "broken")
    assert code == 0 and "blend sample" not in out
    assert "(not written yet)" in out  # broken has no blend.json
    failed_line = next(line for line in out.splitlines() if line.startswith("    failed: bad/shard_00000"))
    assert "broken.jsonl:2" in failed_line  # why it failed: the located error of its run, file and line
    assert "broken.jsonl:2" in broken_status["bad"]["failed_because"]["bad/shard_00000"]
    total = next(line for line in out.splitlines() if line.strip().startswith("total")).split()
    assert total[1:6] == ["2", "1", "0", "1", "0"]  # planned, done, stale, failed, missing


def test_a_shard_that_finished_in_a_failed_run_is_done_and_verified(env, sample_blends, capsys):
    """One bad dataset in a run over three datasets' shards: the others are done, in status, in verify, in the
    UI's partition status; the failed one is listed as failed and can be re-run alone."""
    (sample_blends / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "cut off\n')
    (sample_blends / "three.yaml").write_text("datasets:\n  - {name: first, path: sample_data/test.jsonl}\n"
                                              "  - {name: bad, path: bad.jsonl}\n"
                                              "  - {name: last, path: sample_data/wiki/part-00000.jsonl}\n")
    with dg.DagsterInstance.get() as instance:
        _, three = pipeline_for(sample_blends / "three.yaml")
        run_asset(three, three.source_split, str(env), instance, ["first", "bad", "last"])
        keys = shard_keys(three, instance)
        result = run_asset(three, three.pretrain_shard, str(env), instance, keys, raise_on_error=False)
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error.message
        assert "bad/shard_00000" in failure and "bad.jsonl:2: malformed JSON" in failure
        statuses = instance.get_status_by_partition(three.pretrain_shard.key, keys, three.shard_partitions)
        assert {k: v.value for k, v in statuses.items()} == {
            "first/shard_00000": "MATERIALIZED", "bad/shard_00000": "FAILED", "last/shard_00000": "MATERIALIZED"}
    status = _status(capsys, "three")
    assert (status["first"]["done"], status["last"]["done"], status["bad"]["failed"]) == (1, 1, ["bad/shard_00000"])
    code, out, _ = _run(capsys, "verify", "three")
    lines = out.splitlines()
    assert not any("first/" in line or "last/" in line for line in lines), out  # complete shards verify clean
    assert any("bad/shard_00000" in line for line in lines)

    (sample_blends / "bad.jsonl").write_text('{"text": "fine"}\n{"text": "fixed"}\n')
    with dg.DagsterInstance.get() as instance:
        run_asset(three, three.source_split, str(env), instance, ["bad"])
        run_asset(three, three.pretrain_shard, str(env), instance, ["bad/shard_00000"])
    assert _status(capsys, "three")["bad"]["done"] == 1


def test_verify_passes_then_names_each_damaged_file_and_why(built, capsys):
    code, out, err = _run(capsys, "verify", "sample")
    assert (code, out) == (0, "") and "every output verified" in err

    wiki_bin = built / "wiki" / "shard_00000.bin"
    data = bytearray(wiki_bin.read_bytes())
    data[0] ^= 1  # one token id off by one: same size, valid format, different bytes
    wiki_bin.write_bytes(bytes(data))
    (built / "code" / "shard_00000.idx").unlink()
    receipt = _receipt(built, "reference/shard_00000")
    tokens = receipt["stats"]["tokens"]
    receipt["stats"]["tokens"] = tokens + 1
    _receipt_file(built, "reference/shard_00000").write_text(json.dumps(receipt))

    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    lines = out.splitlines()
    assert any(line.startswith(f"{wiki_bin}: stale: its .bin file changed after it was built (sha256 ")
               for line in lines), out
    assert f"{built / 'code' / 'shard_00000.idx'}: does not exist" in lines
    assert (f"{built / 'reference' / 'shard_00000.idx'}: counts_match_metadata: tokens: files hold {tokens:,}, "
            f"the receipt says {tokens + 1:,}") in lines
    assert (f"{built / 'blend.json'}: lists {built / 'code' / 'shard_00000'}, which is missing: its .idx file is "
            "missing") in lines
    assert any(line.startswith(f"{built / 'blend.json'}: lists {built / 'wiki' / 'shard_00000'}, which is stale")
               for line in lines)
    assert len(lines) == 5, out

    status = _status(capsys)
    assert status["code"]["missing"] == ["code/shard_00000"]
    assert list(status["wiki"]["stale"]) == ["wiki/shard_00000"]


def test_the_command_exits_with_its_status_after_writing_everything(built, env):
    """``run`` ends the process itself (``os._exit``, cli/__init__.py): the whole report still reaches a pipe that
    buffers it (no PYTHONUNBUFFERED), with verify's status; a reader that leaves early gets status 1, no traceback."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    (built / "code" / "shard_00000.idx").unlink()
    verify = subprocess.run([sys.executable, "-m", "nemotron_assets", "verify", "sample"], cwd=REPO, env=environment,
                            capture_output=True, text=True, timeout=120)
    assert verify.returncode == 1, verify.stderr[-2000:]
    assert f"{built / 'code' / 'shard_00000.idx'}: does not exist" in verify.stdout.splitlines()
    assert verify.stderr.rstrip().endswith("sample: 2 problem(s)"), verify.stderr[-2000:]

    status = subprocess.Popen([sys.executable, "-m", "nemotron_assets", "status", "--json"], cwd=REPO,
                              env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    status.stdout.close()  # a reader gone before the report is written, like ``| head -c 0``
    assert status.wait(timeout=120) == 1
    assert status.stderr.read() == b""


def test_a_corrupted_shard_is_rebuilt_by_the_next_materialize(built, env, sample_blends, capsys):
    wiki_bin = built / "wiki" / "shard_00001.bin"
    original = wiki_bin.read_bytes()
    data = bytearray(original)
    data[5] ^= 0x10  # one flipped bit; size and format unchanged
    wiki_bin.write_bytes(bytes(data))
    assert "wiki/shard_00001" in _status(capsys)["wiki"]["stale"]
    with dg.DagsterInstance.get() as instance:
        _, pipeline = pipeline_for(sample_blends / "sample.yaml")
        run_asset(pipeline, pipeline.pretrain_shard, str(env), instance, shard_keys(pipeline, instance))
        statuses = _statuses_of_last_run(instance, pipeline)
    assert statuses["wiki/shard_00001"] == "built"
    assert {k for k, v in statuses.items() if v == "built"} == {"wiki/shard_00001"}
    assert wiki_bin.read_bytes() == original
    assert _run(capsys, "verify", "sample")[0] == 0


def test_a_file_copied_back_unchanged_is_still_done(built, capsys):
    wiki_bin = built / "wiki" / "shard_00002.bin"
    data = wiki_bin.read_bytes()
    wiki_bin.unlink()
    wiki_bin.write_bytes(data)  # a new modification time, the same bytes
    assert _status(capsys)["wiki"]["done"] == 3


@pytest.mark.parametrize(("setting", "value", "why"), [
    ("tokenizer_model", str(BERT), "tokenizer.sha256="),
    ("add_eos", False, "settings.add_eos=true, now false"),
    ("max_doc_tokens", 64, "settings.max_doc_tokens=null, now 64"),
    ("dtype", "uint16", 'settings.dtype="int32", now "uint16"'),
])
def test_each_setting_class_makes_every_shard_stale_everywhere(built, env, sample_blends, capsys, setting, value,
                                                               why):
    if setting == "dtype":  # a vocabulary that fits uint16, built first with Megatron's rule, then widened
        _edit_blend(sample_blends, tokenizer_model=str(BERT))
        with dg.DagsterInstance.get() as instance:
            _, pipeline = pipeline_for(sample_blends / "sample.yaml")
            materialize_all(pipeline, str(env), instance)
        value, why = "int32", 'settings.dtype="uint16", now "int32"'
    _edit_blend(sample_blends, **{setting: value})

    status = _status(capsys)
    assert all(d["done"] == 0 and len(d["stale"]) == d["planned"] for d in status.values())
    assert why in status["wiki"]["stale"]["wiki/shard_00000"]

    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    assert f"{_receipt_file(built, 'wiki/shard_00000')}: stale: built with " in out and why in out

    with dg.DagsterInstance.get() as instance:
        _, pipeline = pipeline_for(sample_blends / "sample.yaml")
        refused = run_asset(pipeline, pipeline.megatron_blend, str(env), instance, raise_on_error=False)
        assert not refused.success
        message = next(e for e in refused.all_events if e.is_step_failure).step_failure_data.error.message
        assert "shard(s) are stale" in message and why in message and "wiki/shard_00000" in message

        keys = shard_keys(pipeline, instance)
        run_asset(pipeline, pipeline.pretrain_shard, str(env), instance, keys[:2])  # rebuild two of them
        assert _statuses_of_last_run(instance, pipeline) == dict.fromkeys(keys[:2], "built")
        assert sum(len(d["stale"]) for d in _status(capsys).values()) == len(keys) - 2
        run_asset(pipeline, pipeline.pretrain_shard, str(env), instance, keys)  # exactly the rest is rebuilt
        assert _statuses_of_last_run(instance, pipeline) == {k: "built" if k in keys[2:] else "up to date"
                                                             for k in keys}
        run_asset(pipeline, pipeline.megatron_blend, str(env), instance)
    assert _run(capsys, "verify", "sample")[0] == 0


def test_a_weight_change_rebuilds_only_blend_json(built, env, sample_blends, capsys):
    shard_files = {p: p.stat().st_mtime_ns for p in built.rglob("shard_*")}
    before = json.loads((built / "blend.json").read_text())
    blend = yaml.safe_load((sample_blends / "sample.yaml").read_text())
    blend["train"][0]["weight"] = 0.9
    (sample_blends / "sample.yaml").write_text(yaml.safe_dump(blend))
    assert all(d["done"] == d["planned"] for d in _status(capsys).values())
    with dg.DagsterInstance.get() as instance:
        _, pipeline = pipeline_for(sample_blends / "sample.yaml")
        materialize_all(pipeline, str(env), instance)
        assert set(_statuses_of_last_run(instance, pipeline).values()) in ({"up to date"}, set())
    assert {p: p.stat().st_mtime_ns for p in built.rglob("shard_*")} == shard_files
    after = json.loads((built / "blend.json").read_text())
    assert after != before and after["valid"] == before["valid"]
    assert sum(float(w) for w in after["train"][0::2] if "/wiki/" in after["train"][after["train"].index(w) + 1]) \
        == pytest.approx(0.9)


def test_verify_of_an_unbuilt_blend_names_the_manifests_to_materialize(env, capsys):
    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    assert f"{env / 'sample' / 'sources' / 'wiki' / 'manifest.json'}: does not exist: materialize " \
           "sample/source_split partition 'wiki'" in out.splitlines()
    assert f"{env / 'sample' / 'pretrain' / 'blend.json'}: does not exist" in out


def test_a_receipt_from_an_older_plan_is_stale(built, capsys):
    receipt = _receipt(built, "wiki/shard_00001")
    receipt["inputs"]["source"] = "0" * 64
    _receipt_file(built, "wiki/shard_00001").write_text(json.dumps(receipt))
    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    assert f"{_receipt_file(built, 'wiki/shard_00001')}: stale: built with source=\"000000000000…" in out
    assert f"{built / 'blend.json'}: lists {built / 'wiki' / 'shard_00001'}, which is stale" in out
    wiki = _status(capsys)["wiki"]
    assert list(wiki["stale"]) == ["wiki/shard_00001"] and wiki["done"] == 2


def test_unknown_and_broken_blends_are_errors_naming_them(env, sample_blends, capsys):
    code, _, err = _run(capsys, "status", "nosuch")
    assert code == 2 and "no blend 'nosuch'" in err and "sample" in err
    (sample_blends / "typo.yaml").write_text("datasets:\n  - {name: x, path: x.jsonl, wieght: 2}\n")
    code, _, err = _run(capsys, "verify", "typo")
    assert code == 2 and "typo.yaml" in err and "wieght" in err
    code, out, _ = _run(capsys, "status")
    assert code == 0 and "blend sample\n" in out
    assert "blend typo: cannot be checked:" in out and "wieght" in out


def test_a_post_training_blend_has_harmony_shards_and_no_megatron_blend(monkeypatch, tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("NEMOTRON_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("NEMOTRON_BLENDS_DIR", str(REPO / "blends"))
    assert main(["status", "posttrain_sample"]) == 0
    out = capsys.readouterr().out
    assert "Harmony shards:" in out and "Megatron shards:" not in out and "blend.json" not in out
    assert main(["verify", "posttrain_sample"]) == 1  # nothing built yet: each dataset says what to run
    out = capsys.readouterr().out
    assert "materialize posttrain_sample/source_split partition 'text'" in out and "blend.json" not in out


# --- the input files as they are now (defs/sources/current.py) ---------------------------------------------------
def _wiki_file(sample_blends: Path) -> Path:
    return sorted((sample_blends / "sample_data" / "wiki").iterdir())[0]


def test_an_appended_line_makes_its_shards_stale_naming_the_file_until_it_is_restored(built, sample_blends, capsys):
    source = _wiki_file(sample_blends)
    original = source.read_bytes()
    with source.open("a") as appended:
        appended.write('{"text": "one more line"}\n')

    wiki = _status(capsys)["wiki"]
    assert wiki["done"] < wiki["planned"] and wiki["stale"]
    assert set(wiki["stale"].values()) == {f"input changed: {source}"}
    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    assert f"{source}: input changed since 'wiki' was planned" in out

    source.write_bytes(original)  # restored: clean again, with no materialize in between
    assert _status(capsys)["wiki"]["done"] == 3
    assert _run(capsys, "verify", "sample")[0] == 0


def test_a_rewritten_file_with_the_same_bytes_stays_done(built, sample_blends, capsys):
    source = _wiki_file(sample_blends)
    data = source.read_bytes()
    source.unlink()
    source.write_bytes(data)  # a new modification time: the file is hashed, and found the same
    assert _status(capsys)["wiki"]["done"] == 3
    assert _run(capsys, "verify", "sample")[0] == 0


def test_after_a_replan_from_an_edited_file_and_a_restore_status_verify_and_materialize_agree(
        built, env, sample_blends, capsys):
    source = _wiki_file(sample_blends)
    original = source.read_bytes()
    source.write_bytes(original + b'{"text": "an edit"}\n')
    # materialize in its own process, as a user runs it: this process's code location holds another test's blends
    assert _materialize("--select", "source_split").returncode == 0  # the plan follows the edit
    source.write_bytes(original)

    assert _status(capsys)["wiki"]["done"] == 3
    code, out, _ = _run(capsys, "status", "sample")
    assert "megatron_blend   1/1 done" in out
    assert _run(capsys, "verify", "sample")[0] == 0
    again = _materialize()
    assert again.returncode == 0 and "rebuilding" not in again.stderr, again.stderr
    assert "wiki/shard_00000: up to date" in again.stderr, again.stderr


def _materialize(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nemotron_assets", "materialize", "sample", *options], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_an_input_that_cannot_be_listed_is_never_done(built, sample_blends, capsys):
    folder = sample_blends / "sample_data" / "wiki"
    shutil.rmtree(folder)
    wiki = _status(capsys)["wiki"]
    assert wiki["done"] == 0 and wiki["note"].startswith("input not checked: ")
    assert _run(capsys, "verify", "sample")[0] == 1
