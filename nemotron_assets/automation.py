"""Automation of one blend: re-plan a dataset when its source files change, build missing shards nightly.

- Sensor ``<blend>__new_source_files`` lists every dataset's source (local file/folder/glob or ``s3://``
  prefix, through ``sources/discovery.resolve_files``; ``hf://`` sources are pinned by revision and not
  watched) and requests a ``<blend>/source_split`` run for each dataset whose listing changed. The cursor
  holds one short hash per dataset of its (path, size, fingerprint) list, so it stays small whatever the
  number of files. The fingerprint is the ETag on S3 and the modification time on local disk (a listing
  never reads file contents). Re-planning registers the dataset's new shard partitions.
- Schedule ``<blend>__nightly_missing_shards`` (02:00, off until turned on) requests every shard partition
  that is not materialized, whose latest run failed, or that is stale (its dataset's ``source_split`` was
  materialized after it). Runs cover at most 16 contiguous partitions, like the CLI and the backfill
  policy, because a run per shard costs seconds of overhead. It is written by hand because
  ``build_schedule_from_partitioned_job`` rejects dynamic partitions. A stale shard whose input did not
  actually change is reported "up to date" by its run, not rebuilt.

Both only read listings and the instance; the runs do the work.
"""

import hashlib
import json
import os
from pathlib import Path

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from nemotron_assets.assets.pretrain import SHARDS_PER_RUN, PretrainAssets
from nemotron_assets.blend import Blend, DatasetEntry
from nemotron_assets.errors import InputError
from nemotron_assets.layout import ShardKey
from nemotron_assets.runner import contiguous_ranges
from nemotron_assets.sources.discovery import resolve_files
from nemotron_assets.status import partition_statuses

NIGHTLY_CRON = "0 2 * * *"


def listing_hash(entry: DatasetEntry, base_dir: Path) -> str:
    """A short hash of the dataset's current file listing: changes when a file appears, goes or changes."""
    listing = []
    for source in resolve_files(entry, base_dir).files:
        fingerprint = source.fingerprint or str(os.stat(source.url).st_mtime_ns)  # local: no ETag
        listing.append([source.url, source.size, fingerprint])
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


def new_source_files_sensor(blend: Blend, blend_file: Path, pipeline: PretrainAssets) -> dg.SensorDefinition:
    watched = [e for e in blend.entries() if not e.path.startswith("hf://")]
    source_split = pipeline.source_split.key

    @dg.sensor(name=f"{blend.name}__new_source_files", target=pipeline.source_split, minimum_interval_seconds=60,
               description=f"Re-plans a dataset of {blend.name} (its source_split) when its source files change.")
    def sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        seen = json.loads(context.cursor) if context.cursor else {}
        current, requests = {}, []
        for entry in watched:
            try:
                current[entry.name] = listing_hash(entry, blend_file.parent)
            except InputError as exc:  # e.g. the folder is gone: keep the last listing, say why
                context.log.warning(f"not watching {entry.name} this tick: {exc}")
                if entry.name in seen:
                    current[entry.name] = seen[entry.name]
                continue
            if seen.get(entry.name) != current[entry.name]:
                requests.append(dg.RunRequest(partition_key=entry.name, asset_selection=[source_split]))
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(current, sort_keys=True))

    return sensor


def shards_to_build(instance: dg.DagsterInstance, pipeline: PretrainAssets, keys: list[str]) -> list[str]:
    """The ``keys`` that are not materialized, failed last time, or are older than their dataset's plan."""
    statuses = partition_statuses(instance, pipeline.pretrain_shard.key, pipeline.shard_partitions, keys)
    event = dg.DagsterEventType.ASSET_MATERIALIZATION
    planned_at = instance.get_latest_storage_id_by_partition(pipeline.source_split.key, event)
    built_at = instance.get_latest_storage_id_by_partition(pipeline.pretrain_shard.key, event)
    wanted = []
    for key in keys:
        status = statuses[key]
        if status == "IN_PROGRESS":
            continue  # already queued or running
        stale = planned_at.get(ShardKey.parse(key).dataset, -1) > built_at.get(key, -1)
        if status in (None, "FAILED") or stale:
            wanted.append(key)
    return wanted


def nightly_missing_shards_schedule(blend: Blend, pipeline: PretrainAssets) -> dg.ScheduleDefinition:
    shard_asset = pipeline.pretrain_shard.key

    @dg.schedule(cron_schedule=NIGHTLY_CRON, name=f"{blend.name}__nightly_missing_shards",
                 target=pipeline.pretrain_shard, default_status=dg.DefaultScheduleStatus.STOPPED,
                 description=f"Builds the shards of {blend.name} that are missing, failed or stale, "
                             f"{SHARDS_PER_RUN} contiguous partitions per run.")
    def schedule(context: dg.ScheduleEvaluationContext):
        keys = context.instance.get_dynamic_partitions(pipeline.shard_partitions.name)
        wanted = shards_to_build(context.instance, pipeline, keys)
        if not wanted:
            return dg.SkipReason(f"all {len(keys)} shard partition(s) of {blend.name} are materialized and current")
        return [dg.RunRequest(run_key=f"{run[0]}...{run[-1]}", asset_selection=[shard_asset],
                              tags={ASSET_PARTITION_RANGE_START_TAG: run[0], ASSET_PARTITION_RANGE_END_TAG: run[-1]})
                for run in contiguous_ranges(keys, wanted, SHARDS_PER_RUN)]

    return schedule


def blend_automation(blends: list[tuple[Path, Blend]], pipelines: dict[str, PretrainAssets]
                     ) -> tuple[list[dg.SensorDefinition], list[dg.ScheduleDefinition]]:
    """The sensor and the schedule of every blend, for ``Definitions(sensors=..., schedules=...)``."""
    sensors = [new_source_files_sensor(blend, path, pipelines[blend.name]) for path, blend in blends]
    schedules = [nightly_missing_shards_schedule(blend, pipelines[blend.name]) for _, blend in blends]
    return sensors, schedules
