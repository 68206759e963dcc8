"""The post-training sample blend's packed SFT (its ``sft:`` section) run through a real Dagster instance: the source
split, Harmony path and the four SFT assets, for the full build or a sample twin. Shared by the SFT step tests and
the lineage and S3 tests."""

from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from nemotron_assets.core.blend import load_blend
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import Scope, sample_partitions_name
from nemotron_assets.core.resources import StorageResource
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.materialize_helpers import blend_assets

SAMPLE = REPO / "blends" / "posttrain_sample.yaml"


class SftPipeline:
    """The blend's source split, Harmony path and packed SFT (full build, or the sample twins of ``sample``)."""

    def __init__(self, root: Path | str, instance: dg.DagsterInstance, blend=None, sample: str | None = None,
                 lineage: WandbLineage | None = None, endpoint_url: str | None = None) -> None:
        self.blend = blend or load_blend(SAMPLE)
        self.lineage = lineage or WandbLineage()
        self.sample, self.root, self.instance, self.endpoint_url = sample, root, instance, endpoint_url
        scope = Scope(self.blend.name, samples=sample is not None)
        self.scope = scope
        self.assets = blend_assets(self.blend, SAMPLE, scope)
        self.source_split = self.assets.source_split
        self.definitions = self.assets.definitions
        self.families = [e.name for e in self.blend.datasets_of("harmony")]
        if sample is not None:
            for what, names in (("datasets", self.families), ("family_datasets", self.families)):
                instance.add_dynamic_partitions(sample_partitions_name(self.blend.name, what),
                                                [scope.qualify(sample, name) for name in names])
            instance.add_dynamic_partitions(sample_partitions_name(self.blend.name, "blend"), [sample])

    def run(self, asset, partitions=None, raise_on_error=True):
        tags = {ASSET_PARTITION_RANGE_START_TAG: partitions[0], ASSET_PARTITION_RANGE_END_TAG: partitions[-1]} \
            if partitions else {}
        storage = StorageResource(root=str(self.root), endpoint_url=self.endpoint_url)
        return dg.materialize(self.definitions, selection=[asset.key], instance=self.instance, tags=tags,
                              raise_on_error=raise_on_error, partition_key=None if partitions or not self.sample
                              else self.sample, resources={"storage": storage, "lineage": self.lineage})

    def keys(self, partitions: dg.PartitionsDefinition) -> list[str]:
        return self.instance.get_dynamic_partitions(partitions.name)

    def mine(self, keys: list[str]) -> list[str]:
        return [k for k in keys if (self.sample is None) == (self.scope.split(k)[0] is None or not self.scope.samples)
                and (self.sample is None or k.startswith(f"{self.sample}/"))]

    def upstream(self) -> None:
        self.run(self.source_split, [self.scope.qualify(self.sample, d) for d in self.families])
        self.run(self.assets.harmony_shard, self.mine(self.keys(self.assets.harmony_shard.partitions_def)))
        self.run(self.assets.harmony_dedup, [self.scope.qualify(self.sample, d) for d in self.families])

    def packed_sft(self, steps: int = 4) -> list:
        """sft_samples, sft_plan, sft_packed (every planned shard), sft_manifest (the first ``steps`` of them): the
        results of their runs."""
        results = [self.run(self.assets.sft_samples, self.mine(self.keys(self.assets.harmony_shard.partitions_def)))]
        if steps > 1:
            results.append(self.run(self.assets.sft_plan))
        if steps > 2:
            packed = self.assets.sft_packed
            results.append(self.run(packed, self.mine(self.keys(packed.partitions_def))))
        if steps > 3:
            results.append(self.run(self.assets.sft_manifest))
        return results

    @property
    def out(self) -> Path:
        base = self.root / self.blend.name
        return base / "samples" / self.sample if self.sample else base
