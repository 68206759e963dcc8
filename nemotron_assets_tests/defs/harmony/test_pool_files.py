"""Pool files (defs/harmony/pools.py `stage_pools`): exactly the rows the predicate selects, in order, counted per
dataset, in row groups sized by bytes (so memory stays bounded whatever the rows' length). Read back with pyarrow."""

import json

import polars as pl
import pyarrow.parquet as pq
import pytest

from nemotron_assets.defs.harmony.pools import (
    ROW_GROUP_BYTES,
    ROW_OVERHEAD_BYTES,
    PoolThresholds,
    row_group_rows,
    stage_pools,
)


def rows(count: int, chars: int) -> pl.LazyFrame:
    """``count`` valid rows of two datasets with ``chars``-long texts; every third one calls a tool."""
    text = "x" * chars
    return pl.LazyFrame({
        "id": [f"id{i}" for i in range(count)], "dataset": ["a" if i % 2 else "b" for i in range(count)],
        "text": [text] * count, "stats_char_len": [chars] * count,
        "quality_valid_harmony": [True] * count, "quality_completion_nonempty": [True] * count,
        "quality_valid_tool_schema": [True] * count, "quality_is_duplicate": [False] * count,
        "quality_placeholder_prompt": [False] * count, "quality_has_tool": [i % 3 == 0 for i in range(count)],
    })


@pytest.mark.parametrize(("count", "chars"), [(400, 200_000), (5000, 100)])
def test_pool_holds_the_selected_rows_in_order_in_row_groups_of_bounded_bytes(tmp_path, count, chars):
    manifest = stage_pools(rows(count, chars), {"tool_use": tmp_path}, PoolThresholds())["tool_use"]
    path = tmp_path / "part-00000.parquet"
    selected = [i for i in range(count) if i % 3 == 0]
    assert pq.read_table(path, columns=["id"]).column("id").to_pylist() == [f"id{i}" for i in selected]
    by_dataset = {"a": sum(i % 2 == 1 for i in selected), "b": sum(i % 2 == 0 for i in selected)}
    assert manifest["rows"] == len(selected) and manifest["rows_by_dataset"] == by_dataset
    assert json.loads((path.parent / "manifest.json").read_text()) == manifest
    metadata = pq.ParquetFile(path).metadata
    group_rows = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert max(group_rows) <= ROW_GROUP_BYTES // (2 * chars)  # a group holds at most the byte target
    if count * 2 * chars > 4 * ROW_GROUP_BYTES:
        assert len(group_rows) > 1


def test_row_group_rows_follow_the_mean_row_length():
    def lengths(*chars: int) -> pl.LazyFrame:
        return pl.LazyFrame({"stats_char_len": list(chars)}, schema={"stats_char_len": pl.Int64})

    assert row_group_rows(lengths(1_000_000, 1_000_000)) == ROW_GROUP_BYTES // (2_000_000 + ROW_OVERHEAD_BYTES) == 16
    assert row_group_rows(lengths(0, 2_000_000)) == 16  # the mean
    assert row_group_rows(lengths(1, 1)) == ROW_GROUP_BYTES // (2 + ROW_OVERHEAD_BYTES)
    assert row_group_rows(lengths(10**9)) == 1  # one enormous row: one row per group
    assert row_group_rows(lengths()) == ROW_GROUP_BYTES // ROW_OVERHEAD_BYTES  # an empty pool: no mean


def test_pools_staged_together_are_the_bytes_of_each_pool_staged_alone(tmp_path):
    """`stage_pools` runs every pool's sink in one pass over the rows; each file must not depend on the others."""
    pools = ("tool_use", "has_correctness_meta", "missing_correctness_meta")
    together = {pool: tmp_path / "together" / pool for pool in pools}
    for folder in together.values():
        folder.mkdir(parents=True)
    # 100,000-character rows, so each pool has several row groups; a correctness on every fourth row, so the pools
    # differ in size
    source = rows(600, 100_000).with_columns(
        meta_correctness=pl.Series([0.9 if i % 4 == 0 else None for i in range(600)], dtype=pl.Float64))
    stage_pools(source, together, PoolThresholds())
    for pool in pools:
        alone = tmp_path / "alone" / pool
        alone.mkdir(parents=True)
        stage_pools(source, {pool: alone}, PoolThresholds())
        for name in ("part-00000.parquet", "manifest.json"):
            assert (together[pool] / name).read_bytes() == (alone / name).read_bytes(), (pool, name)
