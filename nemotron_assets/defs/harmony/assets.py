"""The post-training path of one blend, for datasets that name a ``family``:

    source_split (shared with pretraining)
        -> harmony_shard (one partition per dataset shard): raw rows -> normalized Harmony Parquet
        -> harmony_dedup (one partition per dataset): which rows repeat an earlier row's text
        -> candidate_pool (one partition per pool): rows of every dataset that pass the pool's predicate
        -> embedding_view (one partition per pool): one text per row to embed, per view -> behavior_report

The same factory builds the sample twins (partitions.py ``Scope``). Each asset resolves its inputs, calls one pure
step (``posttrain/``), which commits files atomically, and reports per partition (reporting.py). Pools read every
normalized shard lazily with polars (projection and predicate pushdown, streaming sink).
"""

from dataclasses import dataclass

import dagster as dg
import polars as pl
from pydantic import Field

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, harmony_shard_path, harmony_shard_prefix, pool_dir
from nemotron_assets.core.lineage import HARMONY_SHARDS, WandbLineage
from nemotron_assets.core.partitions import SHARDS_PER_RUN, Scope, harmony_partitions_name
from nemotron_assets.core.records import SourceManifest, read_receipt, require_manifest
from nemotron_assets.core.reporting import (
    TRANSIENT_RETRIES,
    CheckOutcome,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.dedup import repeated_ids
from nemotron_assets.defs.harmony.downstream import (
    materialize_dedup,
    materialize_pool,
    materialize_report,
    materialize_views,
)
from nemotron_assets.defs.harmony.harmony_step import HarmonyOutcome, materialize_harmony_shard
from nemotron_assets.defs.harmony.pools import POOL_NAMES, PoolThresholds, rows_outside_predicate
from nemotron_assets.defs.scoring.parts import register_pool_parts

ROWS_MATCH_SOURCE = "rows_match_source_minus_drops"
IDS_UNIQUE = "ids_unique_after_dedup"
ROWS_SATISFY_PREDICATE = "rows_satisfy_predicate"
DEFAULT_POOLS = PoolThresholds()
# What is built from the shards rebuilds itself once its inputs changed, when the blend's automation sensor runs
# (``<blend>__post_training_automation``, stopped by default): each step then finds what is still up to date.
REBUILD_WHEN_INPUTS_CHANGE = dg.AutomationCondition.eager()


class RebuildConfig(dg.Config):
    force: bool = Field(False, description="Rebuild outputs even when their receipt says they are up to date.")


class PoolConfig(RebuildConfig):
    high_correctness: float = Field(DEFAULT_POOLS.high_correctness, description="correctness >= this is high")
    low_correctness: float = Field(DEFAULT_POOLS.low_correctness, description="correctness <= this is low")
    long_context_tokens: int = Field(DEFAULT_POOLS.long_context_tokens,
                                     description="approx. tokens >= this is long context")
    include_placeholder_prompts: bool = Field(DEFAULT_POOLS.include_placeholder_prompts,
                                              description="let rows whose user prompt is a placeholder (empty, "
                                                          "whitespace, '-') into the pools")

    def thresholds(self) -> PoolThresholds:
        return PoolThresholds(self.high_correctness, self.low_correctness, self.long_context_tokens,
                              self.include_placeholder_prompts)


@dataclass(frozen=True)
class HarmonyAssets:
    harmony_shard: dg.AssetsDefinition
    harmony_dedup: dg.AssetsDefinition
    candidate_pool: dg.AssetsDefinition
    embedding_view: dg.AssetsDefinition
    behavior_report: dg.AssetsDefinition
    family_partitions: dg.PartitionsDefinition
    shard_partitions: dg.DynamicPartitionsDefinition
    pool_partitions: dg.PartitionsDefinition

    @property
    def definitions(self) -> list:
        return [self.harmony_shard, self.harmony_dedup, self.candidate_pool, self.embedding_view,
                self.behavior_report]

    @property
    def rebuilt_when_inputs_change(self) -> list[dg.AssetsDefinition]:
        return [self.harmony_dedup, self.candidate_pool, self.embedding_view, self.behavior_report]


def build_harmony_assets(blend: Blend, source_split: dg.AssetsDefinition, scope: Scope | None = None) -> HarmonyAssets:
    """Assets of the blend's family datasets; ``source_split`` is the same scope's (full build or samples)."""
    scope = scope or Scope(blend.name)
    families = [e.name for e in blend.entries() if e.family]
    family_partitions = scope.partitions("family_datasets", dg.StaticPartitionsDefinition(families))
    shard_partitions = scope.partitions("harmony_shards",
                                        dg.DynamicPartitionsDefinition(name=harmony_partitions_name(blend.name)))
    pool_partitions = scope.partitions("pools", dg.StaticPartitionsDefinition(list(POOL_NAMES)))
    report_partitions = scope.partitions("blend", None)
    automation = None if scope.samples else REBUILD_WHEN_INPUTS_CHANGE

    @partitioned_asset(
        scope.key("harmony_shard"), group=scope.group, partitions_def=shard_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(source_split, partition_mapping=dg.AllPartitionMapping())],
        checks={ROWS_MATCH_SOURCE: "rows in the Parquet = source rows read - counted drops"},
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        retry_policy=TRANSIENT_RETRIES,
        description="Normalizes one shard of a post-training dataset into Harmony text + metadata (Parquet, zstd).",
    )
    def harmony_shard(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                      lineage: WandbLineage):
        store = storage.get()
        manifests: dict[str, SourceManifest] = {}
        built: list[tuple[str, dict]] = []

        def build(partition: str) -> dict:
            metadata = normalize_shard(context, store, blend, scope, manifests, partition, config.force)
            built.append((partition, metadata))
            return metadata

        try:
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("harmony_shard")), context.partition_keys, build,
                check=lambda partition: [check_shard_rows(store, scope, partition)])
        finally:
            if not scope.samples and built:
                lineage.log_shards(context, store, blend.name, built, manifests, HARMONY_SHARDS)

    @partitioned_asset(
        scope.key("harmony_dedup"), group=scope.group, automation_condition=automation,
        partitions_def=family_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(harmony_shard, partition_mapping=dg.AllPartitionMapping())],
        checks={IDS_UNIQUE: "after removing the duplicates, every id occurs once"}, retry_policy=TRANSIENT_RETRIES,
        description="Exact dedup by SHA1 of the Harmony text across all shards of a dataset; the first occurrence "
                    "in (file, row) order wins.",
    )
    def harmony_dedup(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        yield from materialize_partitions(
            context, dg.AssetKey(scope.key("harmony_dedup")), context.partition_keys,
            build=lambda partition: find_dataset_duplicates(context, store, blend, scope, partition, config.force),
            check=lambda partition: [check_ids_unique(store, blend, scope, partition)])

    @partitioned_asset(
        scope.key("candidate_pool"), group=scope.group, automation_condition=automation,
        partitions_def=pool_partitions, kinds={"parquet", "polars"},
        deps=[dg.AssetDep(harmony_dedup, partition_mapping=dg.AllPartitionMapping())],
        checks={ROWS_SATISFY_PREDICATE: "every row of the pool satisfies the pool's predicate"},
        backfill_policy=dg.BackfillPolicy.single_run(), retry_policy=TRANSIENT_RETRIES,
        description="Rows of every normalized, deduplicated dataset that satisfy the pool's predicate.",
    )
    def candidate_pool(context: dg.AssetExecutionContext, config: PoolConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        built: list[tuple[str, dict]] = []

        def build(partition: str) -> dict:
            metadata = select_pool(context, store, blend, scope, partition, config.thresholds(), config.force)
            built.append((partition, metadata))
            return metadata

        try:
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("candidate_pool")), context.partition_keys, build,
                check=lambda partition: [check_pool_predicate(store, scope, partition)])
        finally:
            if not scope.samples and built:
                manifests = {e.name: require_manifest(store, blend.name, blend.name, e.name)
                             for e in blend.entries() if e.family}
                lineage.log_pools(context, store, blend.name, built, manifests)

    @partitioned_asset(
        scope.key("embedding_view"), group=scope.group, automation_condition=automation,
        partitions_def=pool_partitions, kinds={"parquet"},
        deps=[candidate_pool], backfill_policy=dg.BackfillPolicy.single_run(), retry_policy=TRANSIENT_RETRIES,
        description="Per pool, one text per row to embed in each view: the prompt, a reasoning excerpt, and the "
                    "value-free behavior.",
    )
    def embedding_view(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        yield from materialize_partitions(
            context, dg.AssetKey(scope.key("embedding_view")), context.partition_keys,
            build=lambda partition: view_pool(store, blend, scope, partition, config.force))

    @dg.asset(
        key=scope.key("behavior_report"), group_name=scope.group, partitions_def=report_partitions,
        automation_condition=automation,
        deps=[embedding_view], kinds={"markdown"}, retry_policy=TRANSIENT_RETRIES,
        description="Tool-call coverage and uniqueness of every pool's behavior view: a collapsed view shows "
                    "as few distinct signatures.",
    )
    def behavior_report(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        sample, _ = scope.split(context.partition_keys[0]) if scope.samples else (None, None)
        with permanent_errors_fail_at_once():
            outcome, report = materialize_report(storage.get(), blend, scope.base(sample), config.force)
        return dg.MaterializeResult(metadata={"status": dg.MetadataValue.text(outcome.status),
                                              "report": dg.MetadataValue.md(report)})

    return HarmonyAssets(harmony_shard, harmony_dedup, candidate_pool, embedding_view, behavior_report,
                         family_partitions, shard_partitions, pool_partitions)


# --- the steps ------------------------------------------------------------------------------------------------
def normalize_shard(context: dg.AssetExecutionContext, store: Storage, blend: Blend, scope: Scope,
                    manifests: dict[str, SourceManifest], partition: str, force: bool) -> dict:
    sample, shard = scope.split(partition)
    key = ShardKey.parse(shard)
    base = scope.base(sample)
    if key.dataset not in manifests:
        manifests[key.dataset] = require_manifest(store, blend.name, base, key.dataset)
    outcome = materialize_harmony_shard(store, blend, manifests[key.dataset], key, force=force,
                                        log=context.log.info, base=base)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['records']:,} rows ({stats['valid_harmony']:,} "
                     "valid Harmony)")
    return shard_metadata(outcome, store.url(harmony_shard_path(base, key)))


def find_dataset_duplicates(context: dg.AssetExecutionContext, store: Storage, blend: Blend, scope: Scope,
                            partition: str, force: bool) -> dict:
    sample, dataset = scope.split(partition)
    outcome = materialize_dedup(store, blend, scope.base(sample), dataset, force)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['duplicates']:,} duplicate(s) of {stats['rows']:,} rows")
    return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
            "duplicates": dg.MetadataValue.int(stats["duplicates"]),
            "unique": dg.MetadataValue.int(stats["rows"] - stats["duplicates"]),
            "mode": dg.MetadataValue.text(blend.dedup)}


