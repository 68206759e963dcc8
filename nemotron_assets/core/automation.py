"""Automation every pipeline shares, all off until turned on (the UI's Automation page, or ``dagster schedule
start`` / ``dagster sensor start``):

- per blend, the build sensor ``<blend>__build`` (`build_sensor`): one switch that builds what is missing or stale in
  the blend's full build, stage after stage (core/pipeline.py ``BuildStage``): the source splits, then the shards in
  contiguous ranges of at most ``SHARDS_PER_RUN`` (each range one run, which builds its shards in parallel), then
  the blend files. Each tick asks every step of the stage (``Step.not_done``); it waits while a run of the blend is
  queued or running. A job cannot do this (one job cannot span the three partitions definitions), and eager
  automation conditions wait for Dagster's 30-second backfill loop at each stage.
- a nightly schedule per kind of shards (`nightly_missing_shards_schedule`): at 02:00 it requests every shard
  partition that is not up to date by the one definition ``status`` and ``materialize`` use (core/records.py:
  missing, stale, or never planned), except those a run is building now, in contiguous ranges of at most
  ``SHARDS_PER_RUN``. Written by hand because ``build_schedule_from_partitioned_job`` rejects dynamic partitions.
- per blend, one automation-condition sensor ``<blend>__post_training_automation`` over every asset a pipeline
  rebuilds once its inputs changed (`rebuild_when_inputs_change_sensor`): when an upstream partition is
  materialized, the downstream ones are requested, and each step then rebuilds only what its receipts call stale.

They only read listings, receipts and the instance; the runs do the work.
"""

import hashlib
from collections.abc import Callable

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.partitions import SHARDS_PER_RUN, contiguous_ranges
from nemotron_assets.core.pipeline import BlendScope, Step, Target
from nemotron_assets.core.records import Freshness, read_manifest
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.run_history import partition_statuses
from nemotron_assets.core.runs import range_tags
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.discovery import listing_hash
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.manifest import SourceManifest

NIGHTLY_CRON = "0 2 * * *"
#: Whether one planned shard is up to date: (storage, the blend's base folder, manifest, shard index) -> freshness
ShardState = Callable[[Storage, str, SourceManifest, int], Freshness]


def shards_not_done(store: Storage, blend: Blend, keys: list[str], state_of: ShardState) -> list[str]:
    """The full build's shard ``keys`` that are not up to date (or have no plan)."""
    manifests: dict[str, SourceManifest | None] = {}
    wanted = []
    for key in keys:
        shard = ShardKey.parse(key)
        if shard.dataset not in manifests:
            try:
                manifests[shard.dataset] = read_manifest(store, blend.name, shard.dataset)
            except (FileNotFoundError, ValueError):
                manifests[shard.dataset] = None
        manifest = manifests[shard.dataset]
        if manifest is None or shard.index >= len(manifest.shards):
            wanted.append(key)
        elif not state_of(store, blend.name, manifest, shard.index).done:
            wanted.append(key)
    return wanted


def range_requests(asset_key: dg.AssetKey, keys: list[str], wanted: list[str]) -> list[dg.RunRequest]:
    """One run request per contiguous range of ``wanted`` (in ``keys`` order), at most ``SHARDS_PER_RUN`` each."""
    return [dg.RunRequest(run_key=f"{run[0]}...{run[-1]}", asset_selection=[asset_key], tags=range_tags(run))
            for run in contiguous_ranges(keys, wanted, SHARDS_PER_RUN)]


def nightly_missing_shards_schedule(name: str, blend: Blend, shard_asset: dg.AssetsDefinition, what: str,
                                    state_of: ShardState) -> dg.ScheduleDefinition:
    """``name``: ``<blend>__nightly_missing_shards`` and the like; ``what``: the shards' name in the description."""
    partitions_name = shard_asset.partitions_def.name

    @dg.schedule(cron_schedule=NIGHTLY_CRON, name=name, target=shard_asset,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description=f"Builds the {what} shards of {blend.name} that are missing, failed or stale, "
                             f"{SHARDS_PER_RUN} contiguous partitions per run.")
    def schedule(context: dg.ScheduleEvaluationContext, storage: StorageResource):
        keys = context.instance.get_dynamic_partitions(partitions_name)
        statuses = partition_statuses(context.instance, shard_asset.key, shard_asset.partitions_def, keys)
        idle = [key for key in keys if statuses[key] != "IN_PROGRESS"]  # not those queued or running
        try:
            wanted = shards_not_done(storage.get(), blend, idle, state_of)
        except InputError as exc:
            return dg.SkipReason(f"{blend.name}: {exc}")
        if not wanted:
            return dg.SkipReason(f"all {len(keys)} shard partition(s) of {blend.name} are up to date")
        return range_requests(shard_asset.key, keys, wanted)

    return schedule


