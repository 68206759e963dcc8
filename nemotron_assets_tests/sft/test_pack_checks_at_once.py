"""The packed shard's checks decided at once (`pack_checks._all_pass`): a shard that is exactly the planned one
passes without the per-sample checks, and every kind of damage sends it to them (which then name it)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron_assets.sft.packing import PackSettings, PackStats, build_bin, plan_bins, prepare_sample
from nemotron_assets.sft.steps import pack_checks
from nemotron_assets.sft.steps.pack_step import StoredSample
from nemotron_assets.sft.writers import write_packed_shard

SETTINGS = PackSettings(pack_size=256)
FILE = "chat/shard_00000"


def no_truncate(ids, mask, max_tokens):
    raise AssertionError("nothing is over-long here")


@pytest.fixture
def shard(tmp_path):
    """40 samples (a masked prompt, then a trained answer), planned and written as the packer does."""
    rng = np.random.default_rng(7)
    samples = {}
    for row in range(40):
        length = int(rng.integers(4, 120))
        answer = int(rng.integers(2, length))
        mask = np.zeros(length, dtype=np.uint8)
        mask[answer:] = 1
        samples[(FILE, row)] = StoredSample(f"id{row}", "chat", 0, None, row, rng.integers(0, 9000, length,
                                            dtype=np.int32), mask, np.array([1, answer], dtype=np.int32))
    stored = list(samples.values())
    bins = plan_bins([len(s.input_ids) - 1 for s in stored], SETTINGS)
    stats = PackStats(pack_size=SETTINGS.pack_size)
    write_packed_shard((build_bin([prepare_sample(stored[i].pack_sample(0), SETTINGS, stats) for i in members])
                        for members in bins), tmp_path / "s.parquet", tmp_path / "s.samples.parquet")
    order = [i for members in bins for i in members]
    rows = pa.table({"file": [FILE] * len(order), "row": order, "copy": [0] * len(order)})
    return tmp_path / "s.parquet", tmp_path / "s.samples.parquet", rows, samples


def all_pass(shard) -> bool:
    packed, listing, rows, samples = shard
    return pack_checks._all_pass(packed, listing, rows, samples, SETTINGS, no_truncate)


def rewrite(path, change):
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def test_the_planned_shard_passes_at_once(shard):
    assert all_pass(shard)


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
    packed, listing, rows, samples = shard
    first = samples[(FILE, 0)]
    samples[(FILE, 0)] = StoredSample(first.id, first.dataset, first.sample, first.license, first.source_row,
                                      first.input_ids, first.assistant_mask,
                                      np.array([1, len(first.input_ids)], dtype=np.int32))  # the answer too
    assert not all_pass(shard)
    problems = pack_checks._masked_role_problems(packed, listing, {("chat", s.id, 0): s for s in samples.values()})
    assert problems and "trained token(s) in masked span" in problems[0]
