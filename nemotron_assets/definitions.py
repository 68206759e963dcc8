"""The Dagster code location: one pipeline per blend file in ``NEMOTRON_BLENDS_DIR`` (default ``blends/``).

Load it with ``dagster dev -w workspace.yaml`` or ``dagster asset materialize -m nemotron_assets.definitions``.
Storage is local disk or S3, picked by ``NEMOTRON_DATA_ROOT`` alone; S3 credentials reach the storage resource
as ``dg.EnvVar``s, so only their names are visible in the UI.

For each blend, each pipeline of the registry (``nemotron_assets.defs.registry.PIPELINES``) that applies to it adds
its assets, handed the assets of the pipelines before it; then its sensors and schedules. The blend's build sensor
(``<blend>__build``) covers the steps that name a build stage, and its post-training automation sensor the assets
the pipelines rebuild once their inputs changed (core/automation.py). Each blend gets its full build
(group ``<blend>``) and its sample twins (group ``<blend>_samples``, core/partitions.py). A blend file that does not
load does not take the others down: it shows in the UI as one asset, ``<name>/blend_file_error``, whose description
is the located error.

Runs execute their steps in the run's own process by default (``in_process``): a step that builds shards builds
them in parallel itself (core/step.py), so a separate process per step would only add its start-up. A run config
may still choose ``multiprocess``.
"""

import warnings
from pathlib import Path

import dagster as dg

from nemotron_assets.cli.console import compact_console
from nemotron_assets.core import settings
from nemotron_assets.core.allocator import loading_for_good
from nemotron_assets.core.automation import build_sensor, post_training_sensor
from nemotron_assets.core.blend import BrokenBlend, load_blend_folder
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.partitions import Scope
from nemotron_assets.core.pipeline import BlendScope
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.registry import PIPELINES

# We rely on BackfillPolicy (beta) and partitioned asset checks (preview) on purpose, with dagster pinned; the
# warnings would repeat for every asset of every blend on every load.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

_SELECTOR = dg.multi_or_in_process_executor.config_schema.config_type
executor = dg.multi_or_in_process_executor.configured(
    lambda config: config, name="in_process_unless_chosen",
    config_schema=dg.Field(_SELECTOR, default_value={"in_process": {}}, is_required=False))


def build_definitions(blends_dir: Path | None = None, data_root: str | None = None) -> dg.Definitions:
    settings.deployment()  # refuses an unknown NEMOTRON_DEPLOYMENT with a clear message
    folder = load_blend_folder(blends_dir or settings.blends_dir())
    assets: list = []
    automation: list = []
    for path, blend in folder.blends:
        for scope in (Scope(blend.name), Scope(blend.name, samples=True)):
            blend_scope = BlendScope(blend, path, scope)
            built: dict[str, dg.AssetsDefinition] = {}
            for pipeline in PIPELINES:
                if not pipeline.applies(blend):
                    continue
                mine = pipeline.assets(blend_scope, dict(built))
                built.update(mine)
                assets += mine.values()
                if not scope.samples:
                    automation += pipeline.automation(blend_scope, built)
            if scope.samples:
                continue
            applying = [pipeline for pipeline in PIPELINES if pipeline.applies(blend)]
            staged = [(step, built[step.asset]) for pipeline in applying for step in pipeline.steps_of(blend)
                      if step.build_stage is not None]
            if staged:
                automation.append(build_sensor(blend_scope, staged))
            followed = [built[name] for pipeline in applying for name in pipeline.rebuilt_when_inputs_change
                        if name in built]
            if followed:
                automation.append(post_training_sensor(blend, followed, list(built.values())))
    storage = StorageResource.from_environment(data_root or settings.data_root())
    return dg.Definitions(
        assets=assets + [broken_blend_asset(bad) for bad in folder.broken],
        resources={"storage": storage, "lineage": WandbLineage.from_environment()},
        loggers={"console": dg.colored_console_logger, "compact_console": compact_console},
        sensors=[a for a in automation if isinstance(a, dg.SensorDefinition)],
        schedules=[a for a in automation if isinstance(a, dg.ScheduleDefinition)],
        executor=executor,
    )


def broken_blend_asset(bad: BrokenBlend) -> dg.AssetSpec:
    """A placeholder that puts a broken blend file's error where its pipeline would be in the UI."""
    group = "".join(c if c.isalnum() or c == "_" else "_" for c in bad.name) or "broken_blend"
    return dg.AssetSpec(key=[group, "blend_file_error"], group_name=group, kinds={"yaml"},
                        description=f"This blend file does not load, so its pipeline is missing: {bad.error}",
                        metadata={"blend_file": dg.MetadataValue.path(str(bad.path)), "error": str(bad.error)})


with loading_for_good():  # it and the modules above live as long as the process (core/allocator.py)
    defs = build_definitions()
