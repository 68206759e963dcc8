"""W&B lineage of the pretraining path (core/lineage.py says how lineage works):

    <blend>-<dataset>-source   type source-manifest   manifest.json of one dataset
        -> used by the W&B run of each pretrain_shard Dagster run, which logs
    <blend>-<dataset>-shards   type pretrain-shards   every finished shard of the dataset (.bin/.idx/.json)
        -> used by the W&B run of megatron_blend, which logs
    <blend>-megatron-blend     type megatron-blend    blend.json + data_path.txt
"""

import dagster as dg

from nemotron_assets.core.lineage import ShardOutputs, WandbLineage, files_artifact, reference, shards_artifact
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.layout import pretrain_dir, shard_prefix

# The data files of a shard are those its receipt lists: .bin and .idx, or a pair per field of a list text_field.
PRETRAIN_SHARDS = ShardOutputs("shards", "pretrain-shards", shard_prefix, (),
                               ("documents", "tokens", "bin_bytes", "idx_bytes", "bin_sha256", "idx_sha256"),
                               "tokens", "pretrain_shard")


def log_shard_lineage(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
                      built: list[tuple[str, dict]], manifests: dict) -> None:
    """A pretrain_shard run: uses each touched dataset's source manifest, logs the dataset's shards."""
    lineage.log_shards(context, store, blend, built, manifests, PRETRAIN_SHARDS)


def log_blend_lineage(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
                      metadata: dict, manifests: dict) -> None:
    """A megatron_blend run: uses every dataset's shards artifact, logs blend.json and data_path.txt."""
    folder = pretrain_dir(blend)
    lineage.log(
        context, blend, "megatron_blend",
        used=lambda: [shards_artifact(store, blend, dataset, manifest, PRETRAIN_SHARDS)
                      for dataset, manifest in manifests.items()],
        logged=lambda: [files_artifact(f"{blend}-megatron-blend", "megatron-blend",
                                       {"dagster_run_id": context.run_id, **metadata},
                                       [reference(store, f"{folder}/{name}", checksum=True)
                                        for name in ("blend.json", "data_path.txt")])])
