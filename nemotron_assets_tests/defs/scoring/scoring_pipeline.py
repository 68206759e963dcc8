"""The post-training sample blend with a ``scoring:`` section, run through a real Dagster instance: its upstream
(source split, Harmony shards, dedup, the scored pool and its views) and the four scoring assets. Shared by the
scoring step tests and the lineage tests."""

from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.sections import ScoringSettings
from nemotron_assets_tests.conftest import REPO
from nemotron_assets_tests.materialize_helpers import blend_assets

SAMPLE = REPO / "blends" / "posttrain_sample.yaml"
POOL = "reasoning_on"
MAX_TOKENS = 160  # some sample rows are longer: they are truncated and flagged
VIEWS = ("prompt", "reasoning_excerpt", "behavior")


def scoring_settings(model: Path, **changes) -> ScoringSettings:
    return ScoringSettings(model=str(model), pools=[POOL], batch_tokens=2048, max_tokens=MAX_TOKENS, device="cpu",
                           select_quantile=0.25, diverse_k=3, near_dup_threshold=0.9, **changes)


class ScoringPipeline:
    def __init__(self, root: Path, instance: dg.DagsterInstance, blend: Blend,
                 lineage: WandbLineage | None = None) -> None:
        self.root, self.instance, self.blend = root, instance, blend
        self.lineage = lineage or WandbLineage()
        scope = Scope(blend.name)
        self.assets = blend_assets(blend, SAMPLE, scope)
        self.source_split = self.assets.source_split
        self.definitions = self.assets.definitions
        self.families = [e.name for e in blend.datasets_of("harmony")]

    def run(self, asset, partitions=None):
        tags = {ASSET_PARTITION_RANGE_START_TAG: partitions[0], ASSET_PARTITION_RANGE_END_TAG: partitions[-1]} \
            if partitions else {}
        return dg.materialize(self.definitions, selection=[asset.key], instance=self.instance, tags=tags,
                              resources={"storage": StorageResource(root=str(self.root)), "lineage": self.lineage})

    def upstream(self) -> None:
        self.run(self.source_split, self.families)
        self.run(self.assets.harmony_shard, self.instance.get_dynamic_partitions(
            self.assets.harmony_shard.partitions_def.name))
        self.run(self.assets.harmony_dedup, self.families)
        self.run(self.assets.candidate_pool, [POOL])
        self.run(self.assets.embedding_view, [POOL])

    @property
    def parts(self) -> list[str]:
        return self.instance.get_dynamic_partitions(self.assets.nll_scores.partitions_def.name)

    def scores(self) -> dict:
        """The four scoring assets in order; the nll_scores run's per-partition metadata."""
        nll = self.run(self.assets.nll_scores, self.parts)
        self.run(self.assets.embeddings, [f"{view}/{POOL}" for view in VIEWS])
        self.run(self.assets.selected_pool, self.blend.scoring.selections())
        self.run(self.assets.near_duplicate_report)
        return materializations(nll)

    @property
    def out(self) -> Path:
        return self.root / self.blend.name


def materializations(result) -> dict[str, dict]:
    """Partition -> metadata of every materialization a run recorded."""
    events = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    return {m.partition: {k: v.value for k, v in m.metadata.items()} for m in events}
