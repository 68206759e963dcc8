"""The Harmony curation path of one blend, for its datasets that name a ``family``:

    source_split (defs/sources/)
        -> harmony_shard (one partition per dataset shard): raw rows -> normalized Harmony Parquet
        -> harmony_dedup (one partition per dataset): which rows repeat an earlier row's text
        -> candidate_pool (one partition per pool): rows of every dataset that pass the pool's predicate
        -> embedding_view (one partition per pool): one text per row to embed, per view -> behavior_report

A ``harmony_shard`` run takes any range of shards and builds them at the same time in processes forked from its step
(core/step.py ``ShardRun``). The same factory builds the sample twins (core/partitions.py). Pools read every
normalized shard lazily with polars (projection and predicate pushdown, streaming sink).
"""

import contextlib
import functools

import dagster as dg
import polars as pl
from pydantic import Field

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.records import read_receipt, receipt_path, require_manifest
from nemotron_assets.core.reporting import (
    CheckOutcome,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
    retry_transient_errors,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.step import Outcome, ShardBuild, ShardRun, planned_shard_builds
from nemotron_assets.core.storage import Storage
from nemotron_assets.core.workers import build_processes
from nemotron_assets.defs.harmony.dedup import repeated_ids
from nemotron_assets.defs.harmony.downstream import (
    Curation,
    materialize_dedup,
    materialize_pools,
    materialize_report,
    pool_inputs_once,
    views_build,
)
from nemotron_assets.defs.harmony.layout import (
    behavior_report_path,
    duplicates_path,
    embedding_view_path,
    harmony_shard_path,
    harmony_shard_prefix,
    pool_dir,
)
from nemotron_assets.defs.harmony.lineage import log_harmony_shards, log_pools
from nemotron_assets.defs.harmony.pools import PoolThresholds, register_pool_parts, rows_outside_predicate
from nemotron_assets.defs.harmony.row_texts import RowTexts
from nemotron_assets.defs.harmony.shard import shard_build
from nemotron_assets.defs.harmony.views import VIEWS
from nemotron_assets.sources.manifest import SourceManifest

ROWS_MATCH_SOURCE = "rows_match_source_minus_drops"
IDS_UNIQUE = "ids_unique_after_dedup"
ROWS_SATISFY_PREDICATE = "rows_satisfy_predicate"
DEFAULT_POOLS = PoolThresholds()


class RebuildConfig(dg.Config):
    force: bool = Field(False, description="Rebuild outputs even when their receipt says they are up to date.")


class ShardRunConfig(RebuildConfig):
    build_processes: int = Field(0, description="Shards of this run built at the same time, each in a process forked "
                                                "from the step: 0 = one per core (at most 8), or one after the other, "
                                                "each on every core, when every shard spreads its own work over the "
                                                "cores (a Harmony shard of 16 MB or more); 1 = one after the other "
                                                "in the step.")


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


def build_harmony_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """The Harmony curation assets of one blend's full build (or of its samples)."""
    blend, scope = blend_scope.blend, blend_scope.scope
    curation = Curation.of(blend)
    scored = tuple(blend.scoring.pools) if blend.scoring is not None else ()
    family_partitions = scope.partitions("family_datasets", dg.StaticPartitionsDefinition(list(curation.datasets)))
    pool_partitions = scope.partitions("pools", dg.StaticPartitionsDefinition(list(curation.pools)))
    shard_key = dg.AssetKey(scope.key("harmony_shard"))

    @partitioned_asset(
        scope.key("harmony_shard"), group=scope.group, partitions_def=scope.dynamic("harmony_shards"),
        kinds={"parquet"}, deps=[dg.AssetDep(upstream["source_split"], partition_mapping=dg.AllPartitionMapping())],
        checks={ROWS_MATCH_SOURCE: "rows in the Parquet = source rows read - counted drops"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Normalizes one shard of a post-training dataset into Harmony text + metadata (Parquet, zstd).",
    )
    @retry_transient_errors
    def harmony_shard(context: dg.AssetExecutionContext, config: ShardRunConfig, storage: StorageResource,
                      lineage: WandbLineage):
        store = storage.get()
        manifests: dict[str, SourceManifest] = {}
        built: list[tuple[str, dict]] = []

        def build(partition: str) -> dict:
            outcome = run.outcome(partition)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['records']:,} rows ({stats['valid_harmony']:,} "
                             "valid Harmony)")
            sample, _ = scope.split(partition)
            metadata = shard_metadata(outcome, store.url(harmony_shard_path(scope.base(sample),
                                                                            ShardKey.parse(outcome.key))))
            built.append((outcome.key, metadata))
            return metadata

        try:
            with ShardRun(store, context.log.info, force=config.force, processes=config.build_processes) as run:
                if shard_key in context.selected_asset_keys:
                    run.plan(shard_builds(store, curation, scope, context.partition_keys, manifests))
                yield from materialize_partitions(context, shard_key, context.partition_keys, build,
                                                  check=lambda partition: [check_shard_rows(store, scope, partition)])
        finally:
            if not scope.samples and built:
                log_harmony_shards(lineage, context, store, blend.name, built, manifests)

    @partitioned_asset(
        scope.key("harmony_dedup"), group=scope.group,
        partitions_def=family_partitions, kinds={"parquet"}, backfill_policy=dg.BackfillPolicy.single_run(),
        deps=[dg.AssetDep(harmony_shard, partition_mapping=dg.AllPartitionMapping())],
        checks={IDS_UNIQUE: "after removing the duplicates, every id occurs once"},
        description="Exact dedup by SHA1 of the Harmony text across all shards of a dataset; the first occurrence "
                    "in (file, row) order wins.",
    )
    @retry_transient_errors
    def harmony_dedup(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()

        def build(partition: str) -> dict:
            sample, dataset = scope.split(partition)
            outcome = materialize_dedup(store, curation, scope.base(sample), dataset, config.force, context.log.info)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['duplicates']:,} duplicate(s) of "
                             f"{stats['rows']:,} rows")
            return {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
                    "duplicates": dg.MetadataValue.int(stats["duplicates"]),
                    "unique": dg.MetadataValue.int(stats["rows"] - stats["duplicates"]),
                    "mode": dg.MetadataValue.text(curation.dedup),
                    "path": dg.MetadataValue.path(store.url(duplicates_path(scope.base(sample), dataset)))}

        def check(partition: str) -> list[CheckOutcome]:
            sample, dataset = scope.split(partition)
            repeated = repeated_ids(store, curation.datasets[dataset], scope.base(sample))
            return [CheckOutcome(IDS_UNIQUE, repeated == 0, {"ids_still_repeated": repeated})]

        yield from materialize_partitions(context, dg.AssetKey(scope.key("harmony_dedup")), context.partition_keys,
                                          build, check)

    @partitioned_asset(
        scope.key("candidate_pool"), group=scope.group,
        partitions_def=pool_partitions, kinds={"parquet", "polars"},
        deps=[dg.AssetDep(harmony_dedup, partition_mapping=dg.AllPartitionMapping())],
        checks={ROWS_SATISFY_PREDICATE: "every row of the pool satisfies the pool's predicate"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Rows of every normalized, deduplicated dataset that satisfy the pool's predicate.",
    )
    @retry_transient_errors
    def candidate_pool(context: dg.AssetExecutionContext, config: PoolConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        built: list[tuple[str, dict]] = []
        pools_of: dict[str | None, list[str]] = {}  # the run's pools, by sample (None: the full build)
        for partition in context.partition_keys:
            sample, pool = scope.split(partition)
            pools_of.setdefault(sample, []).append(pool)
        outcomes: dict[str | None, dict[str, Outcome] | Exception] = {}  # by sample, once its pools are built

        def build(partition: str) -> dict:
            sample, pool = scope.split(partition)
            base = scope.base(sample)
            if sample not in outcomes:  # the run's pools of this sample are built together, in one pass
                try:
                    outcomes[sample] = materialize_pools(store, curation, base, pools_of[sample], config.thresholds(),
                                                         config.force, context.log.info,
                                                         pool_inputs_once(store, curation, base))
                except Exception as exc:  # noqa: BLE001 - each of these pools fails with it
                    outcomes[sample] = exc
            if isinstance(outcomes[sample], Exception):
                raise outcomes[sample]
            outcome = outcomes[sample][pool]
            register_pool_parts(context.instance, store, scored, scope, sample, pool)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['rows']:,} rows")
            metadata = {"status": dg.MetadataValue.text(outcome.status), "rows": dg.MetadataValue.int(stats["rows"]),
                        "rows_by_dataset": dg.MetadataValue.json(stats["rows_by_dataset"]),
                        "path": dg.MetadataValue.path(store.url(pool_dir(base, pool)))}
            built.append((partition, metadata))
            return metadata

        def check(partition: str) -> list[CheckOutcome]:
            sample, pool = scope.split(partition)
            outside = rows_outside_predicate(store, scope.base(sample), pool)
            return [CheckOutcome(ROWS_SATISFY_PREDICATE, outside == 0, {"rows_outside_predicate": outside})]

        try:
            yield from materialize_partitions(context, dg.AssetKey(scope.key("candidate_pool")),
                                              context.partition_keys, build, check)
        finally:
            if not scope.samples and built:
                manifests = {name: require_manifest(store, blend.name, blend.name, name) for name in curation.datasets}
                log_pools(lineage, context, store, blend.name, built, manifests)

    @partitioned_asset(
        scope.key("embedding_view"), group=scope.group,
        partitions_def=pool_partitions, kinds={"parquet"},
        deps=[candidate_pool], backfill_policy=dg.BackfillPolicy.single_run(),
        description="Per pool, one text per row to embed in each view: the prompt, a reasoning excerpt, and the "
                    "value-free behavior.",
    )
    @retry_transient_errors
    def embedding_view(context: dg.AssetExecutionContext, config: ShardRunConfig, storage: StorageResource):
        store = storage.get()
        inputs_of = {}  # base -> what the pools read there, judged once in this run
        row_texts: dict[str, RowTexts | None] = {}  # base -> the texts of the distinct rows of the pools viewed there
        texts_folders = contextlib.ExitStack()

        def texts_of(base: str) -> RowTexts | None:
            """Computed once, for every pool this run views in ``base`` (before the builds fork, or at the first)."""
            if base not in row_texts:
                pools = [pool for sample, pool in map(scope.split, run.building()) if scope.base(sample) == base]
                row_texts[base] = RowTexts.compute(store, base, pools, texts_folders.enter_context(store.staging()),
                                                   build_processes(config.build_processes), context.log.info)
            return row_texts[base]

        builds: dict[str, ShardBuild | Exception] = {}
        for partition in context.partition_keys:
            sample, pool = scope.split(partition)
            base = scope.base(sample)
            try:
                inputs_of.setdefault(base, pool_inputs_once(store, curation, base))
                builds[partition] = views_build(store, curation, base, pool, inputs_of[base],
                                                functools.partial(texts_of, base))
            except Exception as exc:  # noqa: BLE001 - reported as this partition's failure
                builds[partition] = exc

        def build(partition: str) -> dict:
            outcome = run.outcome(partition)  # the first view's; the pool's views are built and committed together
            sample, pool = scope.split(partition)
            return {"status": dg.MetadataValue.text(outcome.status),
                    "rows": dg.MetadataValue.int(outcome.receipt.stats["rows"]),
                    **{f"{view}_view": dg.MetadataValue.path(store.url(embedding_view_path(scope.base(sample), view,
                                                                                           pool))) for view in VIEWS}}

        def prepare() -> None:  # before the builds fork: they share the texts
            for base in {scope.base(scope.split(partition)[0]) for partition in run.building()}:
                texts_of(base)

        with texts_folders, ShardRun(store, context.log.info, force=config.force, processes=config.build_processes,
                                     prepare=prepare, what="pools' views") as run:
            run.plan(builds)
            yield from materialize_partitions(context, dg.AssetKey(scope.key("embedding_view")),
                                              context.partition_keys, build)

    @dg.asset(
        key=scope.key("behavior_report"), group_name=scope.group, partitions_def=scope.partitions("blend", None),
        deps=[embedding_view], kinds={"markdown"},
        description="Tool-call coverage and uniqueness of every pool's behavior view: a collapsed view shows "
                    "as few distinct signatures.",
    )
    @retry_transient_errors
    def behavior_report(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store, base = storage.get(), scope.base(scope.sample_of(context))
        with permanent_errors_fail_at_once():
            outcome, report = materialize_report(store, curation, base, config.force, context.log.info)
        return dg.MaterializeResult(metadata={"status": dg.MetadataValue.text(outcome.status),
                                              "report": dg.MetadataValue.md(report),
                                              "path": dg.MetadataValue.path(store.url(behavior_report_path(base)))})

    built = {"harmony_shard": harmony_shard, "harmony_dedup": harmony_dedup}
    if curation.pools:  # the pools the blend asks for, and their views
        built |= {"candidate_pool": candidate_pool, "embedding_view": embedding_view}
    if curation.report:
        built["behavior_report"] = behavior_report
    return built


# --- the steps ------------------------------------------------------------------------------------------------
def shard_builds(store: Storage, curation: Curation, scope, partitions: list[str],
                 manifests: dict[str, SourceManifest]) -> dict[str, ShardBuild | Exception]:
    """Each partition's shard in its dataset's current plan (`core.step.planned_shard_builds`)."""
    return planned_shard_builds(store, curation.blend, scope, partitions, manifests,
                                lambda manifest, key, base: shard_build(curation.datasets[key.dataset], manifest, key,
                                                                        base))


# --- the checks (re-read what was committed) ------------------------------------------------------------------
def check_shard_rows(store: Storage, scope, partition: str) -> CheckOutcome:
    sample, shard = scope.split(partition)
    prefix = harmony_shard_prefix(scope.base(sample), ShardKey.parse(shard))
    receipt = read_receipt(store, prefix)
    if receipt is None:
        return CheckOutcome(ROWS_MATCH_SOURCE, False, {"problem": f"{store.url(receipt_path(prefix))} is not readable"})
    stored = pl.scan_parquet(store.url(f"{prefix}.parquet"), storage_options=store.polars_options()).select(
        pl.len()).collect().item()
    expected = receipt.stats["rows"] - sum(receipt.stats["dropped"].values())
    return CheckOutcome(ROWS_MATCH_SOURCE, stored == expected, {"rows_stored": stored, "rows_expected": expected})


# --- metadata -----------------------------------------------------------------------------------------------
def shard_metadata(outcome: Outcome, url: str) -> dict:
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
