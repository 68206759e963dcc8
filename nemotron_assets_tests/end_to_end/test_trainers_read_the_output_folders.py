"""A trainer can be pointed at an output folder: each consumer's own loader, given the folder, reads exactly the rows
the build wrote. The receipts are in ``.receipts/`` and what a trainer does not read in ``.meta/`` (core/records.py),
which ``pyarrow.dataset``, Hugging Face ``datasets`` and Megatron-Bridge all skip. The expected counts come from the
receipts' stats, never from the loaders under test. The tree is the bundled sample blends built once by the command
line (conftest.py ``sample_outputs``)."""

import json
import re

import datasets
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from nemotron_assets_tests.bridge_reader import read_packed_like_bridge

pytestmark = pytest.mark.slow

SPLITS = ("train", "valid", "test")


@pytest.fixture(scope="module", autouse=True)
def quiet_datasets():
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def receipt(folder, name: str) -> dict:
    return json.loads((folder / ".receipts" / f"{name}.json").read_text())


def hf_rows(loader: str, folder, cache) -> int:
    return datasets.load_dataset(loader, data_dir=str(folder), split="train", cache_dir=str(cache)).num_rows


def test_every_data_folder_shows_only_its_data_files(sample_outputs):
    """Each folder a trainer may be given holds, besides hidden folders, only its data files."""
    post = sample_outputs.data / "posttrain_sample"
    folders = {r"shard_\d{5}\.(bin|idx)": list((sample_outputs.data / "sample/pretrain").iterdir()),
               r"shard_\d{5}\.parquet": [*(post / "harmony").iterdir(), *(post / "sft" / split for split in SPLITS)],
               r"part-\d{5}\.parquet": [*(post / "pools").iterdir(), *(post / "embedding").glob("*/*")],
               r"shard_\d{5}\.arrow": list((post / "sft/samples").iterdir()),
               r"shard_\d{5}\.jsonl(\.zst)?": list((sample_outputs.data / "rl_sample/jsonl").glob("*/*"))}
    for pattern, found in folders.items():
        for folder in (f for f in found if f.is_dir() and not f.name.startswith(".")):
            visible = [p.name for p in folder.iterdir() if not p.name.startswith(".")]
            assert visible and all(re.fullmatch(pattern, name) for name in visible), (folder, visible)
    assert sorted(p.name for p in (sample_outputs.data / "rl_sample/jsonl/math_rl").iterdir()) == [
        ".receipts", "test", "train", "valid"]  # a JSONL shard's receipt is in its dataset's folder


def test_pyarrow_dataset_reads_every_harmony_dataset_and_pool_folder(sample_outputs):
    base = sample_outputs.data / "posttrain_sample"
    for folder in sorted((base / "harmony").iterdir()):
        written = sum(json.loads(r.read_text())["stats"]["records"] for r in (folder / ".receipts").glob("shard_*"))
        assert ds.dataset(folder, format="parquet").count_rows() == written, folder
    for folder in sorted((base / "pools").iterdir()):
        rows = json.loads((folder / ".meta" / "manifest.json").read_text())["rows"]
        assert ds.dataset(folder, format="parquet").count_rows() == rows == receipt(folder, "part-00000")["stats"][
            "rows"], folder


def test_hugging_face_datasets_reads_a_harmony_dataset_and_a_pool_folder(sample_outputs, tmp_path):
    base = sample_outputs.data / "posttrain_sample"
    harmony = base / "harmony" / "nemotron_math_v2"  # its dedup result (.meta/duplicates.parquet) is not empty
    assert pq.read_table(harmony / ".meta" / "duplicates.parquet").num_rows > 0
    assert hf_rows("parquet", harmony, tmp_path) == receipt(harmony, "shard_00000")["stats"]["records"]
    pool = base / "pools" / "tool_use"
    assert hf_rows("parquet", pool, tmp_path) == receipt(pool, "part-00000")["stats"]["rows"] > 0


def test_hugging_face_datasets_reads_jsonl_split_folders_zstd_included(sample_outputs, tmp_path):
    jsonl = sample_outputs.data / "rl_sample" / "jsonl"
    for dataset in ("tool_rl", "math_rl"):  # tool_rl is written with compression: zstd (blends/rl_sample.yaml)
        rows = receipt(jsonl / dataset, "shard_00000")["stats"]["rows"]
        for split in SPLITS:
            if rows.get(split):
                assert hf_rows("json", jsonl / dataset / split, tmp_path) == rows[split], (dataset, split)
    assert next((jsonl / "tool_rl" / "train").iterdir()).name.endswith(".jsonl.zst")
    whole = datasets.load_dataset("json", data_dir=str(jsonl / "math_rl"), cache_dir=str(tmp_path))
    rows = receipt(jsonl / "math_rl", "shard_00000")["stats"]["rows"]
    assert {split: whole[name].num_rows for split, name in zip(SPLITS, ("train", "validation", "test"))} == rows


def test_megatron_bridge_reads_each_packed_split_given_as_a_folder(sample_outputs, tmp_path):
    sft = sample_outputs.data / "posttrain_sample" / "sft"
    for split in SPLITS:
        bins = sum(json.loads(r.read_text())["stats"]["bins"] for r in (sft / split / ".receipts").glob("*.json"))
        assert len(read_packed_like_bridge(sft / split)) == bins > 0, split
    # the same folder with its samples listing beside the bins (the layout before .meta/) is refused
    legacy = tmp_path / "train"
    legacy.mkdir()
    for name in ("shard_00000.parquet", ".meta/shard_00000.samples.parquet"):
        (legacy / name.removeprefix(".meta/")).write_bytes((sft / "train" / name).read_bytes())
    with pytest.raises(ValueError, match="missing required columns"):
        read_packed_like_bridge(legacy)


def test_the_bridge_reader_here_holds_rows_to_bridges_invariants(tmp_path):
    """The reader of this test refuses what Bridge's ``validate_row`` refuses (so a pass above means something)."""
    bad = {"input_ids": [[1, 2, 3]], "loss_mask": [[1, 1, 0]], "seq_start_id": [[0, 3]]}  # a start past the row
    pq.write_table(pa.table(bad), tmp_path / "shard_00000.parquet")
    with pytest.raises(ValueError, match="seq_start_id"):
        read_packed_like_bridge(tmp_path)
