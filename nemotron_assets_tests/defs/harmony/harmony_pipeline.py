"""The sample post-training blend's Harmony path run through a real Dagster instance the way a backfill would
(source split, Harmony shards, dedup, pools, views, report): shared by the Harmony step tests and the tests of
lineage, S3, automation and verify that build the same outputs."""

from pathlib import Path

import dagster as dg

from nemotron_assets.core.blend import load_blend
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.resources import StorageResource
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.materialize_helpers import blend_assets

SAMPLE = REPO / "blends" / "posttrain_sample.yaml"


class Pipeline:
    """The blend's source split and Harmony assets, run the way a backfill would."""

    def __init__(self, blend_file: Path, root: Path | str, instance: dg.DagsterInstance,
                 lineage: WandbLineage | None = None, endpoint_url: str | None = None, **overrides) -> None:
        blend = load_blend(blend_file)
        self.blend = blend.model_copy(update=overrides) if overrides else blend
        self.assets = blend_assets(self.blend, blend_file)
        self.source_split = self.assets.source_split
        self.root, self.instance, self.lineage = root, instance, lineage or WandbLineage()
        self.storage = StorageResource(root=str(root), endpoint_url=endpoint_url)
        self.definitions = self.assets.definitions

    def run(self, asset, partitions=None, raise_on_error=True):
        selection = asset if isinstance(asset, dg.AssetSelection) else [asset.key]
        return dg.materialize(self.definitions, selection=selection, instance=self.instance, tags=_range(partitions),
                              raise_on_error=raise_on_error,
                              resources={"storage": self.storage, "lineage": self.lineage})

    def shard_keys(self) -> list[str]:
        return self.instance.get_dynamic_partitions(self.assets.harmony_shard.partitions_def.name)

    def all(self, shard_order=None) -> None:
        self.run(self.source_split, [e.name for e in self.blend.entries()])
        for key in shard_order(self.shard_keys()) if shard_order else [self.shard_keys()]:
            self.run(self.assets.harmony_shard, key if isinstance(key, list) else [key])
        self.run(self.assets.harmony_dedup, self.assets.harmony_dedup.partitions_def.get_partition_keys())
        pools = self.assets.candidate_pool.partitions_def.get_partition_keys()
        self.run(self.assets.candidate_pool, pools)
        self.run(self.assets.embedding_view, pools)
        self.run(self.assets.behavior_report)


def _range(partitions):
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    if not partitions:
        return {}
    return {ASSET_PARTITION_RANGE_START_TAG: partitions[0], ASSET_PARTITION_RANGE_END_TAG: partitions[-1]}
