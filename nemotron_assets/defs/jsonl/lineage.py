"""W&B lineage of the JSONL path (core/lineage.py says how lineage works): each jsonl_shard run uses the source
manifests and logs ``<blend>-<dataset>-jsonl`` (type jsonl-shards: every finished shard's receipt and the JSONL files
it lists), and the jsonl_manifest run uses those and logs ``<blend>-jsonl`` (type jsonl-manifest: manifest.json and
its receipt).
"""

import dagster as dg

from nemotron_assets.core.lineage import ShardOutputs, WandbLineage, files_artifact, reference, shards_artifact
from nemotron_assets.core.records import receipt_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.jsonl.layout import jsonl_manifest_path, jsonl_manifest_prefix, jsonl_shard_prefix

JSONL_SHARDS = ShardOutputs("jsonl", "jsonl-shards", jsonl_shard_prefix, (),
                            ("rows_in", "rows", "dropped", "compression", "files"), "rows_in", "jsonl_shard")


def log_jsonl_shards(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
                     built: list[tuple[str, dict]], manifests: dict) -> None:
    lineage.log_shards(context, store, blend, built, manifests, JSONL_SHARDS)


def log_jsonl_manifest(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
                       metadata: dict, manifests: dict) -> None:
    """One W&B run for a jsonl_manifest materialization: uses the JSONL shards artifact of every JSONL dataset and
    logs ``<blend>-jsonl`` (manifest.json and its receipt)."""
    lineage.log(
        context, blend, "jsonl_manifest",
        used=lambda: [shards_artifact(store, blend, dataset, manifest, JSONL_SHARDS)
                      for dataset, manifest in manifests.items()],
        logged=lambda: [manifest_artifact(store, blend, {"dagster_run_id": context.run_id, **metadata})])


def manifest_artifact(store: Storage, blend: str, metadata: dict):
    """``<blend>-jsonl``: manifest.json and its receipt."""
    return files_artifact(f"{blend}-jsonl", "jsonl-manifest", metadata,
                          [reference(store, jsonl_manifest_path(blend), checksum=True),
                           reference(store, receipt_path(jsonl_manifest_prefix(blend)), checksum=True)])
