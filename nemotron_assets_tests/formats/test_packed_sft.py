"""Packed outputs (nemotron_assets/formats/packed_sft.py): Parquet read back with pyarrow, the .npy read back with
numpy and with a restricted unpickler written by Megatron-Bridge's rules (bridge_reader.py), packing metadata worked
by hand, the shard checks on good and broken files, and byte-for-byte determinism."""

import hashlib
import io
import json
import pickletools
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.formats.packed_sft import (
    BRIDGE_SHARD_GLOB,
    READ_BATCH_BINS,
    SplitSummary,
    bin_batches,
    bridge_packing_metadata,
    iter_packed_bins,
    npy_from_shards,
    packed_shard_problems,
    packing_metadata_json,
    sft_manifest,
    stored_samples,
    write_packed_npy,
)
from nemotron_assets.formats.packing import PackSample, PackSettings, PackStats, compare_samples, planned_digest
from nemotron_assets_tests.bridge_reader import load_like_bridge
from nemotron_assets_tests.formats.packing_stream import pack_samples, write_packed_shard


def make_samples(n: int, seed: int = 0, max_len: int = 300) -> list[PackSample]:
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        length = int(rng.integers(2, max_len))
        ids = rng.integers(0, 200_000, length).astype(np.int32)
        mask = np.zeros(length, dtype=np.uint8)
        mask[int(rng.integers(1, length)):] = 1  # a prompt, then a trained answer
        samples.append(PackSample(f"id{i}", f"ds{i % 3}", 10 * i, ids, mask, copy=i % 2, license=f"lic{i % 2}"))
    return samples


def packed(samples, **kw):
    settings = PackSettings(**{"pack_size": 512, **kw})
    stats = PackStats(pack_size=settings.pack_size)
    return list(pack_samples(samples, settings, stats)), stats


def write_shard(tmp_path, bins, name="shard_00000"):
    return write_packed_shard(bins, tmp_path / f"{name}.parquet", tmp_path / f"{name}.samples.parquet")


# --- Parquet ---------------------------------------------------------------------------------------------------------


def test_parquet_round_trip_through_pyarrow(tmp_path):
    bins, stats = packed(make_samples(300))
    files = write_shard(tmp_path, bins)
    table = pq.read_table(tmp_path / "shard_00000.parquet")
    assert table.schema.equals(pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.uint8())),
                                          ("seq_start_id", pa.list_(pa.int32()))]))
    rows = table.to_pylist()
    assert len(rows) == len(bins) == files.bins == stats.bins
    for row, b in zip(rows, bins):
        assert row == {"input_ids": b.input_ids.tolist(), "loss_mask": b.loss_mask.tolist(),
                       "seq_start_id": b.seq_start_id.tolist()}
    assert files.samples == 300 and files.tokens == sum(len(r["input_ids"]) for r in rows)


def test_the_samples_file_maps_bin_and_offset_to_the_sample(tmp_path):
    samples = make_samples(120)
    bins, _ = packed(samples)
    write_shard(tmp_path, bins)
    listed = pq.read_table(tmp_path / "shard_00000.samples.parquet").to_pylist()
    by_id = {s.id: s for s in samples}
    rows = pq.read_table(tmp_path / "shard_00000.parquet").to_pylist()
    assert len(listed) == 120
    for entry in listed:
        original = by_id[entry["id"]]
        stored = rows[entry["bin"]]["input_ids"][entry["offset"]:entry["offset"] + entry["length"]]
        assert stored == original.input_ids.tolist()
        assert (entry["dataset"], entry["source_row"], entry["copy"], entry["truncated"]) == (
            original.dataset, original.source_row, original.copy, False)


