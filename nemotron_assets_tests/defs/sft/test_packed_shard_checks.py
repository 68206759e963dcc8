"""The packed shard's checks decided at once (`pack_checks._all_pass`): a shard that is exactly the planned one
passes without the per-sample checks, and every kind of damage sends it to them (which then name it)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.defs.sft import pack_checks
from nemotron_assets.defs.sft.pack_step import SAMPLE_SCHEMA, ShardSamples
from nemotron_assets.formats import packed_sft
from nemotron_assets.formats.packing import PackSettings, PackStats, build_bin, plan_bins, prepare_sample
from nemotron_assets_tests.formats.packing_stream import write_packed_shard

FILE = "chat/shard_00000"
#: the shard's planned samples compared at once (stored as they are), or prepared one by one (padded)
SETTINGS = {"as stored": PackSettings(pack_size=256),
            "padded": PackSettings(pack_size=256, pad_to_multiple=4, pad_id=0)}


def no_truncate(ids, mask, max_tokens):
    raise AssertionError("nothing is over-long here")


def as_read(columns: dict, rows: pa.Table) -> ShardSamples:
    """The samples (a samples file's columns, row r = sample r) as `pack_step.read_samples` returns them."""
    table = pa.Table.from_pydict(columns, schema=SAMPLE_SCHEMA)
    where = rows.column("row").to_numpy().astype(np.int64)
    return ShardSamples([table], np.zeros(len(where), dtype=np.int64), where)


@pytest.fixture(params=list(SETTINGS))
def shard(tmp_path, request):
    """40 samples (a masked prompt, then a trained answer), planned and written as the packer does."""
    settings = SETTINGS[request.param]
    rng = np.random.default_rng(7)
    columns = {name: [] for name in SAMPLE_SCHEMA.names}
    for row in range(40):
        length = int(rng.integers(4, 120))
        answer = int(rng.integers(2, length))
        mask = np.zeros(length, dtype=np.uint8)
        mask[answer:] = 1
        for name, value in (("id", f"id{row}"), ("dataset", "chat"), ("sample", 0), ("license", None),
                            ("source_row", row), ("input_ids", rng.integers(0, 9000, length, dtype=np.int32)),
                            ("assistant_mask", mask), ("masked_spans", np.array([1, answer], dtype=np.int32))):
            columns[name].append(value)
    rows = pa.table({"file": [FILE] * 40, "row": list(range(40)), "copy": [0] * 40})
    stored = list(as_read(columns, rows).by_position(rows).values())
    stats = PackStats(pack_size=settings.pack_size)
    ready = [prepare_sample(sample.pack_sample(0), settings, stats) for sample in stored]
    bins = plan_bins([len(sample.input_ids) - 1 for sample in ready], settings)
    write_packed_shard((build_bin([ready[i] for i in members]) for members in bins), tmp_path / "s.parquet",
                       tmp_path / "s.samples.parquet")
    order = [i for members in bins for i in members]
    rows = pa.table({"file": [FILE] * len(order), "row": order, "copy": [0] * len(order),
                     "length": [len(ready[i].input_ids) for i in order]})
    return tmp_path / "s.parquet", tmp_path / "s.samples.parquet", rows, columns, settings


def all_pass(shard) -> bool:
    packed, listing, rows, columns, settings = shard
    return pack_checks._all_pass(packed, listing, rows, as_read(columns, rows), settings, no_truncate)


def rewrite(path, change):
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def test_the_planned_shard_passes_at_once(shard):
    assert all_pass(shard)


@pytest.mark.parametrize("bins_per_batch", [1, 3])
def test_a_shard_read_a_few_bins_at_a_time_passes_and_damage_in_a_later_batch_is_caught(shard, bins_per_batch,
                                                                                        monkeypatch):
    """The bins are compared with the planned samples one read batch at a time (`packed_sft.READ_BATCH_BINS`)."""
    monkeypatch.setattr(packed_sft, "READ_BATCH_BINS", bins_per_batch)
    assert pq.ParquetFile(shard[0]).metadata.num_rows > 3 * bins_per_batch
    assert all_pass(shard)
    rewrite(shard[0], lambda rows: rows[-1]["input_ids"].__setitem__(-1, rows[-1]["input_ids"][-1] + 1))
    assert not all_pass(shard)


@pytest.mark.parametrize("damage", [
    lambda rows: rows[0]["input_ids"].__setitem__(5, rows[0]["input_ids"][5] + 1),  # another token
    lambda rows: rows[0]["loss_mask"].__setitem__(0, 1 - rows[0]["loss_mask"][0]),  # a masked prompt token trained
    lambda rows: rows[1]["seq_start_id"].__setitem__(-1, rows[1]["seq_start_id"][-1] + 1),  # a moved boundary
    lambda rows: rows.pop(),  # a bin lost
])
def test_damage_to_the_bins_is_left_to_the_per_sample_checks(shard, damage):
    rewrite(shard[0], damage)
    assert not all_pass(shard)


def test_a_listing_that_disagrees_is_left_to_the_per_sample_checks(shard):
    rewrite(shard[1], lambda rows: rows[3].__setitem__("copy", 1))
    assert not all_pass(shard)


def test_a_masked_span_over_trained_text_is_left_to_the_per_sample_checks(shard):
    packed, listing, rows, columns, settings = shard
    columns["masked_spans"][0] = np.array([1, len(columns["input_ids"][0])], dtype=np.int32)  # the answer too
    assert not all_pass(shard)
    by_key = {("chat", s.id, 0): s for s in as_read(columns, rows).by_position(rows).values()}
    problems = pack_checks._masked_role_problems(packed, listing, by_key)
    assert problems and "trained token(s) in masked span" in problems[0]


def test_the_at_once_comparison_is_used_only_for_samples_stored_as_they_are(shard):
    _, _, rows, columns, settings = shard
    planned = pack_checks._planned_shard(rows, as_read(columns, rows), settings, no_truncate)
    assert planned is not None and len(planned.keys) == 40
    padded = settings.pad_to_multiple > 1
    assert (len(planned.input_ids) > sum(len(ids) for ids in columns["input_ids"])) == padded


def test_a_sample_planned_twice_as_the_same_copy_is_left_to_the_per_sample_checks(shard):
    packed, listing, rows, columns, settings = shard
    twice = pa.concat_tables([rows, rows.slice(0, 1)])
    assert pack_checks._planned_shard(twice, as_read(columns, twice), settings, no_truncate) is None


@pytest.mark.parametrize("shard", ["as stored"], indirect=True)  # padded samples take a key's spans from its last
def test_one_key_naming_two_samples_is_left_to_the_per_sample_checks(shard):  # sample, as the per-sample check does
    packed, listing, rows, columns, settings = shard
    first, other = rows.column("row")[0].as_py(), rows.column("row")[1].as_py()
    columns["id"][other] = columns["id"][first]  # another sample under the first one's key, as a second copy
    copies = rows.set_column(rows.schema.get_field_index("copy"), "copy", pa.array([0, 1] + [0] * (len(rows) - 2)))
    assert pack_checks._planned_shard(copies, as_read(columns, copies), settings, no_truncate) is None