def select_pool(context: dg.AssetExecutionContext, store: Storage, blend: Blend, scope: Scope, partition: str,
                thresholds: PoolThresholds, force: bool) -> dict:
    sample, pool = scope.split(partition)
    base = scope.base(sample)
    outcome = materialize_pool(store, blend, base, pool, thresholds, force)
    register_pool_parts(context.instance, store, blend, scope, sample, pool)  # nll_scores' partitions, if scored
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['rows']:,} rows")
    return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
            "rows_by_dataset": dg.MetadataValue.json(stats["rows_by_dataset"]),
            "path": dg.MetadataValue.path(store.url(pool_dir(base, pool)))}


def view_pool(store: Storage, blend: Blend, scope: Scope, partition: str, force: bool) -> dict:
    sample, pool = scope.split(partition)
    outcomes = materialize_views(store, blend, scope.base(sample), pool, force)
    return {"status": dg.MetadataValue.text(outcomes[0].status),
            "rows": dg.MetadataValue.int(outcomes[0].receipt.stats["rows"])}


# --- the checks (re-read what was committed) ------------------------------------------------------------------
def check_shard_rows(store: Storage, scope: Scope, partition: str) -> CheckOutcome:
    sample, shard = scope.split(partition)
    prefix = harmony_shard_prefix(scope.base(sample), ShardKey.parse(shard))
    receipt = read_receipt(store, prefix)
    if receipt is None:
        return CheckOutcome(ROWS_MATCH_SOURCE, False, {"problem": f"{store.url(prefix + '.json')} is not readable"})
    stored = pl.scan_parquet(store.url(f"{prefix}.parquet"), storage_options=store.polars_options()).select(
        pl.len()).collect().item()
    expected = receipt.stats["rows"] - sum(receipt.stats["dropped"].values())
    return CheckOutcome(ROWS_MATCH_SOURCE, stored == expected, {"rows_stored": stored, "rows_expected": expected})


