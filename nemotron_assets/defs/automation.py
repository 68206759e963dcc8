"""Automation of one blend: re-plan a dataset when its source files change, build missing shards nightly.

- Sensor ``<blend>__new_source_files`` lists every dataset's source (local file/folder/glob or ``s3://``
  prefix, through ``sources/discovery.resolve_files``; ``hf://`` sources are pinned by revision and not
  watched) and requests a ``<blend>/source_split`` run for each dataset whose listing changed. The cursor
  holds one short hash per dataset of its (path, size, fingerprint) list, so it stays small whatever the
  number of files. The fingerprint is the ETag on S3 and the modification time on local disk (a listing
  never reads file contents). Re-planning registers the dataset's new shard partitions.
- Schedule ``<blend>__nightly_missing_shards`` (02:00, off until turned on) requests every shard partition
  that is not up to date by the one definition ``status`` and ``materialize`` use (records.py: missing, stale
  or failed), except those a run is building now. Runs cover at most ``SHARDS_PER_RUN`` contiguous partitions,
  like the CLI and the backfill policy, because a run per shard costs seconds of overhead. It is written by
  hand because ``build_schedule_from_partitioned_job`` rejects dynamic partitions. A blend with Harmony
  datasets gets the same schedule for its Harmony shards, ``<blend>__nightly_missing_harmony_shards``, and one with
  JSONL (transform) datasets for its JSONL shards, ``<blend>__nightly_missing_jsonl_shards``.
- Sensor ``<blend>__post_training_automation`` (off until turned on) evaluates the eager automation condition
  of the dedup results, pools, embedding views and behavior report (and, with an ``sft:`` section, the SFT samples,
  plan, packed shards and manifest; with a ``scoring:`` section, the NLL scores, embeddings, selections and
  near-duplicate report): once their upstream shards were rebuilt, it requests them, and each step
  rebuilds only what its receipts call stale.

All of them only read listings and the instance; the runs do the work.
"""

import hashlib
import json
import os
from pathlib import Path

import dagster as dg

# Private: the partition-range tag names have no public constant in Dagster 1.13 (a run of several partitions is
# requested by these two tags, as `dagster asset materialize --partition-range` does).
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from nemotron_assets.cli.status_report import HARMONY, JSONL, PRETRAIN, ShardKind, harmony_freshness, shard_freshness
from nemotron_assets.core.blend import Blend, DatasetEntry
from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.partitions import SHARDS_PER_RUN, contiguous_ranges
from nemotron_assets.core.records import SourceManifest, read_manifest
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.run_history import partition_statuses
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.assets import HarmonyAssets
from nemotron_assets.defs.jsonl.assets import JsonlAssets
from nemotron_assets.defs.jsonl.steps import jsonl_freshness
from nemotron_assets.defs.pretrain.assets import PretrainAssets
from nemotron_assets.defs.pretrain.inputs import blend_tokenizer_identity
from nemotron_assets.defs.scoring.assets import ScoringAssets
from nemotron_assets.defs.sft.assets import SftAssets
from nemotron_assets.sources.discovery import resolve_files
from nemotron_assets.sources.errors import InputError

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


def shards_to_build(instance: dg.DagsterInstance, store: Storage, blend: Blend, kind: ShardKind,
                    shard_asset: dg.AssetsDefinition, partitions: dg.DynamicPartitionsDefinition,
                    keys: list[str]) -> list[str]:
    """The ``keys`` whose shard is not up to date (or has no plan), leaving out those being built now."""
    statuses = partition_statuses(instance, shard_asset.key, partitions, keys)
    tokenizer = blend_tokenizer_identity(blend) if kind is PRETRAIN else None
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
            continue
        if kind is PRETRAIN:
            state = shard_freshness(store, blend, blend.name, manifest, shard.index, tokenizer)
        elif kind is JSONL:
            state = jsonl_freshness(store, blend, blend.name, manifest, shard.index)
        else:
            state = harmony_freshness(store, blend, blend.name, manifest, shard.index)
        if not state.done:
            wanted.append(key)
    return wanted


