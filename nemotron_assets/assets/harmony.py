"""The post-training path of one blend, for datasets that name a ``family``:

    source_split (shared with pretraining)
        -> harmony_shard (one partition per dataset shard): raw rows -> normalized Harmony Parquet
        -> harmony_dedup (one partition per dataset): which rows repeat an earlier row's text
        -> candidate_pool (one partition per pool): rows of every dataset that pass the pool's predicate
        -> embedding_view (pool x view): one text per row to embed -> behavior_report (Markdown)

Each asset reads its inputs through the storage resource, calls pure code (``normalize/``, ``posttrain/``) and
commits files atomically. Pools read every normalized shard lazily with polars (projection and predicate pushdown,
streaming sink), so a pool never holds the datasets in memory.
"""

import json
from dataclasses import dataclass

import dagster as dg
import polars as pl
from pydantic import Field

from nemotron_assets.assets.reporting import CheckOutcome, materialize_partitions, partitioned_asset
from nemotron_assets.blend import Blend
from nemotron_assets.layout import (
    ShardKey,
    duplicates_path,
    embedding_dir,
    harmony_shard_path,
    pool_dir,
)
from nemotron_assets.partitions import SHARDS_PER_RUN, harmony_partitions_name
from nemotron_assets.posttrain.dedup import find_duplicates
from nemotron_assets.posttrain.embedding import PASS_THROUGH, VIEWS, embed_text, word_count
from nemotron_assets.posttrain.harmony_shard import build_harmony_shard
from nemotron_assets.posttrain.pools import POOL_NAMES, PoolThresholds, pool_predicate
from nemotron_assets.resources.storage import StorageResource
from nemotron_assets.sources.manifest import SourceManifest, read_options
from nemotron_assets.sources.manifest import read_manifest as read_manifest_at
from nemotron_assets.storage import Storage

ROWS_MATCH_SOURCE = "rows_match_source_minus_drops"
IDS_UNIQUE = "ids_unique_after_dedup"
ROWS_SATISFY_PREDICATE = "rows_satisfy_predicate"


class PoolConfig(dg.Config):
    high_correctness: float = Field(0.875, description="correctness >= this is high")
    low_correctness: float = Field(0.25, description="correctness <= this is low")
    long_context_tokens: int = Field(8192, description="approx. tokens >= this is long context")
    include_placeholder_prompts: bool = Field(False, description="let rows whose user prompt is a placeholder "
                                                                 "(empty, whitespace, '-') into the pools")


@dataclass(frozen=True)
class HarmonyAssets:
    harmony_shard: dg.AssetsDefinition
    harmony_dedup: dg.AssetsDefinition
    candidate_pool: dg.AssetsDefinition
    embedding_view: dg.AssetsDefinition
    behavior_report: dg.AssetsDefinition
    family_partitions: dg.StaticPartitionsDefinition
    shard_partitions: dg.DynamicPartitionsDefinition

    @property
    def definitions(self) -> list:
        return [self.harmony_shard, self.harmony_dedup, self.candidate_pool, self.embedding_view,
                self.behavior_report]


def read_manifest(store: Storage, blend: str, dataset: str) -> SourceManifest:
    try:
        return read_manifest_at(store, blend, dataset)
    except FileNotFoundError as exc:
        raise dg.Failure(f"{exc} does not exist: materialize {blend}/source_split partition {dataset!r} first",
                         allow_retries=False) from None


