"""The harmony pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.automation import ShardState, nightly_missing_shards_schedule, shards_not_done
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.pipeline import Assets, BlendScope, BuildStage, Pipeline, Step, Target
from nemotron_assets.defs.harmony.assets import build_harmony_assets
from nemotron_assets.defs.harmony.shard import harmony_datasets, harmony_freshness
from nemotron_assets.defs.harmony.status import harmony_problems, harmony_status


def registered_shards(target: Target) -> list[str]:
    return target.registered(target.scope.dynamic_name("harmony_shards"))


def shard_state(blend: Blend) -> ShardState:
    datasets = harmony_datasets(blend)

    def state_of(store, base, manifest, index):
        return harmony_freshness(store, datasets[manifest.dataset], base, manifest, index)

    return state_of


def shards_to_build(target: Target) -> list[str]:
    return shards_not_done(target.store, target.blend, registered_shards(target), shard_state(target.blend))


def nightly_schedule(blend_scope: BlendScope, assets: Assets) -> list:
    blend = blend_scope.blend
    return [nightly_missing_shards_schedule(f"{blend.name}__nightly_missing_harmony_shards", blend,
                                            assets["harmony_shard"], "harmony", shard_state(blend))]


def family_datasets(target: Target) -> list[str]:
    return [entry.name for entry in target.blend.datasets_of("harmony")]


def asks_for_pools(blend: Blend) -> bool:
    return bool(blend.pools())


POOLS_ASKED_BY = "a pool is named in curation.pools, sft.from or scoring.pools"


PIPELINE = Pipeline(
    name="harmony",
    applies=lambda blend: bool(blend.datasets_of("harmony")),
    steps=(Step("harmony_shard", keys=registered_shards, ranges=True, options=("force", "build_processes"),
                registered_by="source_split", skips_rows=True, build_stage=BuildStage.SHARDS,
                not_done=shards_to_build),
           Step("harmony_dedup", keys=family_datasets),
           Step("candidate_pool", keys=lambda target: list(target.blend.pools()), by_dataset=False,
                applies=asks_for_pools, asked_by=POOLS_ASKED_BY),
           Step("embedding_view", keys=lambda target: list(target.blend.pools()), by_dataset=False,
                options=("force", "build_processes"), applies=asks_for_pools, asked_by=POOLS_ASKED_BY),
           Step("behavior_report", by_dataset=False, applies=lambda blend: blend.curation is not None,
                asked_by="the blend has a curation: section")),
    assets=build_harmony_assets,
    automation=nightly_schedule,
    rebuilt_when_inputs_change=("harmony_dedup", "candidate_pool", "embedding_view", "behavior_report"),
    status=harmony_status,
    problems=harmony_problems,
    partition_steps=("harmony_shard",),
)
