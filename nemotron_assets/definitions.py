"""The Dagster code location: one pipeline per blend file in ``NEMOTRON_BLENDS_DIR`` (default ``blends/``).

Load it with ``dagster dev -w workspace.yaml`` or ``dagster asset materialize -m nemotron_assets.definitions``.
Storage is local disk or S3, picked by ``NEMOTRON_DATA_ROOT`` alone; S3 credentials reach the storage resource
as ``dg.EnvVar``s, so only their names are visible in the UI.

Each blend gets its full build (group ``<blend>``) and its sample twins (group ``<blend>_samples``, partitions.py).
A blend file that does not load does not take the others down: it shows in the UI as one asset,
``<name>/blend_file_error``, whose description is the located error.
"""

import warnings
from pathlib import Path

import dagster as dg

from nemotron_assets.cli.console import compact_console
from nemotron_assets.core import settings
from nemotron_assets.core.blend import BrokenBlend, load_blend_folder
from nemotron_assets.core.executor import executor
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.automation import blend_automation
from nemotron_assets.defs.harmony.assets import HarmonyAssets, build_harmony_assets
from nemotron_assets.defs.jsonl.assets import JsonlAssets, build_jsonl_assets
from nemotron_assets.defs.pretrain.assets import PretrainAssets, build_pretrain_assets
from nemotron_assets.defs.scoring.assets import ScoringAssets, build_scoring_assets
from nemotron_assets.defs.sft.assets import SftAssets, build_sft_assets

# We rely on BackfillPolicy (beta) and partitioned asset checks (preview) on purpose, with dagster pinned; the
# warnings would repeat for every asset of every blend on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def build_definitions(blends_dir: Path | None = None, data_root: str | None = None) -> dg.Definitions:
    settings.deployment()  # refuses an unknown NEMOTRON_DEPLOYMENT with a clear message
    folder = load_blend_folder(blends_dir or settings.blends_dir())
    pipelines: dict[str, PretrainAssets] = {}
    harmony: dict[str, HarmonyAssets] = {}
    jsonl: dict[str, JsonlAssets] = {}
    sft: dict[str, SftAssets] = {}
    scoring: dict[str, ScoringAssets] = {}
    assets: list = []
    for path, blend in folder.blends:
        for scope in (Scope(blend.name), Scope(blend.name, samples=True)):
            pipeline = build_pretrain_assets(blend, path, scope)
            assets += pipeline.definitions  # the source split; the Megatron shards if the blend has text datasets
            if blend.datasets_of("harmony"):
                post_training = build_harmony_assets(blend, pipeline.source_split, scope)
                assets += post_training.definitions
                if not scope.samples:
                    harmony[blend.name] = post_training
                scored = None
                if blend.scoring is not None:  # no torch here: the scoring steps load it when they run
                    scored = build_scoring_assets(blend, post_training, scope)
                    assets += scored.definitions
                    if not scope.samples:
                        scoring[blend.name] = scored
                if blend.sft is not None:
                    packed = build_sft_assets(blend, post_training, scope,
                                              selected_pool=scored.selected_pool if scored else None)
                    assets += packed.definitions
                    if not scope.samples:
                        sft[blend.name] = packed
            if blend.datasets_of("jsonl"):
                transformed = build_jsonl_assets(blend, pipeline.source_split, scope)
                assets += transformed.definitions
                if not scope.samples:
                    jsonl[blend.name] = transformed
            if not scope.samples:
                pipelines[blend.name] = pipeline
    sensors, schedules = blend_automation(folder.blends, pipelines, harmony, jsonl, sft, scoring)
    storage = StorageResource.from_environment(data_root or settings.data_root())
    return dg.Definitions(
        assets=assets + [broken_blend_asset(bad) for bad in folder.broken],
        resources={"storage": storage, "lineage": WandbLineage.from_environment()},
        loggers={"console": dg.colored_console_logger, "compact_console": compact_console},
        sensors=sensors,
        schedules=schedules,
        executor=executor,
    )


def broken_blend_asset(bad: BrokenBlend) -> dg.AssetSpec:
    """A placeholder that puts a broken blend file's error where its pipeline would be in the UI."""
    group = "".join(c if c.isalnum() or c == "_" else "_" for c in bad.name) or "broken_blend"
    return dg.AssetSpec(key=[group, "blend_file_error"], group_name=group, kinds={"yaml"},
                        description=f"This blend file does not load, so its pipeline is missing: {bad.error}",
                        metadata={"blend_file": dg.MetadataValue.path(str(bad.path)), "error": str(bad.error)})


defs = build_definitions()
