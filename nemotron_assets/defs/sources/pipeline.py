"""The sources pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.pipeline import BuildStage, Pipeline, Step
from nemotron_assets.defs.sources.assets import build_sources_assets
from nemotron_assets.defs.sources.automation import new_source_files_sensor, splits_not_done

PIPELINE = Pipeline(
    name="sources",
    applies=lambda blend: True,
    steps=(Step("source_split", keys=lambda target: [entry.name for entry in target.blend.entries()],
                options=(), build_stage=BuildStage.SOURCE_SPLITS, not_done=splits_not_done),),
    assets=build_sources_assets,
    automation=new_source_files_sensor,
    partition_steps=("source_split",),
)
