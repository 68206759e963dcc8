"""Exact dedup (defs/harmony/dedup.py): the first occurrence in (shard, row) order wins, whether the ids are
compared in one pass or split into hash buckets to bound memory. Checked against a plain Python reference on
generated shards (hypothesis) with repeats inside a shard, across shards and of the first row."""

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from nemotron_assets.defs.harmony.dedup import count_repeated, find_duplicates

SHARDS = st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=12), min_size=1, max_size=5)


def reference(shards: list[list[str]]) -> list[tuple[int, int, str]]:
    """(shard, row, id) of every row whose id an earlier row already had, in (shard, row) order."""
    seen, repeats = set(), []
    for shard, ids in enumerate(shards):
        for row, id_ in enumerate(ids):
            if id_ in seen:
                repeats.append((shard, row, id_))
            seen.add(id_)
    return repeats


def write_shards(folder, shards: list[list[str]]) -> list[str]:
    paths = []
    for index, ids in enumerate(shards):
        path = folder / f"shard_{index:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.string()), "text": pa.array(ids, pa.string())}), path,
                       row_group_size=3)  # several row groups per shard
        paths.append(str(path))
    return paths


@settings(max_examples=60, deadline=None)
@given(shards=SHARDS)
def test_duplicates_are_every_later_occurrence_in_one_pass_or_in_buckets(tmp_path_factory, shards):
    paths = write_shards(tmp_path_factory.mktemp("shards"), shards)
    expected = reference(shards)
    for bucket_rows in (1, 4, 1_000_000):  # one bucket per row, a few buckets, one pass
        found = find_duplicates(paths, bucket_rows=bucket_rows)
        assert found.schema == pl.Schema({"shard": pl.Int64, "row": pl.Int64, "id": pl.String})
        assert list(found.iter_rows()) == expected


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.sampled_from("abcdefgh"), max_size=30))
def test_repeated_ids_are_counted_once_each_in_one_pass_or_in_buckets(ids):
    expected = len({i for i in ids if ids.count(i) > 1})
    frame = pl.LazyFrame({"id": ids}, schema={"id": pl.String})
    assert [count_repeated(frame, bucket_rows) for bucket_rows in (1, 5, 1_000_000)] == [expected] * 3


def test_no_shards_give_no_duplicates():
    assert find_duplicates([]).is_empty()
