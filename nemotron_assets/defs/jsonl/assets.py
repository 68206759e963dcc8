"""The JSONL path of one blend, for its datasets that name a ``transform`` (JSONL for RL and SFT trainers):

    source_split (defs/sources/)
        -> jsonl_shard (one partition per dataset shard): whole rows -> transform -> holdout split -> JSONL files
        -> jsonl_manifest: the files per split, for NeMo-RL

A ``jsonl_shard`` run takes any range of shards and builds them at the same time in processes forked from its step
(core/step.py ``ShardRun``). The same factory builds the sample twins (core/partitions.py).
"""

import dagster as dg

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
from nemotron_assets.defs.harmony.assets import RebuildConfig, ShardRunConfig
from nemotron_assets.defs.jsonl.files import shard_problems
from nemotron_assets.defs.jsonl.layout import jsonl_dir, jsonl_manifest_path, jsonl_shard_prefix
from nemotron_assets.defs.jsonl.lineage import log_jsonl_manifest, log_jsonl_shards
from nemotron_assets.defs.jsonl.shard import JsonlDataset, jsonl_datasets, materialize_jsonl_manifest, shard_build
from nemotron_assets.formats.splits import SPLITS
from nemotron_assets.sources.manifest import SourceManifest

FILES_MATCH_RECEIPT = "files_match_receipt"


def build_jsonl_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """The JSONL assets of one blend's full build (or of its samples)."""
    blend, scope = blend_scope.blend, blend_scope.scope
    datasets = jsonl_datasets(blend)
    shard_key = dg.AssetKey(scope.key("jsonl_shard"))

    @partitioned_asset(
        scope.key("jsonl_shard"), group=scope.group, partitions_def=scope.dynamic("jsonl_shards"), kinds={"json"},
        deps=[dg.AssetDep(upstream["source_split"], partition_mapping=dg.AllPartitionMapping())],
        checks={FILES_MATCH_RECEIPT: "every file decompresses, each line is a JSON object, lines per split and "
                                     "rows read = written + dropped are as the receipt says"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Applies the dataset's transform to one shard's rows and writes them as JSONL (optionally zstd), "
                    "one file per train/valid/test split of the holdout.",
    )
    @retry_transient_errors
    def jsonl_shard(context: dg.AssetExecutionContext, config: ShardRunConfig, storage: StorageResource,
                    lineage: WandbLineage):
        store = storage.get()
        manifests: dict[str, SourceManifest] = {}
        built: list[tuple[str, dict]] = []

        def build(partition: str) -> dict:
            outcome = run.outcome(partition)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {sum(stats['rows'].values()):,} of "
                             f"{stats['rows_in']:,} row(s) written {stats['rows']}")
            sample, _ = scope.split(partition)
            key = ShardKey.parse(outcome.key)
            metadata = shard_metadata(outcome, store.url(f"{jsonl_dir(scope.base(sample))}/{key.dataset}"))
            built.append((outcome.key, metadata))
            return metadata

        try:
            with ShardRun(store, context.log.info, force=config.force, processes=config.build_processes) as run:
                if shard_key in context.selected_asset_keys:
                    run.plan(shard_builds(store, blend.name, datasets, scope, context.partition_keys, manifests))
                yield from materialize_partitions(context, shard_key, context.partition_keys, build,
                                                  check=lambda partition: [check_files(store, scope, partition)])
        finally:
            if not scope.samples and built:
                log_jsonl_shards(lineage, context, store, blend.name, built, manifests)

    @dg.asset(
        key=scope.key("jsonl_manifest"), group_name=scope.group, partitions_def=scope.partitions("blend", None),
        deps=[jsonl_shard], kinds={"json"},
        description="jsonl/manifest.json: per split (train, valid, test) the JSONL files of every transform dataset, "
                    "for NeMo-RL; refuses shards that are not up to date.",
    )
    @retry_transient_errors
    def jsonl_manifest(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        base = scope.base(scope.sample_of(context))
        with permanent_errors_fail_at_once():
            outcome, manifest = materialize_jsonl_manifest(store, blend.name, datasets, base, config.force,
                                                           context.log.info)
        metadata = manifest_metadata(outcome, manifest, store.url(jsonl_manifest_path(base)))
        if not scope.samples:
            manifests = {name: require_manifest(store, blend.name, base, name) for name in datasets}
            log_jsonl_manifest(lineage, context, store, blend.name, metadata, manifests)
        return dg.MaterializeResult(metadata=metadata)

    return {"jsonl_shard": jsonl_shard, "jsonl_manifest": jsonl_manifest}


# --- the step ---------------------------------------------------------------------------------------------------
def shard_builds(store: Storage, blend: str, datasets: dict[str, JsonlDataset], scope, partitions: list[str],
                 manifests: dict[str, SourceManifest]) -> dict[str, ShardBuild | Exception]:
    """Each partition's shard in its dataset's current plan (`core.step.planned_shard_builds`)."""
    return planned_shard_builds(store, blend, scope, partitions, manifests,
                                lambda manifest, key, base: shard_build(datasets[key.dataset], manifest, key, base))


def check_files(store: Storage, scope, partition: str) -> CheckOutcome:
    sample, shard = scope.split(partition)
    prefix = jsonl_shard_prefix(scope.base(sample), ShardKey.parse(shard))
    receipt = read_receipt(store, prefix)
    if receipt is None:
        return CheckOutcome(FILES_MATCH_RECEIPT, False,
                            {"problem": f"{store.url(receipt_path(prefix))} is not readable"})
    problems = shard_problems(store, prefix, receipt)
    return CheckOutcome(FILES_MATCH_RECEIPT, not problems,
                        {"files": len(receipt.files),
                         "problem": "; ".join(f"{store.url(path)}: {why}" for path, why in problems.items()) or "none"})


# --- metadata -----------------------------------------------------------------------------------------------
def shard_metadata(outcome: Outcome, folder_url: str) -> dict:
    stats = outcome.receipt.stats
    files = {split: {"path": f"{folder_url}/{recorded['path']}", "lines": stats["rows"].get(split, 0),
                     "bytes": recorded["bytes"], "sha256": recorded["sha256"]}
             for split, recorded in stats["files"].items()}
    return {
        **outcome_metadata(outcome),
        "folder": dg.MetadataValue.path(folder_url),
        "transform": dg.MetadataValue.text(stats["transform"]),
        "compression": dg.MetadataValue.text(stats["compression"] or "none"),
        "rows_in": dg.MetadataValue.int(stats["rows_in"]),
        "written": dg.MetadataValue.int(sum(stats["rows"].values())),
        "rows_by_split": dg.MetadataValue.json({split: stats["rows"].get(split, 0) for split in SPLITS}),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "dropped_examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in stats["dropped_examples"]) or "none"),
        "bytes": dg.MetadataValue.int(sum(f["bytes"] for f in stats["files"].values())),
        "files": dg.MetadataValue.json(files),
    }


def manifest_metadata(outcome: Outcome, manifest: dict, url: str) -> dict:
    return {
        "status": dg.MetadataValue.text(outcome.status),
        "manifest": dg.MetadataValue.path(url),
        "files_by_split": dg.MetadataValue.json({split: len(manifest[split]) for split in SPLITS}),
        "rows_by_split": dg.MetadataValue.json(manifest["rows"]),
        "datasets": dg.MetadataValue.json(manifest["datasets"]),
    }
