"""Exact deduplication of a dataset's normalized rows: SHA1 of the Harmony text (the ``id`` column).

The first occurrence in (shard, row) order wins, which is (dataset, split, file, row) order because shards are
contiguous ranges of the sorted files. It runs after every shard exists, on the ``id`` column only, so it is
correct however the shards were built (in parallel, in any order) and needs ~60 bytes per row.
"""

import polars as pl


def find_duplicates(shard_paths: list[str], storage_options: dict | None = None) -> pl.DataFrame:
    """Rows that repeat an earlier row's id: columns ``shard`` (index in ``shard_paths``), ``row``, ``id``."""
    if not shard_paths:
        return pl.DataFrame(schema={"shard": pl.Int64, "row": pl.Int64, "id": pl.String})
    frames = [
        pl.scan_parquet(path, storage_options=storage_options).select("id")
        .with_row_index("row").with_columns(pl.lit(index, dtype=pl.Int64).alias("shard"))
        for index, path in enumerate(shard_paths)
    ]
    ids = pl.concat(frames, how="vertical").collect()
    duplicates = ids.filter(~pl.col("id").is_first_distinct())
    return duplicates.select(pl.col("shard"), pl.col("row").cast(pl.Int64), pl.col("id"))
