"""Exact deduplication of a dataset's normalized rows: SHA1 of the Harmony text (the ``id`` column).

The first occurrence in (shard, row) order wins, which is (dataset, split, file, row) order because shards are
contiguous ranges of the sorted files. It runs after every shard exists, on the ``id`` column only, so it is
correct however the shards were built (in parallel, in any order). Every planned shard must be up to date
(core/records.py): deduplicating a mix of old and new shards would silently keep or drop the wrong rows.

Memory: exact dedup must hold the ids it compares, ~70 bytes per row. Up to `BUCKET_ROWS` rows that is one pass;
above, the ids are split by a hash into buckets of about that many rows, deduplicated one bucket after the other
(equal ids always share a bucket), so memory does not grow with the dataset, only the number of passes over the
``id`` column does.

Output: ``<base>/harmony/<dataset>/duplicates.parquet`` with ``shard`` (index in the plan), ``row`` and ``id`` of
every row that repeats an earlier one.
"""

from collections.abc import Iterator

import polars as pl

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.records import NotReady, read_manifest, stored_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import duplicates_path, harmony_shard_path
from nemotron_assets.defs.harmony.shard import HarmonyDataset, harmony_freshness
from nemotron_assets.sources.manifest import SourceManifest

SHOWN = 10
#: Rows whose ids one dedup pass holds in memory (about 150 MB of them); bigger datasets are split in buckets.
BUCKET_ROWS = 2_000_000


def find_duplicates(shard_paths: list[str], storage_options: dict | None = None,
                    bucket_rows: int = BUCKET_ROWS) -> pl.DataFrame:
    """Rows that repeat an earlier row's id: columns ``shard`` (index in ``shard_paths``), ``row``, ``id``, in
    (shard, row) order."""
    if not shard_paths:
        return pl.DataFrame(schema={"shard": pl.Int64, "row": pl.Int64, "id": pl.String})
    frames = [
        pl.scan_parquet(path, storage_options=storage_options).select("id")
        .with_row_index("row").with_columns(pl.col("row").cast(pl.Int64), pl.lit(index, dtype=pl.Int64).alias("shard"))
        for index, path in enumerate(shard_paths)
    ]
    ids = pl.concat(frames, how="vertical")
    found = [bucket.sort("shard", "row").filter(~pl.col("id").is_first_distinct())
             for bucket in _buckets(ids, bucket_rows)]
    return pl.concat(found).sort("shard", "row").select("shard", "row", "id")


def _buckets(ids: pl.LazyFrame, bucket_rows: int) -> Iterator[pl.DataFrame]:
    """The rows of ``ids`` in buckets of about ``bucket_rows`` rows by a hash of ``id`` (all of them in one bucket
    when they fit), each collected with the streaming engine."""
    rows = ids.select(pl.len()).collect().item()
    count = max(1, -(-rows // bucket_rows))
    if count == 1:
        yield ids.collect(engine="streaming")
        return
    for bucket in range(count):
        yield ids.filter(pl.col("id").hash(seed=0) % count == bucket).collect(engine="streaming")


def current_shards(store: Storage, dataset: HarmonyDataset, base: str, manifest: SourceManifest) -> list[str]:
    """The dataset's planned Harmony shard files, in plan order; ``NotReady`` naming every shard that is not up
    to date (a missing one would hide duplicates, a stale one would mix old rows in)."""
    not_done: dict[str, list[str]] = {}
    for shard in manifest.shards:
        state = harmony_freshness(store, dataset, base, manifest, shard.index)
        if not state.done:
            key = ShardKey(manifest.dataset, shard.index)
            not_done.setdefault(f"{state.state.value}: {state.reason}", []).append(str(key))
    if not_done:
        reasons = "; ".join(f"{len(keys)} {why}: {', '.join(keys[:SHOWN])}" for why, keys in not_done.items())
        raise NotReady(f"Harmony shards of {manifest.dataset!r} are not up to date ({reasons}); materialize "
                       f"{dataset.blend}/harmony_shard for them first")
    return [harmony_shard_path(base, ShardKey(manifest.dataset, s.index)) for s in manifest.shards]


def deduplicated_rows(store: Storage, dataset: HarmonyDataset, base: str) -> pl.LazyFrame:
    """A dataset's rows without the ones its dedup result marks as repeats, ``quality_is_duplicate`` false (lazy)."""
    options = store.polars_options()
    manifest = read_manifest(store, base, dataset.name)
    frames = [pl.scan_parquet(store.url(path), storage_options=options).with_row_index("_row")
              .with_columns(pl.lit(index, dtype=pl.Int64).alias("_shard"))
              for index, path in enumerate(current_shards(store, dataset, base, manifest))]
    found = stored_path(store, duplicates_path(base, dataset.name))  # its legacy place in a tree not moved yet
    duplicates = (pl.scan_parquet(store.url(found), storage_options=options)
                  .select(pl.col("shard").alias("_shard"), pl.col("row").alias("_row"),
                          pl.lit(True).alias("_duplicate")))
    joined = pl.concat(frames, how="vertical").with_columns(pl.col("_row").cast(pl.Int64)).join(
        duplicates, on=["_shard", "_row"], how="left", maintain_order="left")
    return joined.with_columns(quality_is_duplicate=pl.col("_duplicate").fill_null(False)).filter(
        ~pl.col("quality_is_duplicate")).drop("_row", "_shard", "_duplicate")


def repeated_ids(store: Storage, dataset: HarmonyDataset, base: str, bucket_rows: int = BUCKET_ROWS) -> int:
    """Ids that still occur more than once after removing the duplicates (the dedup check: must be 0)."""
    return count_repeated(deduplicated_rows(store, dataset, base).select("id"), bucket_rows)


def count_repeated(ids: pl.LazyFrame, bucket_rows: int = BUCKET_ROWS) -> int:
    """How many distinct values of the ``id`` column occur more than once."""
    return sum(bucket.filter(pl.col("id").is_duplicated())["id"].n_unique() for bucket in _buckets(ids, bucket_rows))