def build_harmony_assets(blend: Blend, source_split: dg.AssetsDefinition) -> HarmonyAssets:
    """Assets and checks of the blend's family datasets; keys prefixed and grouped by the blend name."""
    name = blend.name
    family_datasets = [e.name for e in blend.entries() if e.family]
    family_partitions = dg.StaticPartitionsDefinition(family_datasets)
    shard_partitions = dg.DynamicPartitionsDefinition(name=harmony_partitions_name(name))
    pool_partitions = dg.StaticPartitionsDefinition(list(POOL_NAMES))

    @partitioned_asset(
        [name, "harmony_shard"], group=name, partitions_def=shard_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(source_split, partition_mapping=dg.AllPartitionMapping())],
        checks={ROWS_MATCH_SOURCE: "rows in the Parquet = source rows read - counted drops"},
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        description="Normalizes one shard of a post-training dataset into Harmony text + metadata (Parquet, zstd).",
    )
    def harmony_shard(context: dg.AssetExecutionContext, storage: StorageResource):
        store = storage.get()
        manifests: dict[str, SourceManifest] = {}
        yield from materialize_partitions(
            context, dg.AssetKey([name, "harmony_shard"]), context.partition_keys,
            build=lambda partition: normalize_shard(context, store, blend, manifests, partition),
            check=lambda partition: [check_shard_rows(store, name, partition)])

    @partitioned_asset(
        [name, "harmony_dedup"], group=name, partitions_def=family_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(harmony_shard, partition_mapping=dg.AllPartitionMapping())],
        checks={IDS_UNIQUE: "after removing the duplicates, every id occurs once"},
        description="Exact dedup by SHA1 of the Harmony text across all shards of a dataset; the first occurrence "
                    "in (file, row) order wins.",
    )
    def harmony_dedup(context: dg.AssetExecutionContext, storage: StorageResource):
        store = storage.get()
        yield from materialize_partitions(
            context, dg.AssetKey([name, "harmony_dedup"]), context.partition_keys,
            build=lambda dataset: dedup_dataset(context, store, blend, dataset),
            check=lambda dataset: [check_ids_unique(store, name, dataset)])

    @partitioned_asset(
        [name, "candidate_pool"], group=name, partitions_def=pool_partitions, kinds={"parquet", "polars"},
        deps=[dg.AssetDep(harmony_dedup, partition_mapping=dg.AllPartitionMapping())],
        checks={ROWS_SATISFY_PREDICATE: "every row of the pool satisfies the pool's predicate"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Rows of every normalized, deduplicated dataset that satisfy the pool's predicate.",
    )
    def candidate_pool(context: dg.AssetExecutionContext, config: PoolConfig, storage: StorageResource):
        store = storage.get()
        thresholds = PoolThresholds(config.high_correctness, config.low_correctness, config.long_context_tokens,
                                    config.include_placeholder_prompts)
        rows = normalized_rows(store, blend)
        yield from materialize_partitions(
            context, dg.AssetKey([name, "candidate_pool"]), context.partition_keys,
            build=lambda pool: write_pool(context, store, name, rows, pool, thresholds),
            check=lambda pool: [check_pool_predicate(store, name, pool)])

    @partitioned_asset(
        [name, "embedding_view"], group=name, partitions_def=pool_partitions, kinds={"parquet"},
        deps=[candidate_pool], backfill_policy=dg.BackfillPolicy.single_run(),
        description="Per pool, one text per row to embed in each view: the prompt, a reasoning excerpt, and the "
                    "value-free behavior.",
    )
    def embedding_view(context: dg.AssetExecutionContext, storage: StorageResource):
        store = storage.get()
        yield from materialize_partitions(context, dg.AssetKey([name, "embedding_view"]), context.partition_keys,
                                          build=lambda pool: write_views(store, name, pool))

    @dg.asset(
        key=[name, "behavior_report"], group_name=name, deps=[embedding_view], kinds={"markdown"},
        description="Tool-call coverage and uniqueness of every pool's behavior view: a collapsed view shows "
                    "as few distinct signatures.",
    )
    def behavior_report(context: dg.AssetExecutionContext, storage: StorageResource):
        store = storage.get()
        report = behavior_markdown({pool: store.url(f"{embedding_dir(name, 'behavior', pool)}/part-00000.parquet")
                                    for pool in POOL_NAMES}, store)
        store.write_bytes(f"{name}/embedding/behavior_report.md", report.encode())
        return dg.MaterializeResult(metadata={"report": dg.MetadataValue.md(report)})

    return HarmonyAssets(harmony_shard, harmony_dedup, candidate_pool, embedding_view, behavior_report,
                         family_partitions, shard_partitions)


# --- the steps ----------------------------------------------------------------------------------------------
def normalize_shard(context: dg.AssetExecutionContext, store: Storage, blend: Blend,
                    manifests: dict[str, SourceManifest], partition: str) -> dict:
    key = ShardKey.parse(partition)
    entry = blend.entry(key.dataset)
    if key.dataset not in manifests:
        manifests[key.dataset] = read_manifest(store, blend.name, key.dataset)
    manifest = manifests[key.dataset]
    relative = harmony_shard_path(blend.name, key)
    with store.staging() as folder:
        staged = folder / "shard.parquet"
        stats = build_harmony_shard(manifest, key.index, entry.family, entry.split, read_options(blend, entry),
                                    staged, messages_field=entry.messages_field, tools_field=entry.tools_field)
        receipt = {"shard": partition, "source_fingerprint": manifest.shard_fingerprint(key.index),
                   "stats": stats.as_dict()}
        receipt_file = relative[: -len(".parquet")] + ".json"
        store.delete(receipt_file)
        store.commit(staged, relative)
        store.write_bytes(receipt_file, json.dumps(receipt, indent=1, sort_keys=True).encode())
    if stats.dropped:
        context.log.warning(f"{partition}: {sum(stats.dropped.values())} row(s) not written (unreadable, or skipped "
                            f"by their family): {dict(stats.dropped)}; first: {stats.examples[0]}")
    context.log.info(f"{partition}: {stats.records:,} rows ({stats.valid:,} valid Harmony)")
    return {
        "path": dg.MetadataValue.path(store.url(relative)),
        "source_rows": dg.MetadataValue.int(stats.rows),
        "rows": dg.MetadataValue.int(stats.records),
        "valid_harmony": dg.MetadataValue.int(stats.valid),
        "placeholder_prompts": dg.MetadataValue.int(stats.placeholder_prompts),
        "dropped_by_reason": dg.MetadataValue.json(dict(stats.dropped)),
        "flags": dg.MetadataValue.json(dict(stats.flags)),
        "domains": dg.MetadataValue.json(dict(stats.domains)),
        "difficulty": dg.MetadataValue.json(dict(stats.difficulty)),
        "bytes": dg.MetadataValue.int(stats.bytes),
        "sha256": dg.MetadataValue.text(stats.sha256),
    }


def dedup_dataset(context: dg.AssetExecutionContext, store: Storage, blend: Blend, dataset: str) -> dict:
    paths = _existing_shards(store, blend.name, read_manifest(store, blend.name, dataset))
    duplicates = find_duplicates([store.url(p) for p in paths], store.polars_options())
    with store.staging() as folder:
        staged = folder / "duplicates.parquet"
        duplicates.write_parquet(staged, compression="zstd")
        store.commit(staged, duplicates_path(blend.name, dataset))
    rows = sum(pl.scan_parquet(store.url(p), storage_options=store.polars_options()).select(pl.len())
               .collect().item() for p in paths)
    context.log.info(f"{dataset}: {len(duplicates):,} duplicate(s) of {rows:,} rows")
    return {"rows": dg.MetadataValue.int(rows), "duplicates": dg.MetadataValue.int(len(duplicates)),
            "unique": dg.MetadataValue.int(rows - len(duplicates))}


def write_pool(context: dg.AssetExecutionContext, store: Storage, blend: str, rows: pl.LazyFrame, pool: str,
               thresholds: PoolThresholds) -> dict:
    predicate = pool_predicate(pool, thresholds)
    with store.staging() as folder:
        staged = folder / "part-00000.parquet"
        rows.filter(predicate).sink_parquet(staged, compression="zstd")
        counts = (pl.scan_parquet(staged).group_by("dataset").agg(pl.len().alias("rows"))
                  .sort("dataset").collect())
        manifest = {"pool": pool, "thresholds": thresholds.__dict__,
                    "rows_by_dataset": dict(zip(counts["dataset"], counts["rows"])),
                    "rows": int(counts["rows"].sum())}
        store.commit(staged, f"{pool_dir(blend, pool)}/part-00000.parquet")
        store.write_bytes(f"{pool_dir(blend, pool)}/manifest.json",
                          json.dumps(manifest, indent=1, sort_keys=True).encode())
    context.log.info(f"pool {pool}: {manifest['rows']:,} rows")
    return {"rows": dg.MetadataValue.int(manifest["rows"]),
            "rows_by_dataset": dg.MetadataValue.json(manifest["rows_by_dataset"]),
            "path": dg.MetadataValue.path(store.url(pool_dir(blend, pool)))}


def write_views(store: Storage, blend: str, pool: str) -> dict:
    source = store.url(f"{pool_dir(blend, pool)}/part-00000.parquet")
    metadata = {}
    rows = 0
    for view in VIEWS:
        with store.staging() as folder:
            staged = folder / "part-00000.parquet"
            rows = write_view(source, view, staged, store.polars_options())
            store.commit(staged, f"{embedding_dir(blend, view, pool)}/part-00000.parquet")
        metadata[view] = dg.MetadataValue.path(store.url(embedding_dir(blend, view, pool)))
    return {"rows": dg.MetadataValue.int(rows), **metadata}


# --- the checks (re-read what was committed) ------------------------------------------------------------------
def check_shard_rows(store: Storage, blend: str, partition: str) -> CheckOutcome:
    relative = harmony_shard_path(blend, ShardKey.parse(partition))
    stats = json.loads(store.read_bytes(relative[: -len(".parquet")] + ".json"))["stats"]
    stored = pl.scan_parquet(store.url(relative), storage_options=store.polars_options()).select(
        pl.len()).collect().item()
    expected = stats["rows"] - sum(stats["dropped"].values())
    return CheckOutcome(ROWS_MATCH_SOURCE, stored == expected, {"rows_stored": stored, "rows_expected": expected})


def check_ids_unique(store: Storage, blend: str, dataset: str) -> CheckOutcome:
    repeated = _deduplicated(store, blend, dataset).group_by("id").agg(pl.len().alias("n")).filter(
        pl.col("n") > 1).collect()
    return CheckOutcome(IDS_UNIQUE, not len(repeated), {"ids_still_repeated": len(repeated)})


def check_pool_predicate(store: Storage, blend: str, pool: str) -> CheckOutcome:
    manifest = json.loads(store.read_bytes(f"{pool_dir(blend, pool)}/manifest.json"))
    predicate = pool_predicate(pool, PoolThresholds(**manifest["thresholds"]))
    outside = (pl.scan_parquet(store.url(f"{pool_dir(blend, pool)}/part-00000.parquet"),
                               storage_options=store.polars_options())
               .filter(~predicate).select(pl.len()).collect().item())
    return CheckOutcome(ROWS_SATISFY_PREDICATE, outside == 0, {"rows_outside_predicate": outside})


def _existing_shards(store: Storage, blend: str, manifest: SourceManifest) -> list[str]:
    """The dataset's planned shard files, in order; all must exist (a missing one would hide duplicates)."""
    paths = [harmony_shard_path(blend, ShardKey(manifest.dataset, s.index)) for s in manifest.shards]
    missing = [p for p in paths if not store.exists(p)]
    if missing:
        raise dg.Failure(f"{len(missing)} Harmony shard(s) of {manifest.dataset!r} are not built: "
                         f"{', '.join(missing[:5])}", allow_retries=False)
    return paths


def _deduplicated(store: Storage, blend: str, dataset: str) -> pl.LazyFrame:
    """A dataset's rows with ``quality_is_duplicate`` set from its dedup result (lazy)."""
    options = store.polars_options()
    manifest = read_manifest(store, blend, dataset)
    frames = [pl.scan_parquet(store.url(path), storage_options=options).with_row_index("_row")
              .with_columns(pl.lit(index, dtype=pl.Int64).alias("_shard"))
              for index, path in enumerate(_existing_shards(store, blend, manifest))]
    duplicates = (pl.scan_parquet(store.url(duplicates_path(blend, dataset)), storage_options=options)
                  .select(pl.col("shard").alias("_shard"), pl.col("row").alias("_row"),
                          pl.lit(True).alias("_duplicate")))
    joined = pl.concat(frames, how="vertical").with_columns(pl.col("_row").cast(pl.Int64)).join(
        duplicates, on=["_shard", "_row"], how="left", maintain_order="left")
    return joined.with_columns(quality_is_duplicate=pl.col("_duplicate").fill_null(False)).filter(
        ~pl.col("quality_is_duplicate")).drop("_row", "_shard", "_duplicate")


def write_view(pool_file: str, view: str, out, storage_options: dict | None) -> int:
    """The view's rows (id, embed_text, word_count, pass-through metadata) for one pool file; returns the count."""
    frame = pl.scan_parquet(pool_file, storage_options=storage_options).select("id", "text", *PASS_THROUGH).collect()
    texts = [embed_text(view, text) for text in frame["text"]]
    view_frame = frame.drop("text").with_columns(
        embed_text=pl.Series(texts, dtype=pl.String),
        word_count=pl.Series([word_count(t) for t in texts], dtype=pl.Int64),
    ).select("id", "embed_text", "word_count", *PASS_THROUGH)
    view_frame.write_parquet(out, compression="zstd")
    return len(view_frame)


def behavior_markdown(view_files: dict[str, str], store: Storage) -> str:
    """Per pool: rows, rows with tool calls, distinct behavior signatures, and the most common ones."""
    lines = ["| pool | rows | with tool calls | distinct signatures | uniqueness |", "|---|---:|---:|---:|---:|"]
    details = []
    for pool, path in view_files.items():
        frame = pl.read_parquet(path, storage_options=store.polars_options())
        rows = len(frame)
        with_calls = int((frame["meta_tool_call_count"] > 0).sum()) if rows else 0
        counts = (frame.group_by("embed_text").agg(pl.len().alias("n"))
                  .sort(["n", "embed_text"], descending=[True, False]))
        distinct = len(counts)
        uniqueness = f"{distinct / rows:.2f}" if rows else "-"
        lines.append(f"| {pool} | {rows:,} | {with_calls:,} | {distinct:,} | {uniqueness} |")
        if rows:
            details.append(f"\n**{pool}**: most common behaviors\n")
            details += [f"- {n} × `{text}`" for text, n in counts.head(5).iter_rows()]
    return "\n".join(["**Behavior signatures per pool**", "", *lines, *details])


def normalized_rows(store: Storage, blend: Blend) -> pl.LazyFrame:
    """Every family dataset's normalized rows, duplicates removed, as one lazy frame in blend order."""
    return pl.concat([_deduplicated(store, blend.name, e.name) for e in blend.entries() if e.family],
                     how="vertical")
