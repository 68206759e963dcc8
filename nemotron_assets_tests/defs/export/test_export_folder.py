"""``export BLEND --hf DIR`` as a user runs it, read back by Hugging Face ``datasets`` (offline) and checked against
the committed files read independently (pyarrow, the JSONL lines)."""

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import dagster as dg
import datasets
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

pytestmark = pytest.mark.slow


def card_header(folder: Path) -> dict:
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def without_nulls(value):
    """A row without its null fields: ``datasets`` gives every row every field of the config's schema (null where the
    row lacks it), and a written row may hold a null of its own."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def jsonl_rows(path: Path) -> list[dict]:
    data = path.read_bytes()
    if path.suffix == ".zst":
        data = zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return [json.loads(line) for line in data.splitlines()]


def committed_file(built, blend: str, path: str) -> Path:
    return built.root / blend / path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("blend", ["posttrain_sample", "rl_sample"])
def test_every_config_loads_with_datasets_as_the_card_says(built, blend, tmp_path):
    folder = tmp_path / "hf"
    done = built.run("export", blend, "--hf", str(folder))
    assert done.returncode == 0, done.stderr[-3000:]
    header = card_header(folder)
    info = {entry["config_name"]: entry for entry in header["dataset_info"]}
    expected_configs = {"posttrain_sample": {"sft_packed", "pool_tool_use", "pool_proof", "pool_reasoning_on"},
                        "rl_sample": {"jsonl_math_rl", "jsonl_tool_rl", "jsonl_sharegpt_chat", "jsonl_qa_sft",
                                      "jsonl_math_rl_valid"}}[blend]
    assert expected_configs <= {config["config_name"] for config in header["configs"]}
    licenses = Counter()
    for config in header["configs"]:
        name = config["config_name"]
        loaded = datasets.load_dataset(str(folder), name, cache_dir=str(tmp_path / "cache"))
        counts = {split["name"]: split["num_examples"] for split in info[name]["splits"]}
        assert {split: len(rows) for split, rows in loaded.items()} == counts, name
        for files in config["data_files"]:
            split, paths = files["split"], files["path"]
            rows = loaded[split]
            for path in paths:  # every file the card lists is the committed file, under the same path
                assert sha256(folder / path) == sha256(committed_file(built, blend, path))
            if paths[0].endswith(".parquet"):
                table = pq.read_table([committed_file(built, blend, p) for p in paths][0])
                assert len(paths) == 1 and rows.num_rows == table.num_rows
                column = "id" if "id" in table.column_names else "input_ids"
                assert rows[column] == table.column(column).to_pylist(), name
                if name.startswith("pool_"):
                    licenses.update(value or "other" for value in table.column("source_license").to_pylist())
            else:
                written = [row for p in paths for row in jsonl_rows(committed_file(built, blend, p))]
                assert [without_nulls(row) for row in rows] == [without_nulls(row) for row in written], name
                licenses.update("other" for _ in written)  # the sample's RL rows carry no license
    assert "sft_packed" not in info or info["sft_packed"]["splits"][0]["name"] == "train"
    assert set(header["license"]) >= set(licenses)
    if blend == "rl_sample":
        assert header["license"] == ["other"]


def test_exported_files_are_hard_links_to_the_committed_files(built, tmp_path):
    folder = tmp_path / "hf"
    assert built.run("export", "posttrain_sample", "--hf", str(folder)).returncode == 0
    data = [p for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".") for part in
                                                                       p.relative_to(folder).parts)]
    assert len(data) == 15  # 11 pools with rows, 3 packed SFT splits, README.md
    for path in data:
        if path.name == "README.md":
            continue
        committed = committed_file(built, "posttrain_sample", str(path.relative_to(folder)))
        assert os.stat(path).st_ino == os.stat(committed).st_ino, path
    assert not (folder / ".staging").exists()


def test_a_plain_materialize_never_builds_the_export(built):
    again = built.run("materialize", "rl_sample")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "hf_export" not in again.stderr  # no run of it (another test may have exported to the default folder)
    refused = built.run("materialize", "rl_sample", "--select", "hf_export")
    assert refused.returncode == 2
    assert "hf_export is built by `python -m nemotron_assets export rl_sample ...`" in refused.stderr


def test_an_export_folder_that_already_exists_is_refused(built, tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    refused = built.run("export", "rl_sample", "--hf", str(folder))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (f"error: export folder already exists: {folder}: it is not an export of blend "
                                      "'rl_sample' (no .meta/export.json naming it); choose another --hf folder, or "
                                      "remove this one")
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    exported = tmp_path / "exported"  # an export of another blend is someone else's folder too
    assert built.run("export", "posttrain_sample", "--hf", str(exported)).returncode == 0
    assert built.run("export", "rl_sample", "--hf", str(exported)).returncode == 2


def test_the_default_folder_is_the_blends_hf_folder_and_the_run_is_recorded(built):
    done = built.run("export", "rl_sample")
    assert done.returncode == 0, done.stderr[-3000:]
    folder = built.root / "rl_sample" / "hf"
    assert card_header(folder)["configs"][0]["config_name"] == "jsonl_math_rl"
    with dg.DagsterInstance.from_config(built.env["DAGSTER_HOME"]) as instance:
        event = instance.get_latest_materialization_event(dg.AssetKey(["rl_sample", "hf_export"]))
        metadata = {k: v.value for k, v in event.asset_materialization.metadata.items()}
    assert metadata["folder"] == str(folder) and metadata["hard_links"] == metadata["files"] == 11


def test_a_license_setting_makes_the_export_stale_and_no_shard(built, tmp_path):
    folder = tmp_path / "hf"
    assert built.run("export", "rl_sample", "--hf", str(folder)).returncode == 0
    again = built.run("export", "rl_sample", "--hf", str(folder))
    assert "hf_export: " + str(folder) + ": up to date" in again.stderr
    blend_file = built.blends / "rl_sample.yaml"
    original = blend_file.read_text()
    try:
        blend_file.write_text(original.replace("    transform: nemotron_rl\n    compression: zstd",
                                               "    transform: nemotron_rl\n    compression: zstd\n"
                                               "    license: apache-2.0", 1))
        changed = built.run("export", "rl_sample", "--hf", str(folder))
        assert changed.returncode == 0, changed.stderr[-3000:]
        assert "hf: rebuilding: built with licenses" in changed.stderr
        assert card_header(folder)["license"] == ["apache-2.0", "other"]
        assert "| `jsonl_tool_rl` | apache-2.0 | 9 |" in (folder / "README.md").read_text()
        shards = built.run("materialize", "rl_sample")
        assert shards.returncode == 0 and "rebuilding" not in shards.stderr and ": built" not in shards.stderr
    finally:
        blend_file.write_text(original)


def test_an_export_of_outputs_not_built_names_what_to_materialize(built, tmp_path):
    env = dict(built.env, NEMOTRON_DATA_ROOT=str(tmp_path / "empty"))
    failed = built.run("export", "rl_sample", "--hf", str(tmp_path / "hf"), env=env)
    assert failed.returncode == 1
    assert "source_split partition 'math_rl' first" in failed.stderr
    assert not (tmp_path / "hf").exists()


def test_an_export_that_fails_midway_has_no_card_nor_receipt_and_the_next_one_completes_it(built, tmp_path,
                                                                                             monkeypatch):
    from nemotron_assets.core.blend import load_blend_folder
    from nemotron_assets.core.records import read_receipt
    from nemotron_assets.core.storage import Storage
    from nemotron_assets.defs.export.step import CARD_PREFIX, materialize_export

    _, blend = load_blend_folder(built.blends).find("posttrain_sample")
    store, folder = Storage(str(built.root)), tmp_path / "hf"
    placed = []
    original = Storage.copy_from

    def fail_after_three(self, source, relative):
        if len(placed) == 3:
            raise OSError(28, "No space left on device")
        placed.append(relative)
        original(self, source, relative)

    with monkeypatch.context() as patched:
        patched.setattr(Storage, "copy_from", fail_after_three)
        with pytest.raises(OSError, match="No space left"):
            materialize_export(store, blend, str(folder), log=lambda line: None)
    assert not (folder / "README.md").exists() and read_receipt(Storage(str(folder)), CARD_PREFIX) is None
    assert len([p for p in (folder / "pools").rglob("*.parquet")]) == 3
    exported = materialize_export(store, blend, str(folder), log=lambda line: None)
    assert exported.outcome.status == "built" and (folder / "README.md").exists()
    assert len([p for p in folder.rglob("*.parquet")]) == 14
