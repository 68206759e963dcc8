"""The pretrain pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.automation import ShardState, nightly_missing_shards_schedule, shards_not_done
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.pipeline import Assets, BlendScope, BuildStage, Pipeline, Step, Target
from nemotron_assets.defs.pretrain.assets import build_pretrain_assets
from nemotron_assets.defs.pretrain.blend_files import BlendListing, blend_files_freshness
from nemotron_assets.defs.pretrain.shard import PretrainSettings
from nemotron_assets.defs.pretrain.status import pretrain_problems, pretrain_status, shard_freshness


def registered_shards(target: Target) -> list[str]:
    return target.registered(target.scope.dynamic_name("pretrain_shards"))


def shard_state(blend: Blend) -> ShardState:
    settings = PretrainSettings.of(blend)

    def state_of(store, base, manifest, index):
        return shard_freshness(store, settings, base, manifest, index, settings.tokenizer_identity())

    return state_of


def shards_to_build(target: Target) -> list[str]:
    return shards_not_done(target.store, target.blend, registered_shards(target), shard_state(target.blend))


def blend_files_to_write(target: Target) -> list[None]:
    state = blend_files_freshness(target.store, BlendListing.of(target.blend), PretrainSettings.of(target.blend),
                                  target.blend.name)
    return [] if state.done else [None]


def nightly_schedule(blend_scope: BlendScope, assets: Assets) -> list:
    blend = blend_scope.blend
    return [nightly_missing_shards_schedule(f"{blend.name}__nightly_missing_shards", blend, assets["pretrain_shard"],
                                            "pretrain", shard_state(blend))]


PIPELINE = Pipeline(
    name="pretrain",
    applies=lambda blend: bool(blend.datasets_of("pretrain")),
    steps=(Step("pretrain_shard", keys=registered_shards, ranges=True,
                options=("force", "tokenizer_backend", "build_processes"), registered_by="source_split",
                skips_rows=True, build_stage=BuildStage.SHARDS, not_done=shards_to_build),
           Step("megatron_blend", by_dataset=False, build_stage=BuildStage.BLEND_FILES,
                not_done=blend_files_to_write)),
    assets=build_pretrain_assets,
    automation=nightly_schedule,
    status=pretrain_status,
    problems=pretrain_problems,
    partition_steps=("pretrain_shard",),
)