def test_row_groups_of_a_thousand_bins_zstd(tmp_path):
    samples = [PackSample(f"s{i}", "d", i, np.arange(5, dtype=np.int32), np.array([0, 0, 1, 1, 1], np.uint8))
               for i in range(2500)]
    bins, _ = packed(samples, pack_size=4)  # one sample per bin
    write_shard(tmp_path, bins)
    meta = pq.ParquetFile(tmp_path / "shard_00000.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 1000, 500]
    assert {meta.row_group(0).column(c).compression for c in range(3)} == {"ZSTD"}
    assert pq.ParquetFile(tmp_path / "shard_00000.samples.parquet").metadata.row_group(0).column(0).compression \
        == "ZSTD"


def test_same_bins_give_byte_identical_files(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    first = write_shard(one, packed(make_samples(200, seed=3))[0])
    second = write_shard(two, packed(make_samples(200, seed=3))[0])
    assert first.packed.sha256 == second.packed.sha256
    assert first.samples_file.sha256 == second.samples_file.sha256
    assert first.packed.sha256 == hashlib.sha256((one / "shard_00000.parquet").read_bytes()).hexdigest()


def test_the_bridge_glob_takes_the_shards_but_not_the_samples_files(tmp_path):
    for index in range(2):
        write_shard(tmp_path, packed(make_samples(10, seed=index))[0], f"shard_{index:05d}")
    assert sorted(p.name for p in tmp_path.glob(BRIDGE_SHARD_GLOB)) == ["shard_00000.parquet", "shard_00001.parquet"]


def test_bins_as_bridge_reads_them_train_each_label_exactly_when_it_is_an_assistant_token(tmp_path):
    # Bridge's collate takes, per sample [s, e): tokens ids[s:e-1], labels ids[s+1:e], loss loss_mask[s:e-1].
    samples = make_samples(80)
    bins, _ = packed(samples)
    write_shard(tmp_path, bins)
    listed = pq.read_table(tmp_path / "shard_00000.samples.parquet").to_pylist()
    by_id = {s.id: s for s in samples}
    for row, entry in zip((r for r in pq.read_table(tmp_path / "shard_00000.parquet").to_pylist()
                           for _ in r["seq_start_id"]), listed):
        s, e = entry["offset"], entry["offset"] + entry["length"]
        labels, loss = row["input_ids"][s + 1:e], row["loss_mask"][s:e - 1]
        original = by_id[entry["id"]]
        assert labels == original.input_ids[1:].tolist()
        assert loss == original.assistant_mask[1:].tolist()
        assert row["loss_mask"][e - 1] == 0


# --- .npy ------------------------------------------------------------------------------------------------------------

def npy_bytes(bins) -> bytes:
    out = io.BytesIO()
    write_packed_npy(((b.input_ids, b.loss_mask, b.seq_start_id) for b in bins), len(bins), out)
    return out.getvalue()


def pickle_part(data: bytes) -> bytes:
    header_length = int.from_bytes(data[8:10], "little")
    return data[10 + header_length:]


def test_npy_round_trip_through_numpy_and_the_restricted_unpickler(tmp_path):
    bins, _ = packed(make_samples(250))
    data = npy_bytes(bins)
    assert npy_bytes(packed(make_samples(250))[0]) == data  # deterministic, byte for byte
    for loaded in (np.load(io.BytesIO(data), allow_pickle=True), load_like_bridge(data)):
        assert loaded.dtype == object and loaded.shape == (len(bins),)
        for item, b in zip(loaded, bins):
            assert list(item) == ["input_ids", "loss_mask", "seq_start_id"]
            assert all(type(value) is list for value in item.values())  # Bridge does seq_start_id + [len(ids)]
            assert item == {"input_ids": b.input_ids.tolist(), "loss_mask": b.loss_mask.tolist(),
                            "seq_start_id": b.seq_start_id.tolist()}


def test_npy_holds_what_np_save_would_for_the_same_dicts():
    bins, _ = packed(make_samples(40))
    ours = npy_bytes(bins)
    dicts = np.empty(len(bins), dtype=object)
    dicts[:] = [{"input_ids": b.input_ids.tolist(), "loss_mask": b.loss_mask.tolist(),
                 "seq_start_id": b.seq_start_id.tolist()} for b in bins]
    reference = io.BytesIO()
    np.save(reference, dicts, allow_pickle=True)
    reference = reference.getvalue()
    assert ours[:10 + int.from_bytes(ours[8:10], "little")] == reference[:10 + int.from_bytes(reference[8:10],
                                                                                              "little")]
    assert np.load(io.BytesIO(ours), allow_pickle=True).tolist() == np.load(io.BytesIO(reference),
                                                                            allow_pickle=True).tolist()


def test_npy_pickle_names_only_numpy_1_and_2_loadable_globals_and_protocol_3_opcodes():
    bins, _ = packed(make_samples(30))
    opcodes = list(pickletools.genops(pickle_part(npy_bytes(bins))))
    globals_named = {arg for op, arg, _ in opcodes if op.name == "GLOBAL"}
    assert globals_named == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype"}
    assert not {op.name for op, _, _ in opcodes} & {"STACK_GLOBAL", "REDUCE_EX", "INST", "OBJ", "NEWOBJ",
                                                    "NEWOBJ_EX", "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID"}
    assert max(op.proto for op, _, _ in opcodes) <= 3
    assert opcodes[0][0].name == "PROTO" and opcodes[0][1] == 3


def test_an_empty_split_and_a_wrong_count(tmp_path):
    out = io.BytesIO()
    write_packed_npy([], 0, out)
    assert np.load(io.BytesIO(out.getvalue()), allow_pickle=True).shape == (0,)
    bins, _ = packed(make_samples(5))
    triples = [(b.input_ids, b.loss_mask, b.seq_start_id) for b in bins]
    with pytest.raises(ValueError, match="announced"):
        write_packed_npy(triples, len(triples) + 1, io.BytesIO())
    with pytest.raises(ValueError, match="more bins than"):
        write_packed_npy(triples, len(triples) - 1, io.BytesIO())


def test_the_split_npy_from_parquet_shards_in_order(tmp_path):
    first, _ = packed(make_samples(60, seed=1))
    second, _ = packed(make_samples(70, seed=2))
    write_shard(tmp_path, first, "shard_00000")
    write_shard(tmp_path, second, "shard_00001")
    info = npy_from_shards([tmp_path / "shard_00000.parquet", tmp_path / "shard_00001.parquet"], tmp_path / "t.npy")
    loaded = load_like_bridge((tmp_path / "t.npy").read_bytes())
    assert [item["input_ids"] for item in loaded] == [b.input_ids.tolist() for b in first + second]
    assert info.bytes == (tmp_path / "t.npy").stat().st_size
    assert info.sha256 == hashlib.sha256((tmp_path / "t.npy").read_bytes()).hexdigest()


# --- metadata and manifest -------------------------------------------------------------------------------------------


def hand_samples():
    def s(i, n):
        return PackSample(f"s{i}", "d", i, np.arange(n, dtype=np.int32), np.array([0] + [1] * (n - 1), np.uint8))
    return [s(0, 3), s(1, 2), s(2, 4)]  # 2 + 1 + 3 positions


def test_bridge_packing_metadata_worked_by_hand():
    # pack_size 4, next fit: bin 0 = samples 0 and 1 (3 positions), bin 1 = sample 2 (3 positions)
    _, stats = packed(hand_samples(), pack_size=4, packing="concatenative")
    assert bridge_packing_metadata(stats) == {
        "dataset_max_seqlen": 3, "max_samples_per_bin": 2, "packing_factor": 1.5,
        "packing_efficiency": 75.0, "pack_size": 4, "min_packed_seqlen": 3}
    _, valid = packed(hand_samples()[:1], pack_size=4)
    listed = json.loads(packing_metadata_json({"valid": valid, "train": stats, "test": PackStats(pack_size=4)}))
    assert [entry["max_samples_per_bin"] for entry in listed] == [2, 1]  # train then valid; test has no bins


def test_the_manifest_lists_files_counts_and_what_determines_the_ids():
    bins, stats = packed(hand_samples(), pack_size=4, packing="concatenative")
    summary = SplitSummary(["train/shard_00000.parquet", "train/shard_00000.samples.parquet"], stats,
                           npy="train.npy")
    manifest = sft_manifest({"train": summary}, PackSettings(pack_size=4, packing="concatenative"),
                            ["parquet", "npy"], tokenizer_sha256="t" * 64, template_sha256="c" * 64, eos_id=2)
    train = manifest["splits"]["train"]
    assert (train["samples"], train["bins"], train["tokens"], train["trained_tokens"]) == (3, 2, 9, 6)
    assert train["packing_efficiency"] == 0.75 and train["licenses"] == {"unknown": 3}
    assert train["bridge_glob"] == "train/shard_?????.parquet" and train["npy"] == "train.npy"
    assert (manifest["tokenizer_sha256"], manifest["template_sha256"], manifest["eos_id"]) == ("t" * 64, "c" * 64, 2)
    assert manifest["formats"] == ["parquet", "npy"] and manifest["packing"] == "concatenative"
    json.dumps(manifest)  # plain JSON


def test_split_stats_merge_like_one_run():
    samples = make_samples(90)
    settings = PackSettings(pack_size=512, pack_window=30)
    whole = PackStats(pack_size=512)
    list(pack_samples(samples, settings, whole))
    merged = PackStats(pack_size=512)
    for k in range(3):
        part = PackStats(pack_size=512)
        list(pack_samples(samples[30 * k:30 * k + 30], settings, part, first_window=k))
        merged.merge(part)
    assert merged.as_dict() == whole.as_dict()


# --- checks on written shards ----------------------------------------------------------------------------------------


def test_a_good_shard_passes_its_checks_and_unpacks_to_the_planned_samples(tmp_path):
    samples = make_samples(150)
    bins, _ = packed(samples)
    write_shard(tmp_path, bins)
    assert packed_shard_problems(tmp_path / "shard_00000.parquet", tmp_path / "shard_00000.samples.parquet", 512) == []
    planned = [((s.dataset, s.id, s.sample, s.copy), planned_digest(s, PackSettings(pack_size=512))) for s in samples]
    stored = stored_samples(tmp_path / "shard_00000.parquet", tmp_path / "shard_00000.samples.parquet")
    assert compare_samples(stored, planned) == []


def rewrite_first_bin(path, **changes):
    rows = pq.read_table(path).to_pylist()
    rows[0].update(changes)
    pq.write_table(pa.Table.from_pylist(rows, schema=pq.read_schema(path)), path)


def test_checks_catch_a_broken_bin(tmp_path):
    samples = make_samples(40)
    bins, _ = packed(samples)
    write_shard(tmp_path, bins)
    shard, listing = tmp_path / "shard_00000.parquet", tmp_path / "shard_00000.samples.parquet"
    first = bins[0]
    rewrite_first_bin(shard, loss_mask=[1] * len(first.input_ids))
    problems = packed_shard_problems(shard, listing, 512)
    assert any("bin 0: a sample's last loss_mask position is not 0" in p for p in problems)
    planned = [((s.dataset, s.id, s.sample, s.copy), planned_digest(s, PackSettings(pack_size=512))) for s in samples]
    assert any("differs from the planned one" in p for p in compare_samples(stored_samples(shard, listing), planned))
    assert packed_shard_problems(shard, listing, pack_size=first.positions - 1)[0].endswith(
        f"exceeds pack_size {first.positions - 1}")


def test_checks_catch_a_samples_file_that_disagrees_with_the_bins(tmp_path):
    bins, _ = packed(make_samples(40))
    write_shard(tmp_path, bins)
    listing = tmp_path / "shard_00000.samples.parquet"
    table = pq.read_table(listing)
    pq.write_table(table.slice(1), listing)
    problems = packed_shard_problems(tmp_path / "shard_00000.parquet", listing, 512)
    assert problems and "expected (bin 0, offset 0" in problems[0]


def test_a_shard_is_read_back_a_batch_of_bins_at_a_time_across_its_row_groups(tmp_path):
    """Reading a shard back (its checks, the .npy) decodes `READ_BATCH_BINS` bins at a time, not whole row groups of
    1,000: at pack_size 8192 a row group decoded at once cost ~270 MB of RSS."""
    samples = [PackSample(f"s{i}", "d", i, np.arange(i, i + 5, dtype=np.int32), np.array([0, 0, 1, 1, 1], np.uint8))
               for i in range(2500)]
    bins, _ = packed(samples, pack_size=4)  # one sample per bin: row groups of 1000, 1000 and 500 bins
    write_shard(tmp_path, bins)
    batches = [batch.num_rows for batch in bin_batches(pq.ParquetFile(tmp_path / "shard_00000.parquet"))]
    assert sum(batches) == 2500 and max(batches) == READ_BATCH_BINS < 1000
    read = list(iter_packed_bins(tmp_path / "shard_00000.parquet"))
    assert [[part.tolist() for part in bin_] for bin_ in read] == [
        [b.input_ids.tolist(), b.loss_mask.tolist(), b.seq_start_id.tolist()] for b in bins]


def test_iter_packed_bins_refuses_a_file_that_is_not_a_packed_shard(tmp_path):
    pq.write_table(pa.table({"input_ids": [[1, 2]]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match="missing column"):
        list(iter_packed_bins(tmp_path / "x.parquet"))


def test_the_packing_modules_never_import_dagster():
    code = ("import sys, nemotron_assets.formats.packing, nemotron_assets.formats.packed_sft, "
            "nemotron_assets.formats.splits, nemotron_assets.formats.transforms; print('dagster' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
