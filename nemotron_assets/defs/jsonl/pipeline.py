"""The jsonl pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.automation import ShardState, nightly_missing_shards_schedule, shards_not_done
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.pipeline import Assets, BlendScope, BuildStage, Pipeline, Step, Target
from nemotron_assets.defs.jsonl.assets import build_jsonl_assets
from nemotron_assets.defs.jsonl.shard import jsonl_datasets, jsonl_freshness, manifest_freshness
from nemotron_assets.defs.jsonl.status import jsonl_problems, jsonl_status


def registered_shards(target: Target) -> list[str]:
    return target.registered(target.scope.dynamic_name("jsonl_shards"))


def shard_state(blend: Blend) -> ShardState:
    datasets = jsonl_datasets(blend)

    def state_of(store, base, manifest, index):
        return jsonl_freshness(store, datasets[manifest.dataset], base, manifest, index)

    return state_of


def shards_to_build(target: Target) -> list[str]:
    return shards_not_done(target.store, target.blend, registered_shards(target), shard_state(target.blend))


def manifest_to_write(target: Target) -> list[None]:
    state = manifest_freshness(target.store, jsonl_datasets(target.blend), target.blend.name)
    return [] if state.done else [None]


def nightly_schedule(blend_scope: BlendScope, assets: Assets) -> list:
    blend = blend_scope.blend
    return [nightly_missing_shards_schedule(f"{blend.name}__nightly_missing_jsonl_shards", blend,
                                            assets["jsonl_shard"], "jsonl", shard_state(blend))]


PIPELINE = Pipeline(
    name="jsonl",
    applies=lambda blend: bool(blend.datasets_of("jsonl")),
    steps=(Step("jsonl_shard", keys=registered_shards, ranges=True, options=("force", "build_processes"),
                registered_by="source_split", skips_rows=True, build_stage=BuildStage.SHARDS,
                not_done=shards_to_build),
           Step("jsonl_manifest", by_dataset=False, build_stage=BuildStage.BLEND_FILES, not_done=manifest_to_write)),
    assets=build_jsonl_assets,
    automation=nightly_schedule,
    status=jsonl_status,
    problems=jsonl_problems,
    partition_steps=("jsonl_shard",),
)
