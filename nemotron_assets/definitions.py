"""The Dagster code location: one pipeline per blend file in ``NEMOTRON_BLENDS_DIR`` (default ``blends/``).

Load it with ``dagster dev -w workspace.yaml`` or ``dagster asset materialize -m nemotron_assets.definitions``.
Storage is local disk or S3, picked by ``NEMOTRON_DATA_ROOT`` alone; S3 credentials reach the storage resource
as ``dg.EnvVar``s, so only their names are visible in the UI.
"""

import warnings
from pathlib import Path

import dagster as dg

from nemotron_assets import settings
from nemotron_assets.assets.harmony import build_harmony_assets
from nemotron_assets.assets.pretrain import PretrainAssets, build_pretrain_assets
from nemotron_assets.automation import blend_automation
from nemotron_assets.blend import discover_blends
from nemotron_assets.executor import executor
from nemotron_assets.resources.storage import StorageResource
from nemotron_assets.resources.wandb_lineage import WandbLineage

# We rely on BackfillPolicy (beta) and partitioned asset checks (preview) on purpose, with dagster pinned; the
# warnings would repeat for every asset of every blend on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def build_definitions(blends_dir: Path | None = None, data_root: str | None = None) -> dg.Definitions:
    blends = discover_blends(blends_dir or settings.blends_dir())
    pipelines: dict[str, PretrainAssets] = {blend.name: build_pretrain_assets(blend, path) for path, blend in blends}
    sensors, schedules = blend_automation(blends, pipelines)
    harmony = [build_harmony_assets(blend, pipelines[blend.name].source_split)
               for _, blend in blends if any(e.family for e in blend.entries())]
    settings.deployment()  # refuses an unknown or not yet implemented NEMOTRON_DEPLOYMENT with a clear message
    storage = StorageResource.from_environment(data_root or settings.data_root())
    return dg.Definitions(
        assets=[a for p in pipelines.values() for a in (p.source_split, p.pretrain_shard, p.megatron_blend)]
        + [a for h in harmony for a in (h.harmony_shard, h.harmony_dedup, h.candidate_pool, h.embedding_view,
                                         h.behavior_report)],
        asset_checks=[p.shard_checks for p in pipelines.values()] + [c for h in harmony for c in h.checks],
        resources={"storage": storage, "lineage": WandbLineage.from_environment()},
        sensors=sensors,
        schedules=schedules,
        executor=executor,
    )


defs = build_definitions()