def rebuild_when_inputs_change_sensor(blend: Blend, assets: list[dg.AssetsDefinition]
                                      ) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the assets' ``AutomationCondition`` (rebuild once inputs changed); stopped by default, so nothing
    runs by itself until you start it."""
    return dg.AutomationConditionSensorDefinition(
        f"{blend.name}__post_training_automation", target=assets, default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Rebuilds {blend.name}'s outputs after their inputs changed: "
                    f"{', '.join(asset.key.path[-1] for asset in assets)} (each step finds what is still up to date).")


BUILD_SENSOR_INTERVAL = 5  # seconds between the build sensor's ticks
IN_PROGRESS = (dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)


def build_sensor(blend_scope: BlendScope, staged: list[tuple[Step, dg.AssetsDefinition]]) -> dg.SensorDefinition:
    """``<blend>__build`` over the full build's ``staged`` steps (those with a ``build_stage``), with their assets.

    Each request has a run key made of what it builds and the state it was judged in (`build_state`), so a run that
    fails is not requested again, tick after tick, until something that could change its outcome changed: the blend
    file, a source listing, or a materialization of one of these assets. Materialize it by hand to retry sooner."""
    blend, blend_file = blend_scope.blend, blend_scope.blend_file
    stages = sorted({step.build_stage for step, _ in staged})
    names = ", ".join(step.asset for step, _ in staged)

    @dg.sensor(name=f"{blend.name}__build", minimum_interval_seconds=BUILD_SENSOR_INTERVAL,
               default_status=dg.DefaultSensorStatus.STOPPED, asset_selection=[asset for _, asset in staged],
               description=f"Builds what is missing or stale in {blend.name}, stage after stage ({names}): shards in "
                           f"runs of at most {SHARDS_PER_RUN} contiguous partitions. Waits while a run of "
                           f"{blend.name} is queued or running.")
    def sensor(context: dg.SensorEvaluationContext, storage: StorageResource):
        going = [run for run in context.instance.get_runs(filters=dg.RunsFilter(statuses=list(IN_PROGRESS)))
                 if any(key.path[0] == blend.name for key in run.asset_selection or ())]
        if going:
            return dg.SkipReason(f"waiting for {len(going)} run(s) of {blend.name} to end")
        target = Target(context.instance, storage.get(), blend, blend_scope.scope, blend_file=blend_file)
        try:
            state = build_state(target, [asset for _, asset in staged])
            for stage in stages:
                requests = [request for step, asset in staged if step.build_stage == stage
                            for request in step_requests(target, step, asset, state)]
                if requests:
                    return dg.SensorResult(run_requests=requests)
        except InputError as exc:
            return dg.SkipReason(f"{blend.name}: {exc}")
        return dg.SkipReason(f"every output of {blend.name} the sensor builds ({names}) is up to date")

    return sensor


def build_state(target: Target, assets: list[dg.AssetsDefinition]) -> str:
    """A short hash of what could change a run's outcome: the blend file, the listing of every source (the files'
    names, sizes and fingerprints), and the latest materialization of each of ``assets``."""
    digest = hashlib.sha256(target.blend_file.read_bytes())
    for entry in target.blend.entries():
        if not entry.path.startswith("hf://"):  # pinned by revision, in the blend file
            digest.update(listing_hash(entry, target.blend_file.parent).encode())
    for asset in assets:
        latest = target.instance.get_latest_materialization_event(asset.key)
        digest.update(f"{latest.run_id}@{latest.timestamp}".encode() if latest else b"never")
    return digest.hexdigest()[:16]


def step_requests(target: Target, step: Step, asset: dg.AssetsDefinition, state: str) -> list[dg.RunRequest]:
    """One run per contiguous range of the keys ``step`` has not done (at most ``SHARDS_PER_RUN`` for shards), or
    one run of an unpartitioned asset."""
    keys = step.not_done(target)
    name = asset.key.to_user_string()
    if not keys:
        return []
    if keys == [None]:
        return [dg.RunRequest(run_key=f"{name}@{state}", asset_selection=[asset.key])]
    partitions = asset.partitions_def
    order = (target.instance.get_dynamic_partitions(partitions.name)
             if isinstance(partitions, dg.DynamicPartitionsDefinition) else partitions.get_partition_keys())
    return [dg.RunRequest(run_key=f"{name}:{run[0]}...{run[-1]}@{state}", asset_selection=[asset.key],
                          tags=range_tags(run))
            for run in contiguous_ranges(order, keys, SHARDS_PER_RUN if step.ranges else len(order))]
