"""Materialize a blend's pretraining assets in-process, one run per asset, like a backfill would."""

from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from nemotron_assets.core.blend import Blend, load_blend
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.pretrain.assets import PretrainAssets, build_pretrain_assets


def pipeline_for(blend_file: Path, samples: bool = False, **overrides) -> tuple[Blend, PretrainAssets]:
    """The blend's full-build assets, or with ``samples`` its sample twins; ``overrides`` change blend settings."""
    blend = load_blend(blend_file)
    if overrides:
        blend = blend.model_copy(update=overrides)
    return blend, build_pretrain_assets(blend, blend_file, Scope(blend.name, samples=samples))


def run_asset(pipeline: PretrainAssets, asset, root: str, instance: dg.DagsterInstance,
              partitions: list[str] | None = None, run_config: dict | None = None, raise_on_error: bool = True,
              s3_endpoint: str | None = None, lineage: WandbLineage | None = None):
    """One run of ``asset`` (an assets definition or an AssetSelection) over a partition range."""
    tags = {}
    if partitions:
        tags = {ASSET_PARTITION_RANGE_START_TAG: partitions[0], ASSET_PARTITION_RANGE_END_TAG: partitions[-1]}
    return dg.materialize(
        pipeline.definitions, selection=asset if isinstance(asset, dg.AssetSelection) else [asset.key],
        instance=instance, tags=tags,
        resources={"storage": StorageResource(root=root, endpoint_url=s3_endpoint),
                   "lineage": lineage or WandbLineage()},
        run_config=run_config or {},
        raise_on_error=raise_on_error,
    )


def shard_keys(pipeline: PretrainAssets, instance: dg.DagsterInstance) -> list[str]:
    return instance.get_dynamic_partitions(pipeline.shard_partitions.name)


def materialize_all(pipeline: PretrainAssets, root: str, instance: dg.DagsterInstance,
                    lineage: WandbLineage | None = None) -> None:
    """source splits (one run), every shard (one run), then the Megatron blend."""
    datasets = pipeline.dataset_partitions.get_partition_keys()
    run_asset(pipeline, pipeline.source_split, root, instance, datasets, lineage=lineage)
    run_asset(pipeline, pipeline.pretrain_shard, root, instance, shard_keys(pipeline, instance), lineage=lineage)
    run_asset(pipeline, pipeline.megatron_blend, root, instance, lineage=lineage)
