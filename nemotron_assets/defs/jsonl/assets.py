"""The JSONL path of one blend, for datasets that name a ``transform`` (JSONL for RL and SFT trainers):

    source_split (shared with the other paths)
        -> jsonl_shard (one partition per dataset shard): whole rows -> transform -> holdout split -> JSONL files
        -> jsonl_manifest: the files per split, for NeMo-RL

The same factory builds the sample twins (partitions.py ``Scope``). Each asset resolves its inputs and calls one pure
step (``posttrain/jsonl_step.py``), which commits the files and writes the receipt last, and reports per partition
(reporting.py).
"""

from dataclasses import dataclass

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, jsonl_dir, jsonl_manifest_path, jsonl_shard_prefix
from nemotron_assets.core.lineage import JSONL_SHARDS, WandbLineage
from nemotron_assets.core.partitions import SHARDS_PER_RUN, Scope, jsonl_partitions_name
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
from nemotron_assets.defs.harmony.assets import RebuildConfig
from nemotron_assets.defs.jsonl.files import shard_problems
from nemotron_assets.defs.jsonl.steps import JsonlOutcome, materialize_jsonl_manifest, materialize_jsonl_shard
from nemotron_assets.formats.splits import SPLITS

FILES_MATCH_RECEIPT = "files_match_receipt"


@dataclass(frozen=True)
class JsonlAssets:
    jsonl_shard: dg.AssetsDefinition
    jsonl_manifest: dg.AssetsDefinition
    shard_partitions: dg.DynamicPartitionsDefinition

    @property
    def definitions(self) -> list:
        return [self.jsonl_shard, self.jsonl_manifest]


def build_jsonl_assets(blend: Blend, source_split: dg.AssetsDefinition, scope: Scope | None = None) -> JsonlAssets:
    """Assets of the blend's transform datasets; ``source_split`` is the same scope's (full build or samples)."""
    scope = scope or Scope(blend.name)
    shard_partitions = scope.partitions("jsonl_shards",
                                        dg.DynamicPartitionsDefinition(name=jsonl_partitions_name(blend.name)))
    manifest_partitions = scope.partitions("blend", None)

    @partitioned_asset(
        scope.key("jsonl_shard"), group=scope.group, partitions_def=shard_partitions, kinds={"json"},
        deps=[dg.AssetDep(source_split, partition_mapping=dg.AllPartitionMapping())],
        checks={FILES_MATCH_RECEIPT: "every file decompresses, each line is a JSON object, lines per split and "
                                     "rows read = written + dropped are as the receipt says"},
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        retry_policy=TRANSIENT_RETRIES,
        description="Applies the dataset's transform to one shard's rows and writes them as JSONL (optionally zstd), "
                    "one file per train/valid/test split of the holdout.",
    )
    def jsonl_shard(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                    lineage: WandbLineage):
        store = storage.get()
        manifests: dict[str, SourceManifest] = {}
        built: list[tuple[str, dict]] = []

        def build(partition: str) -> dict:
            metadata = transform_shard(context, store, blend, scope, manifests, partition, config.force)
            built.append((partition, metadata))
            return metadata

        try:
            yield from materialize_partitions(
                context, dg.AssetKey(scope.key("jsonl_shard")), context.partition_keys, build,
                check=lambda partition: [check_files(store, scope, partition)])
        finally:
            if not scope.samples and built:
                lineage.log_shards(context, store, blend.name, built, manifests, JSONL_SHARDS)

    @dg.asset(
        key=scope.key("jsonl_manifest"), group_name=scope.group, partitions_def=manifest_partitions,
        deps=[jsonl_shard], kinds={"json"}, retry_policy=TRANSIENT_RETRIES,
        description="jsonl/manifest.json: per split (train, valid, test) the JSONL files of every transform dataset, "
                    "for NeMo-RL; refuses shards that are not up to date.",
    )
    def jsonl_manifest(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        sample, _ = scope.split(context.partition_keys[0]) if scope.samples else (None, None)
        base = scope.base(sample)
        with permanent_errors_fail_at_once():
            outcome, manifest = materialize_jsonl_manifest(store, blend, base, config.force)
        metadata = manifest_metadata(outcome, manifest, store.url(jsonl_manifest_path(base)))
        if not scope.samples:
            manifests = {e.name: require_manifest(store, blend.name, base, e.name) for e in blend.datasets_of("jsonl")}
            lineage.log_jsonl_manifest(context, store, blend.name, metadata, manifests)
        return dg.MaterializeResult(metadata=metadata)

    return JsonlAssets(jsonl_shard, jsonl_manifest, shard_partitions)


# --- the step ---------------------------------------------------------------------------------------------------
def transform_shard(context: dg.AssetExecutionContext, store: Storage, blend: Blend, scope: Scope,
                    manifests: dict[str, SourceManifest], partition: str, force: bool) -> dict:
    sample, shard = scope.split(partition)
    key = ShardKey.parse(shard)
    base = scope.base(sample)
    if key.dataset not in manifests:
        manifests[key.dataset] = require_manifest(store, blend.name, base, key.dataset)
    outcome = materialize_jsonl_shard(store, blend, manifests[key.dataset], key, force=force, log=context.log.info,
                                      base=base)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {sum(stats['rows'].values()):,} of {stats['rows_in']:,} "
                     f"row(s) written {stats['rows']}")
    return shard_metadata(outcome, store.url(f"{jsonl_dir(base)}/{key.dataset}"))


def check_files(store: Storage, scope: Scope, partition: str) -> CheckOutcome:
    sample, shard = scope.split(partition)
    prefix = jsonl_shard_prefix(scope.base(sample), ShardKey.parse(shard))
    receipt = read_receipt(store, prefix)
    if receipt is None:
        return CheckOutcome(FILES_MATCH_RECEIPT, False, {"problem": f"{store.url(prefix + '.json')} is not readable"})
    problems = shard_problems(store, prefix, receipt)
    return CheckOutcome(FILES_MATCH_RECEIPT, not problems,
                        {"files": len(receipt.files),
                         "problem": "; ".join(f"{store.url(path)}: {why}" for path, why in problems.items()) or "none"})


# --- metadata -----------------------------------------------------------------------------------------------
def shard_metadata(outcome: JsonlOutcome, folder_url: str) -> dict:
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


def manifest_metadata(outcome: JsonlOutcome, manifest: dict, url: str) -> dict:
    return {
        "status": dg.MetadataValue.text(outcome.status),
        "manifest": dg.MetadataValue.path(url),
        "files_by_split": dg.MetadataValue.json({split: len(manifest[split]) for split in SPLITS}),
        "rows_by_split": dg.MetadataValue.json(manifest["rows"]),
        "datasets": dg.MetadataValue.json(manifest["datasets"]),
    }
