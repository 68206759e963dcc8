"""``status`` and ``verify`` as a user runs them (``cli.main``), against a sqlite instance in a temp
DAGSTER_HOME that holds real runs of the sample blend, and files that a test then damages."""

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest

from nemotron_assets.cli import main
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.materialize_helpers import materialize_all, pipeline_for, run_asset


@pytest.fixture
def env(tmp_path, sample_blends, monkeypatch) -> Path:
    """DAGSTER_HOME, data root and blends folder of a fresh deployment; returns the data root."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("NEMOTRON_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("NEMOTRON_BLENDS_DIR", str(sample_blends))
    return tmp_path / "data"


@pytest.fixture
def built(env, sample_blends) -> Path:
    """The whole sample blend materialized into the DAGSTER_HOME instance; returns its pretrain folder."""
    with dg.DagsterInstance.get() as instance:
        _, pipeline = pipeline_for(sample_blends / "sample.yaml")
        materialize_all(pipeline, str(env), instance)
    return env / "sample" / "pretrain"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _receipt(pretrain: Path, shard: str) -> dict:
    return json.loads((pretrain / f"{shard}.json").read_text())


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
        shards = sorted((built / dataset["dataset"]).glob("shard_*.json"))
        assert dataset["done"] == dataset["planned"] == len(shards) and not dataset["missing"] + dataset["failed"]
        assert dataset["tokens"] == sum(json.loads(p.read_text())["stats"]["tokens"] for p in shards) > 0
        assert dataset["rows"] == sum(json.loads(p.read_text())["stats"]["rows"] for p in shards) > 0
        assert dataset["outputs"] == str(built / dataset["dataset"])
    assert reports["sample"]["blend_json_exists"]
    broken_status = {d["dataset"]: d for d in reports["broken"]["datasets"]}
    assert broken_status["fine"]["done"] == 1 and not broken_status["fine"]["failed"]
    assert broken_status["bad"]["missing"] == broken_status["bad"]["failed"] == ["bad/shard_00000"]

    code, out, _ = _run(capsys, "status", "broken")
    assert code == 0 and "blend sample" not in out
    assert "(not written yet)" in out  # broken has no blend.json
    assert "    missing: bad/shard_00000" in out and "    failed: bad/shard_00000" in out
    total = next(line for line in out.splitlines() if line.strip().startswith("total")).split()
    assert total[1:5] == ["2", "1", "1", "1"]  # planned, done, missing, failed


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
    (built / "reference" / "shard_00000.json").write_text(json.dumps(receipt))

    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    lines = out.splitlines()
    assert f"{wiki_bin}: sha256 " in out
    assert any(line.startswith(f"{wiki_bin}: sha256 ") and "differs from the receipt's" in line for line in lines)
    assert any(line.startswith(f"{wiki_bin}: sha256 ") and "differs from the materialization's" in line
               for line in lines)
    assert f"{built / 'code' / 'shard_00000.idx'}: does not exist" in lines
    assert (f"{built / 'reference' / 'shard_00000.idx'}: counts_match_metadata: tokens: files hold {tokens:,}, "
            f"the receipt says {tokens + 1:,}") in lines
    assert f"{built / 'blend.json'}: lists code/shard_00000, which has no .idx" in lines
    assert len(lines) == 5

    code, out, _ = _run(capsys, "status", "sample")
    assert "    missing: code/shard_00000" in out
    code_row = next(line for line in out.splitlines() if line.strip().startswith("code ")).split()
    assert code_row[2:6] == ["1", "0", "1", "0"]  # planned, done, missing, failed


def test_verify_of_an_unbuilt_blend_names_the_manifests_to_materialize(env, capsys):
    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    assert f"{env / 'sample' / 'sources' / 'wiki' / 'manifest.json'}: does not exist: materialize " \
           "sample/source_split partition 'wiki'" in out.splitlines()
    assert f"{env / 'sample' / 'pretrain' / 'blend.json'}: does not exist" in out


def test_a_receipt_from_an_older_plan_is_stale(built, capsys):
    receipt = _receipt(built, "wiki/shard_00001")
    receipt["source_fingerprint"] = "0" * 64
    (built / "wiki" / "shard_00001.json").write_text(json.dumps(receipt))
    code, out, _ = _run(capsys, "verify", "sample")
    assert code == 1
    assert f"{built / 'wiki' / 'shard_00001.json'}: built from another plan of 'wiki'" in out
    assert f"{built / 'blend.json'}: lists wiki/shard_00001, which was built from another plan" in out
    code, out, _ = _run(capsys, "status", "sample", "--json")
    wiki = next(d for d in json.loads(out)["blends"][0]["datasets"] if d["dataset"] == "wiki")
    assert wiki["missing"] == ["wiki/shard_00001"] and wiki["done"] == 2


def test_unknown_blend_is_an_error_naming_the_known_ones(env):
    with pytest.raises(SystemExit, match="no blend 'nosuch'.*sample"):
        main(["status", "nosuch"])



def test_status_and_verify_leave_family_datasets_to_the_harmony_path(monkeypatch, tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster_home" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("NEMOTRON_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("NEMOTRON_BLENDS_DIR", str(REPO / "blends"))
    assert main(["status", "posttrain_sample"]) == 0
    assert "no pretraining datasets" in capsys.readouterr().out
    assert main(["verify", "posttrain_sample"]) == 0
