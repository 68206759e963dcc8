"""The sample JSONL blend (rl_sample) run through a real Dagster instance the way a backfill would (source split,
Megatron assets if it has text datasets, JSONL shards and manifest): shared by the JSONL step tests and the tests
of lineage and automation that build the same outputs."""

from pathlib import Path

import dagster as dg

from nemotron_assets.core.blend import load_blend
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.storage import Storage
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.materialize_helpers import blend_assets

SAMPLE = REPO / "blends" / "rl_sample.yaml"


class Pipeline:
    """A blend's source split, its Megatron assets if it has text datasets, and its JSONL assets, run the way a
    backfill would."""

    def __init__(self, blend_file: Path, root: Path, instance: dg.DagsterInstance,
                 lineage: WandbLineage | None = None, **overrides) -> None:
        blend = load_blend(blend_file)
        self.blend = blend.model_copy(update=overrides) if overrides else blend
        self.assets = blend_assets(self.blend, blend_file)
        self.root, self.instance = root, instance
        self.resources = {"storage": StorageResource(root=str(root)), "lineage": lineage or WandbLineage()}
        self.definitions = self.assets.definitions
        self.store = Storage(str(root))

    def run(self, asset, partitions=None, raise_on_error=True) -> dg.ExecuteInProcessResult:
        from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

        tags = ({ASSET_PARTITION_RANGE_START_TAG: partitions[0], ASSET_PARTITION_RANGE_END_TAG: partitions[-1]}
                if partitions else {})
        selection = asset if isinstance(asset, dg.AssetSelection) else [asset.key]
        return dg.materialize(self.definitions, selection=selection, instance=self.instance, tags=tags,
                              raise_on_error=raise_on_error, resources=self.resources)

    def shard_keys(self) -> list[str]:
        return self.instance.get_dynamic_partitions(self.assets.jsonl_shard.partitions_def.name)

    def plan(self) -> None:
        self.run(self.assets.source_split, [e.name for e in self.blend.entries()])

    def shards(self, raise_on_error=True) -> dg.ExecuteInProcessResult:
        return self.run(self.assets.jsonl_shard, self.shard_keys(), raise_on_error)

    def all(self) -> list[dg.ExecuteInProcessResult]:
        self.plan()
        return [self.shards(), self.run(self.assets.jsonl_manifest)]

    @property
    def out(self) -> Path:
        return self.root / self.blend.name / "jsonl"
