"""The pretrain pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.automation import nightly_missing_shards_schedule
from nemotron_assets.core.pipeline import Assets, BlendScope, Pipeline, Step, Target
from nemotron_assets.defs.pretrain.assets import build_pretrain_assets
from nemotron_assets.defs.pretrain.shard import PretrainSettings
from nemotron_assets.defs.pretrain.status import pretrain_problems, pretrain_status, shard_freshness


def registered_shards(target: Target) -> list[str]:
    return target.registered(target.scope.dynamic_name("pretrain_shards"))


def nightly_schedule(blend_scope: BlendScope, assets: Assets) -> list:
    blend = blend_scope.blend
    settings = PretrainSettings.of(blend)

    def state_of(store, base, manifest, index):
        return shard_freshness(store, settings, base, manifest, index, settings.tokenizer_identity())

    return [nightly_missing_shards_schedule(f"{blend.name}__nightly_missing_shards", blend, assets["pretrain_shard"],
                                            "pretrain", state_of)]


PIPELINE = Pipeline(
    name="pretrain",
    applies=lambda blend: bool(blend.datasets_of("pretrain")),
    steps=(Step("pretrain_shard", keys=registered_shards, ranges=True,
                options=("force", "tokenizer_backend", "build_processes"), registered_by="source_split",
                skips_rows=True),
           Step("megatron_blend", by_dataset=False)),
    assets=build_pretrain_assets,
    automation=nightly_schedule,
    status=pretrain_status,
    problems=pretrain_problems,
    partition_steps=("pretrain_shard",),
)
