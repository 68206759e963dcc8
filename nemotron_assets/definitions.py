"""The Dagster code location: one pipeline per blend file in ``NEMOTRON_BLENDS_DIR`` (default ``blends/``).

Load it with ``dagster dev -w workspace.yaml`` or ``dagster asset materialize -m nemotron_assets.definitions``.
Storage is local disk or S3, picked by ``NEMOTRON_DATA_ROOT`` alone.
"""

import warnings
from pathlib import Path

import dagster as dg

from nemotron_assets import settings
from nemotron_assets.assets.pretrain import PretrainAssets, build_pretrain_assets
from nemotron_assets.automation import blend_automation
from nemotron_assets.blend import discover_blends
from nemotron_assets.resources.storage import StorageResource

# We rely on BackfillPolicy (beta) and partitioned asset checks (preview) on purpose, with dagster pinned; the
# warnings would repeat for every asset of every blend on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def build_definitions(blends_dir: Path | None = None, data_root: str | None = None) -> dg.Definitions:
    blends = discover_blends(blends_dir or settings.blends_dir())
    pipelines: dict[str, PretrainAssets] = {blend.name: build_pretrain_assets(blend, path) for path, blend in blends}
    sensors, schedules = blend_automation(blends, pipelines)
    storage = StorageResource(root=data_root or settings.data_root(),
                              endpoint_url=settings.s3_endpoint_url())
    return dg.Definitions(
        assets=[a for p in pipelines.values() for a in (p.source_split, p.pretrain_shard, p.megatron_blend)],
        asset_checks=[p.shard_checks for p in pipelines.values()],
        resources={"storage": storage},
        sensors=sensors,
        schedules=schedules,
    )


defs = build_definitions()
