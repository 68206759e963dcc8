"""Materialize a blend's assets in-process, one run per asset over a partition range, like a backfill would."""

from pathlib import Path

import dagster as dg

from nemotron_assets.core.blend import Blend, load_blend
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import Scope, range_tags
from nemotron_assets.core.pipeline import BlendScope
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.registry import PIPELINES


class BlendAssets(dict):
    """A blend's assets in one scope, by name, built as the code location builds them (every pipeline of the
    registry that applies, in order); also by attribute (``assets.pretrain_shard``)."""

    def __getattr__(self, name: str) -> dg.AssetsDefinition:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def definitions(self) -> list[dg.AssetsDefinition]:
        return list(self.values())

    @property
    def dataset_partitions(self) -> dg.PartitionsDefinition:
        return self["source_split"].partitions_def

    @property
    def shard_partitions(self) -> dg.DynamicPartitionsDefinition:
        return self["pretrain_shard"].partitions_def


def blend_assets(blend: Blend, blend_file: Path, scope: Scope | None = None) -> BlendAssets:
    blend_scope = BlendScope(blend, blend_file, scope or Scope(blend.name))
    assets = BlendAssets()
    for pipeline in PIPELINES:
        if pipeline.applies(blend):
            assets.update(pipeline.assets(blend_scope, dict(assets)))
    return assets


def pipeline_for(blend_file: Path, samples: bool = False, **overrides) -> tuple[Blend, BlendAssets]:
    """The blend's full-build assets, or with ``samples`` its sample twins; ``overrides`` change blend settings."""
    blend = load_blend(blend_file)
    if overrides:
        blend = blend.model_copy(update=overrides)
    return blend, blend_assets(blend, blend_file, Scope(blend.name, samples=samples))


def run_asset(pipeline: BlendAssets, asset, root: str, instance: dg.DagsterInstance,
              partitions: list[str] | None = None, run_config: dict | None = None, raise_on_error: bool = True,
              s3_endpoint: str | None = None, lineage: WandbLineage | None = None):
    """One run of ``asset`` (an assets definition or an AssetSelection) over a partition range."""
    return dg.materialize(
        pipeline.definitions, selection=asset if isinstance(asset, dg.AssetSelection) else [asset.key],
        instance=instance, tags=range_tags(partitions),
        resources={"storage": StorageResource(root=root, endpoint_url=s3_endpoint),
                   "lineage": lineage or WandbLineage()},
        run_config=run_config or {},
        raise_on_error=raise_on_error,
    )


def shard_keys(pipeline: BlendAssets, instance: dg.DagsterInstance, asset: str = "pretrain_shard") -> list[str]:
    return instance.get_dynamic_partitions(pipeline[asset].partitions_def.name)


def materialize_all(pipeline: BlendAssets, root: str, instance: dg.DagsterInstance,
                    lineage: WandbLineage | None = None) -> None:
    """source splits (one run), every shard (one run), then the Megatron blend."""
    datasets = pipeline.dataset_partitions.get_partition_keys()
    run_asset(pipeline, pipeline.source_split, root, instance, datasets, lineage=lineage)
    run_asset(pipeline, pipeline.pretrain_shard, root, instance, shard_keys(pipeline, instance), lineage=lineage)
    run_asset(pipeline, pipeline.megatron_blend, root, instance, lineage=lineage)
