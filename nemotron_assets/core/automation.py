"""Automation every pipeline shares, all off until turned on (the UI's Automation page, or ``dagster schedule
start`` / ``dagster sensor start``):

- a nightly schedule per kind of shards (`nightly_missing_shards_schedule`): at 02:00 it requests every shard
  partition that is not up to date by the one definition ``status`` and ``materialize`` use (core/records.py:
  missing, stale, or never planned), except those a run is building now, in contiguous ranges of at most
  ``SHARDS_PER_RUN`` (each range one run, which builds its shards in parallel). Written by hand because
  ``build_schedule_from_partitioned_job`` rejects dynamic partitions.
- per blend, one automation-condition sensor ``<blend>__post_training_automation`` over every asset a pipeline
  rebuilds once its inputs changed (`rebuild_when_inputs_change_sensor`): when an upstream partition is
  materialized, the downstream ones are requested, and each step then rebuilds only what its receipts call stale.

They only read listings, receipts and the instance; the runs do the work.
"""

from collections.abc import Callable

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.partitions import SHARDS_PER_RUN, contiguous_ranges
from nemotron_assets.core.records import Freshness, read_manifest
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.run_history import partition_statuses
from nemotron_assets.core.runs import range_tags
from nemotron_assets.core.storage import Storage
from nemotron_assets.sources.errors import InputError
from nemotron_assets.sources.manifest import SourceManifest

NIGHTLY_CRON = "0 2 * * *"
#: Whether one planned shard is up to date: (storage, the blend's base folder, manifest, shard index) -> freshness
ShardState = Callable[[Storage, str, SourceManifest, int], Freshness]


def shards_not_done(instance: dg.DagsterInstance, store: Storage, blend: Blend, shard_asset: dg.AssetsDefinition,
                    keys: list[str], state_of: ShardState) -> list[str]:
    """The ``keys`` whose shard is not up to date (or has no plan), leaving out those a run is building now."""
    statuses = partition_statuses(instance, shard_asset.key, shard_asset.partitions_def, keys)
    manifests: dict[str, SourceManifest | None] = {}
    wanted = []
    for key in keys:
        if statuses[key] == "IN_PROGRESS":
            continue  # already queued or running
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
        try:
            wanted = shards_not_done(context.instance, storage.get(), blend, shard_asset, keys, state_of)
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
