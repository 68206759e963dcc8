"""Sensor ``<blend>__new_source_files``: re-plan a dataset when its source files change.

It lists every dataset's source (a local file, folder or glob, or an ``s3://`` prefix, through
``sources/discovery.resolve_files``; ``hf://`` sources are pinned by revision and not watched). The cursor holds one
short hash per dataset of its (path, size, fingerprint) listing, so it stays small whatever the number of files; the
fingerprint is the ETag on S3 and the modification time on local disk. A dataset whose listing differs from the
cursor's (or that the cursor does not hold: an empty, unreadable or old cursor) is compared with its recorded plan
(manifest.json + stamps.json, defs/sources/manifest.py `unplanned_inputs`): it is re-planned (its
``<blend>/source_split`` requested) only when a file was added or removed, or one is not provably the one measured
(another size; locally another modification time; on S3 another ETag), or when it has no plan yet. So turning the
sensor on requests nothing while every file matches its plan. It never reads a file's contents: a file of the same
size with another modification time is left to the re-plan, which hashes that file alone. Re-planning registers the
dataset's new shard partitions. It only reads listings and the recorded plans; the runs do the work.
"""

import json

import dagster as dg

from nemotron_assets.core.pipeline import Assets, BlendScope, Target
from nemotron_assets.core.records import read_manifest
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.sources.manifest import measured_before, replan_reason, unplanned_inputs
from nemotron_assets.sources.discovery import files_listing_hash, resolve_files
from nemotron_assets.sources.errors import InputError


def new_source_files_sensor(blend_scope: BlendScope, assets: Assets) -> list[dg.SensorDefinition]:
    blend, blend_file = blend_scope.blend, blend_scope.blend_file
    watched = [e for e in blend.entries() if not e.path.startswith("hf://")]
    source_split = assets["source_split"]

    @dg.sensor(name=f"{blend.name}__new_source_files", target=source_split, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.STOPPED,
               description=f"Re-plans a dataset of {blend.name} (its source_split) when its source files no longer "
                           "match its recorded plan: a file added, removed, or with another size, modification "
                           "time or ETag. Never reads file contents.")
    def sensor(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SensorResult:
        seen = read_listing_cursor(context.cursor)
        store = storage.get()
        current, requests = {}, []
        for entry in watched:
            try:
                listed = resolve_files(entry, blend_file.parent).files
                current[entry.name] = files_listing_hash(listed)
                if seen.get(entry.name) == current[entry.name]:
                    continue
                changes = unplanned_inputs(listed, measured_before(store, blend.name, entry.name))
            except (InputError, OSError) as exc:  # e.g. the folder is gone: keep the last listing, say why
                context.log.warning(f"not watching {entry.name} this tick: {exc}")
                current.pop(entry.name, None)
                if entry.name in seen:
                    current[entry.name] = seen[entry.name]
                continue
            if changes:
                context.log.info(f"{entry.name}: re-planning, {len(changes)} file(s) differ from its plan: "
                                 + ", ".join(f"{url} ({what})" for url, what in changes[:5]))
                requests.append(dg.RunRequest(partition_key=entry.name, asset_selection=[source_split.key]))
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(current, sort_keys=True))

    return [sensor]


def read_listing_cursor(cursor: str | None) -> dict[str, str]:
    """The new-files sensor's cursor (dataset -> listing hash); empty when absent or not one (an old format,
    garbage): then every dataset is compared with its recorded plan."""
    try:
        seen = json.loads(cursor) if cursor else {}
    except ValueError:
        return {}
    return {k: v for k, v in seen.items() if isinstance(v, str)} if isinstance(seen, dict) else {}


def splits_not_done(target: Target) -> list[str]:
    """The datasets the build sensor splits again: no readable manifest, a manifest that is no longer the plan
    (manifest.py ``replan_reason``), or shard partitions that are not registered as planned (an instance that has
    not seen this output tree)."""
    wanted = []
    for entry in target.blend.entries():
        try:
            manifest = read_manifest(target.store, target.blend.name, entry.name)
        except (FileNotFoundError, ValueError):
            wanted.append(entry.name)
            continue
        registered = [key for key in target.registered(target.scope.dynamic_name(f"{entry.kind}_shards"))
                      if key.startswith(f"{entry.name}/")]
        if (len(registered) != len(manifest.shards)
                or replan_reason(target.blend, entry, target.blend_file.parent, manifest) is not None):
            wanted.append(entry.name)
    return wanted
