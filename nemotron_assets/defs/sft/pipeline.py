"""The sft pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.pipeline import Pipeline, Step, Target
from nemotron_assets.defs.sft.assets import build_sft_assets
from nemotron_assets.defs.sft.status import sft_problems, sft_status


def family_shards(target: Target) -> list[str]:
    return target.registered(target.scope.dynamic_name("harmony_shards"))


PIPELINE = Pipeline(
    name="sft",
    applies=lambda blend: blend.sft is not None,
    steps=(Step("sft_samples", keys=family_shards, ranges=True, registered_by="source_split"),
           Step("sft_plan", by_dataset=False),
           Step("sft_packed", keys=lambda target: target.registered(target.scope.dynamic_name("sft_shards")),
                ranges=True, options=("force", "build_processes"), by_dataset=False),
           Step("sft_manifest", by_dataset=False)),
    assets=build_sft_assets,
    rebuilt_when_inputs_change=("sft_samples", "sft_plan", "sft_packed", "sft_manifest"),
    status=sft_status,
    problems=sft_problems,
)
