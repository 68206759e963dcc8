"""A packed shard laid out at once (defs/sft/pack_step.py ``build_at_once``) against the same shard built sample by
sample (``build_sample_by_sample``, `packing.build_bin` per bin): the same bytes and counts for any samples, plan,
copies and row-group size; the bins read back with pyarrow unpack into the samples as this file computes them; and
`read_samples` gathers the plan's rows from several samples files and record batches in plan order."""

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.sft import pack_step
from nemotron_assets.defs.sft.layout import sft_samples_prefix
from nemotron_assets.defs.sft.pack_step import SAMPLE_SCHEMA, ShardSamples, read_samples
from nemotron_assets.formats.packing import PackSettings, plan_bins

FILE = "chat/shard_00000"


def samples_table(lengths: list[int], seed: int) -> pa.Table:
    """Samples of the given lengths as a samples file holds them: random ids, a masked prompt (maybe empty: then the
    first token is trained, and the shift must not carry it into the sample before) then a trained answer, the
    prompt as a masked span; ids, datasets and licenses vary (some licenses null)."""
    rng = np.random.default_rng(seed)
    ids, masks, spans = [], [], []
    for length in lengths:
        answer = int(rng.integers(0, length))
        mask = np.zeros(length, dtype=np.uint8)
        mask[answer:] = 1
        ids.append(rng.integers(0, 2**31 - 1, length, dtype=np.int32).tolist())
        masks.append(mask.tolist())
        spans.append([0, answer])
    count = len(lengths)
    return pa.Table.from_pydict({
        "id": [f"conv-{n}" for n in range(count)], "dataset": [f"set{n % 2}" for n in range(count)],
        "sample": [n % 3 for n in range(count)], "license": [None if n % 4 == 0 else "cc-by-4.0" for n in range(count)],
        "source_row": [1000 + n for n in range(count)], "input_ids": ids, "assistant_mask": masks,
        "masked_spans": spans,
    }, schema=SAMPLE_SCHEMA)