def check_ids_unique(store: Storage, blend: Blend, scope: Scope, partition: str) -> CheckOutcome:
    sample, dataset = scope.split(partition)
    repeated = repeated_ids(store, blend, scope.base(sample), dataset)
    return CheckOutcome(IDS_UNIQUE, repeated == 0, {"ids_still_repeated": repeated})


def check_pool_predicate(store: Storage, scope: Scope, partition: str) -> CheckOutcome:
    sample, pool = scope.split(partition)
    outside = rows_outside_predicate(store, scope.base(sample), pool)
    return CheckOutcome(ROWS_SATISFY_PREDICATE, outside == 0, {"rows_outside_predicate": outside})


# --- metadata -----------------------------------------------------------------------------------------------
def shard_metadata(outcome: HarmonyOutcome, url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "source_rows": dg.MetadataValue.int(stats["rows"]),
        "rows": dg.MetadataValue.int(stats["records"]),
        "valid_harmony": dg.MetadataValue.int(stats["valid_harmony"]),
        "placeholder_prompts": dg.MetadataValue.int(stats["placeholder_prompts"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "flags": dg.MetadataValue.json(stats["flags"]),
        "domains": dg.MetadataValue.json(stats["domains"]),
        "difficulty": dg.MetadataValue.json(stats["difficulty"]),
        "bytes": dg.MetadataValue.int(stats["bytes"]),
        "sha256": dg.MetadataValue.text(stats["sha256"]),
    }
