"""The jsonl pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.automation import nightly_missing_shards_schedule
from nemotron_assets.core.pipeline import Assets, BlendScope, Pipeline, Step
from nemotron_assets.defs.jsonl.assets import build_jsonl_assets
from nemotron_assets.defs.jsonl.shard import jsonl_datasets, jsonl_freshness
from nemotron_assets.defs.jsonl.status import jsonl_problems, jsonl_status


def nightly_schedule(blend_scope: BlendScope, assets: Assets) -> list:
    blend = blend_scope.blend
    datasets = jsonl_datasets(blend)

    def state_of(store, base, manifest, index):
        return jsonl_freshness(store, datasets[manifest.dataset], base, manifest, index)

    return [nightly_missing_shards_schedule(f"{blend.name}__nightly_missing_jsonl_shards", blend,
                                            assets["jsonl_shard"], "jsonl", state_of)]


PIPELINE = Pipeline(
    name="jsonl",
    applies=lambda blend: bool(blend.datasets_of("jsonl")),
    steps=(Step("jsonl_shard", keys=lambda target: target.registered(target.scope.dynamic_name("jsonl_shards")),
                ranges=True, options=("force", "build_processes"), registered_by="source_split", skips_rows=True),
           Step("jsonl_manifest", by_dataset=False)),
    assets=build_jsonl_assets,
    automation=nightly_schedule,
    status=jsonl_status,
    problems=jsonl_problems,
    partition_steps=("jsonl_shard",),
)
