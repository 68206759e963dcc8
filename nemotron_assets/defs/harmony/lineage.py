"""W&B lineage of the Harmony curation path (core/lineage.py says how lineage works): each harmony_shard run uses
the source manifests and logs ``<blend>-<dataset>-harmony`` (type harmony-shards: every finished Parquet shard +
receipt of the dataset), and each candidate_pool run uses the Harmony artifacts of every family dataset and logs
``<blend>-pool-<pool>`` (type candidate-pool: the pool's Parquet part, receipt and .meta/manifest.json).
"""

from dataclasses import dataclass

import dagster as dg

from nemotron_assets.core.lineage import ShardOutputs, WandbLineage, files_artifact, reference, shards_artifact
from nemotron_assets.core.records import receipt_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.layout import harmony_shard_prefix, pool_manifest_path, pool_path

HARMONY_SHARDS = ShardOutputs("harmony", "harmony-shards", harmony_shard_prefix, (".parquet",),
                              ("rows", "records", "valid_harmony", "placeholder_prompts", "bytes", "sha256"),
                              "records", "harmony_shard")


@dataclass(frozen=True)
class CandidatePoolInput:
    """A candidate pool used as an input: its artifact as the candidate_pool run logged it (`pool_artifact`)."""

    pool: str


def pool_artifact(store: Storage, blend: str, pool: str, metadata: dict | None = None):
    """``<blend>-pool-<pool>``: the pool's Parquet (by reference), its receipt and manifest.json (checksummed)."""
    data = pool_path(blend, pool)
    return files_artifact(f"{blend}-pool-{pool}", "candidate-pool", metadata or {},
                          [reference(store, data, checksum=False),
                           reference(store, receipt_path(data.rsplit(".", 1)[0]), checksum=True),
                           reference(store, pool_manifest_path(blend, pool), checksum=True)])


def log_harmony_shards(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
                       built: list[tuple[str, dict]], manifests: dict) -> None:
    lineage.log_shards(context, store, blend, built, manifests, HARMONY_SHARDS)


def log_pools(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
              pools: list[tuple[str, dict]], manifests: dict) -> None:
    """One W&B run for a candidate_pool run: uses every family dataset's Harmony shards, logs each pool built."""
    lineage.log(
        context, blend, "candidate_pool",
        used=lambda: [shards_artifact(store, blend, dataset, manifest, HARMONY_SHARDS)
                      for dataset, manifest in manifests.items()],
        logged=lambda: [pool_artifact(store, blend, pool, {"pool": pool, "dagster_run_id": context.run_id, **metadata})
                        for pool, metadata in pools])
