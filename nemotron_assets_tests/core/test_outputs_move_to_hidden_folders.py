"""An output written before the ``.receipts/`` and ``.meta/`` folders (core/upgrade.py): read where it lies, moved by
the step skeleton's check without a rebuild, locally and on S3. The legacy layout is written here by hand, as the
code before issue 27 wrote it: ``<folder>/<name>.json`` beside the files, the side file beside the data."""

import json
import os

import pytest

from nemotron_assets.core.records import Receipt, freshness, read_receipt
from nemotron_assets.core.step import Output, Staged, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.core.upgrade import upgrade
from nemotron_assets_tests.s3_server import make_bucket, moto_server

PREFIX = "b/sft/train/shard_00000"
INPUTS = {"format": "x", "plan": "abc"}
FILES = {".parquet": b"bins", ".samples.parquet": b"listing"}  # the names a packed shard's receipt gave them


def write_legacy(store: Storage, files: dict[str, bytes] = FILES) -> None:
    """A packed SFT shard as the code before the hidden folders committed it: files, then the receipt beside them."""
    for name, data in files.items():
        store.write_bytes(PREFIX + name, data)
    digests = {name: {"bytes": len(data), "sha256": _sha256(data)} for name, data in files.items()}
    stamps = {name: store.stamp(PREFIX + name) for name in files}
    receipt = Receipt("sft_packed", "train/shard_00000", INPUTS, digests, {"bins": 1}, stamps)
    store.write_bytes(PREFIX + ".json", receipt.to_bytes())


def never_built(folder):
    raise AssertionError("an up-to-date output must not be built again")


def test_a_legacy_output_is_judged_where_it_lies_and_nothing_is_written(tmp_path):
    store = Storage(str(tmp_path))
    write_legacy(store)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert freshness(store, PREFIX, INPUTS, read_content=True).done
    assert read_receipt(store, PREFIX).files.keys() == FILES.keys()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == before


def test_the_check_moves_receipt_and_side_file_without_rebuilding(tmp_path):
    store = Storage(str(tmp_path))
    write_legacy(store)
    data = tmp_path / f"{PREFIX}.parquet"
    listing = tmp_path / f"{PREFIX}.samples.parquet"
    kept = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in (data, listing)}
    lines = []
    outcome = build_output(store, Output(PREFIX, INPUTS, "sft_packed", "train/shard_00000"), never_built,
                           log=lines.append)
    assert outcome.status == "up to date"
    assert lines == ["train/shard_00000: moved its receipt and side files to .receipts/ and .meta/"]
    folder = tmp_path / "b/sft/train"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) == [
        ".meta/shard_00000.samples.parquet", ".receipts/shard_00000.json", "shard_00000.parquet"]
    moved = folder / ".meta/shard_00000.samples.parquet"
    assert (data.stat().st_ino, data.stat().st_mtime_ns) == kept[data.name]
    assert (moved.stat().st_ino, moved.stat().st_mtime_ns) == kept[listing.name]
    receipt = json.loads((folder / ".receipts/shard_00000.json").read_text())
    assert sorted(receipt["files"]) == sorted(receipt["committed"]) == [".meta/shard_00000.samples.parquet",
                                                                        ".parquet"]
    assert freshness(store, PREFIX, INPUTS, read_content=True).done
    assert not upgrade(store, PREFIX)  # once moved, nothing more to do


def test_a_side_file_changed_before_the_move_is_still_found_changed(tmp_path):
    store = Storage(str(tmp_path))
    write_legacy(store)
    listing = tmp_path / f"{PREFIX}.samples.parquet"
    listing.write_bytes(b"LISTING")  # same size, other bytes, a new modification time
    assert upgrade(store, PREFIX)
    state = freshness(store, PREFIX, INPUTS)
    assert state.state.value == "stale" and "its .meta/shard_00000.samples.parquet file changed" in state.reason


def test_an_interrupted_move_is_finished_by_the_next_check(tmp_path):
    store = Storage(str(tmp_path))
    write_legacy(store)
    (tmp_path / "b/sft/train/.meta").mkdir()
    os.replace(tmp_path / f"{PREFIX}.samples.parquet", tmp_path / "b/sft/train/.meta/shard_00000.samples.parquet")
    assert upgrade(store, PREFIX)  # the side file had moved, the legacy receipt was still there
    assert not (tmp_path / f"{PREFIX}.json").exists()
    assert freshness(store, PREFIX, INPUTS, read_content=True).done


def test_an_unreadable_legacy_receipt_is_removed_and_the_output_built(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes(PREFIX + ".json", b"{not json")

    def build(folder):
        (folder / "bins").write_bytes(b"bins")
        return Staged({".parquet": folder / "bins"}, {})

    assert build_output(store, Output(PREFIX, INPUTS, "sft_packed", "k"), build, log=lambda _: None).status == "built"
    assert sorted(p.name for p in (tmp_path / "b/sft/train").iterdir()) == [".receipts", "shard_00000.parquet"]


def test_a_legacy_receipt_beside_a_current_one_is_removed_and_the_current_one_kept(tmp_path):
    """Both places hold a receipt only when an older version of the tool wrote beside a moved tree: today's wins."""
    store = Storage(str(tmp_path))
    write_legacy(store)
    assert upgrade(store, PREFIX)
    current = (tmp_path / "b/sft/train/.receipts/shard_00000.json").read_bytes()
    write_legacy(store, {".parquet": FILES[".parquet"]})
    assert upgrade(store, PREFIX)
    assert not (tmp_path / f"{PREFIX}.json").exists()
    assert (tmp_path / "b/sft/train/.receipts/shard_00000.json").read_bytes() == current


@pytest.mark.slow
def test_a_legacy_output_on_s3_moves_without_a_rebuild(tmp_path):
    with moto_server() as endpoint:
        make_bucket(endpoint, "data")
        store = Storage("s3://data/up", endpoint_url=endpoint, key="testing", secret="testing", region="us-east-1")
        write_legacy(store)
        assert freshness(store, PREFIX, INPUTS, read_content=True).done  # read at the legacy places
        outcome = build_output(store, Output(PREFIX, INPUTS, "sft_packed", "k"), never_built, log=lambda _: None)
        assert outcome.status == "up to date"
        assert store.list("b/sft/train") == ["b/sft/train/shard_00000.parquet"]
        assert store.list("b/sft/train/.meta") == ["b/sft/train/.meta/shard_00000.samples.parquet"]
        assert store.list("b/sft/train/.receipts") == ["b/sft/train/.receipts/shard_00000.json"]
        receipt = read_receipt(store, PREFIX)
        assert receipt.committed[".meta/shard_00000.samples.parquet"] == store.stamp(
            "b/sft/train/.meta/shard_00000.samples.parquet")
        assert freshness(store, PREFIX, INPUTS, read_content=True).done


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
