"""The sources pipeline as the registry sees it (core/pipeline.py): steps, assets, automation, status, verify."""

from nemotron_assets.core.pipeline import Pipeline, Step
from nemotron_assets.defs.sources.assets import build_sources_assets
from nemotron_assets.defs.sources.automation import new_source_files_sensor

PIPELINE = Pipeline(
    name="sources",
    applies=lambda blend: True,
    steps=(Step("source_split", keys=lambda target: [entry.name for entry in target.blend.entries()],
                options=()),),
    assets=build_sources_assets,
    automation=new_source_files_sensor,
    partition_steps=("source_split",),
)