def planned(table: pa.Table, pack: PackSettings, copies: int, seed: int) -> tuple[pa.Table, ShardSamples]:
    """Plan rows for every sample, ``copies`` times (each copy a plan row of its own), packed by `plan_bins`, and
    the samples they name as `read_samples` returns them (one part: the whole table)."""
    lengths = [len(ids) for ids in table.column("input_ids").to_pylist()]
    rows = [(row, copy) for copy in range(copies) for row in range(len(lengths))]
    order = np.random.default_rng(seed).permutation(len(rows))  # the plan's rows come in any order of samples
    offered = [rows[i] for i in order]
    bins = plan_bins([lengths[row] - 1 for row, _ in offered], pack)
    placed = [(number, *offered[i]) for number, members in enumerate(bins) for i in members]
    plan = pa.table({"bin": [b for b, _, _ in placed], "file": [FILE] * len(placed),
                     "row": [row for _, row, _ in placed], "copy": [copy for _, _, copy in placed],
                     "length": [lengths[row] for _, row, _ in placed]})
    where = np.array([row for _, row, _ in placed], dtype=np.int64)
    return plan, ShardSamples([table], np.zeros(len(where), dtype=np.int64), where)


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(2, 97), min_size=1, max_size=60), pack_size=st.integers(96, 300),
       copies=st.integers(1, 2), row_group_bins=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_at_once_writes_the_bytes_and_counts_of_sample_by_sample(tmp_path_factory, lengths, pack_size, copies,
                                                                  row_group_bins, seed):
    folder = tmp_path_factory.mktemp("shard")
    pack = PackSettings(pack_size=pack_size)
    rows, samples = planned(samples_table(lengths, seed), pack, copies, seed)
    assert pack_step.stored_as_they_are(rows, samples, pack)
    at_once = pack_step.build_at_once(rows, samples, pack, folder / "a.parquet", folder / "a.samples.parquet",
                                      row_group_bins)
    one_by_one = pack_step.build_sample_by_sample(rows, samples, pack, None, folder / "b.parquet",
                                                  folder / "b.samples.parquet", row_group_bins)
    assert sha256(folder / "a.parquet") == sha256(folder / "b.parquet")
    assert sha256(folder / "a.samples.parquet") == sha256(folder / "b.samples.parquet")
    assert at_once.as_dict() == one_by_one.as_dict() and at_once.files == one_by_one.files
    assert pq.ParquetFile(folder / "a.parquet").num_row_groups == -(-at_once.stats.bins // row_group_bins)


def test_the_bins_read_back_are_the_planned_samples_with_their_masks_shifted(tmp_path):
    table = samples_table([5, 17, 2, 40, 9, 33, 3, 60], seed=3)
    pack = PackSettings(pack_size=64)
    rows, samples = planned(table, pack, copies=2, seed=5)
    stats = pack_step.build_at_once(rows, samples, pack, tmp_path / "s.parquet", tmp_path / "s.samples.parquet")
    bins = pq.read_table(tmp_path / "s.parquet").to_pylist()
    listing = pq.read_table(tmp_path / "s.samples.parquet").to_pylist()
    ids, masks = table.column("input_ids").to_pylist(), table.column("assistant_mask").to_pylist()
    assert len(listing) == rows.num_rows == stats.stats.samples == 16
    for entry, plan_row in zip(listing, rows.to_pylist()):
        row = plan_row["row"]
        stored = bins[entry["bin"]]
        start, length = entry["offset"], entry["length"]
        assert entry["bin"] == plan_row["bin"] and entry["copy"] == plan_row["copy"]
        assert (entry["id"], entry["source_row"], entry["truncated"]) == (f"conv-{row}", 1000 + row, False)
        assert stored["input_ids"][start : start + length] == ids[row]
        assert stored["loss_mask"][start : start + length] == masks[row][1:] + [0]  # shifted; the last predicts none
        assert start in stored["seq_start_id"]
    for stored in bins:
        assert stored["seq_start_id"][0] == 0
        assert len(stored["input_ids"]) - len(stored["seq_start_id"]) <= 64


def test_padding_or_an_over_long_sample_is_built_sample_by_sample():
    table = samples_table([5, 17, 9], seed=1)
    rows, samples = planned(table, PackSettings(pack_size=64), copies=1, seed=1)
    assert pack_step.stored_as_they_are(rows, samples, PackSettings(pack_size=64))
    assert not pack_step.stored_as_they_are(rows, samples, PackSettings(pack_size=64, pad_to_multiple=4, pad_id=0))
    assert not pack_step.stored_as_they_are(rows, samples, PackSettings(pack_size=15, overlong="truncate"))
    shorter = rows.set_column(rows.schema.get_field_index("length"), "length",
                              pa.array([n - 1 for n in rows.column("length").to_pylist()]))
    assert not pack_step.stored_as_they_are(shorter, samples, PackSettings(pack_size=64))


def write_samples_file(root, file: str, table: pa.Table, group_rows: int) -> None:
    """A samples file of record batches of `group_rows` rows, written with pyarrow's own IPC writer."""
    path = root / (sft_samples_prefix("blend", ShardKey.parse(file)) + ".arrow")
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.ipc.new_file(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=group_rows)


def test_read_samples_gathers_rows_of_several_files_and_record_batches_in_plan_order(tmp_path):
    first, second = samples_table([3, 8, 2, 30, 7, 12, 5], seed=1), samples_table([4, 9, 21], seed=2)
    write_samples_file(tmp_path, "a/shard_00000", first, group_rows=3)
    write_samples_file(tmp_path, "b/shard_00003", second, group_rows=2)
    wanted = [("b/shard_00003", 2), ("a/shard_00000", 5), ("a/shard_00000", 0), ("b/shard_00003", 2),
              ("a/shard_00000", 3), ("b/shard_00003", 0)]  # row 2 of b twice: two copies
    rows = pa.table({"file": [file for file, _ in wanted], "row": [row for _, row in wanted]})
    found = read_samples(Storage(str(tmp_path)), "blend", rows)
    tables = {"a/shard_00000": first, "b/shard_00003": second}
    expected = [tables[file].slice(row, 1).to_pylist()[0] for file, row in wanted]
    bounds, ids = found.list_parts("input_ids")
    assert [ids[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])] == [e["input_ids"] for e in expected]
    bounds, masks = found.list_parts("assistant_mask")
    assert [masks[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])] == [e["assistant_mask"] for e in expected]
    assert found.column("id").to_pylist() == [e["id"] for e in expected]
    assert found.lengths().tolist() == [len(e["input_ids"]) for e in expected]
    one = found.by_position(rows)[("a/shard_00000", 3)]
    assert one.input_ids.tolist() == expected[4]["input_ids"] and one.source_row == expected[4]["source_row"]

    missing = pa.table({"file": ["a/shard_00000"], "row": [7]})
    with pytest.raises(RuntimeError, match=r"a/shard_00000.arrow has no row 7, which the plan names"):
        read_samples(Storage(str(tmp_path)), "blend", missing)