def nightly_missing_shards_schedule(blend: Blend, kind: ShardKind, shard_asset: dg.AssetsDefinition,
                                    partitions: dg.DynamicPartitionsDefinition) -> dg.ScheduleDefinition:
    """Pretraining shards: ``<blend>__nightly_missing_shards``; Harmony shards:
    ``<blend>__nightly_missing_harmony_shards``; JSONL shards: ``<blend>__nightly_missing_jsonl_shards``."""
    suffix = "nightly_missing_shards" if kind is PRETRAIN else f"nightly_missing_{kind.path}_shards"
    name = f"{blend.name}__{suffix}"

    @dg.schedule(cron_schedule=NIGHTLY_CRON, name=name, target=shard_asset,
                 default_status=dg.DefaultScheduleStatus.STOPPED,
                 description=f"Builds the {kind.path} shards of {blend.name} that are missing, failed or stale, "
                             f"{SHARDS_PER_RUN} contiguous partitions per run.")
    def schedule(context: dg.ScheduleEvaluationContext, storage: StorageResource):
        keys = context.instance.get_dynamic_partitions(partitions.name)
        try:
            wanted = shards_to_build(context.instance, storage.get(), blend, kind, shard_asset, partitions, keys)
        except InputError as exc:
            return dg.SkipReason(f"{blend.name}: {exc}")
        if not wanted:
            return dg.SkipReason(f"all {len(keys)} shard partition(s) of {blend.name} are up to date")
        return [dg.RunRequest(run_key=f"{run[0]}...{run[-1]}", asset_selection=[shard_asset.key],
                              tags={ASSET_PARTITION_RANGE_START_TAG: run[0], ASSET_PARTITION_RANGE_END_TAG: run[-1]})
                for run in contiguous_ranges(keys, wanted, SHARDS_PER_RUN)]

    return schedule


def post_training_automation_sensor(blend: Blend, harmony: HarmonyAssets, sft: SftAssets | None = None,
                                    scoring: ScoringAssets | None = None) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the post-training assets' ``AutomationCondition`` (rebuild once inputs changed); stopped by
    default, so nothing runs by itself until you start it (UI: Automation, or ``dagster sensor start``)."""
    target = (harmony.rebuilt_when_inputs_change + (sft.rebuilt_when_inputs_change if sft else [])
              + (scoring.rebuilt_when_inputs_change if scoring else []))
    return dg.AutomationConditionSensorDefinition(
        f"{blend.name}__post_training_automation", target=target,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description=f"Rebuilds {blend.name}'s dedup results, pools, views and behavior report"
                    + (" and packed SFT" if sft else "") + (" and scores" if scoring else "")
                    + " after their inputs changed (each step finds what is still up to date).")


def blend_automation(
        blends: list[tuple[Path, Blend]], pipelines: dict[str, PretrainAssets], harmony: dict[str, HarmonyAssets],
        jsonl: dict[str, JsonlAssets] | None = None, sft: dict[str, SftAssets] | None = None,
        scoring: dict[str, ScoringAssets] | None = None,
) -> tuple[list[dg.SensorDefinition], list[dg.ScheduleDefinition]]:
    """The sensors and schedules of every blend, for ``Definitions(sensors=..., schedules=...)``: the new-files
    sensor, a nightly schedule per kind of shards the blend has, and the post-training automation sensor."""
    sensors: list[dg.SensorDefinition] = [new_source_files_sensor(blend, path, pipelines[blend.name])
                                          for path, blend in blends]
    schedules = []
    for _, blend in blends:
        pipeline = pipelines[blend.name]
        if pipeline.has_text_datasets:
            schedules.append(nightly_missing_shards_schedule(blend, PRETRAIN, pipeline.pretrain_shard,
                                                             pipeline.shard_partitions))
        if blend.name in harmony:
            assets = harmony[blend.name]
            schedules.append(nightly_missing_shards_schedule(blend, HARMONY, assets.harmony_shard,
                                                             assets.shard_partitions))
            sensors.append(post_training_automation_sensor(blend, assets, (sft or {}).get(blend.name),
                                                           (scoring or {}).get(blend.name)))
        if jsonl and blend.name in jsonl:
            schedules.append(nightly_missing_shards_schedule(blend, JSONL, jsonl[blend.name].jsonl_shard,
                                                             jsonl[blend.name].shard_partitions))
    return sensors, schedules
