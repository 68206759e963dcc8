"""Sensor ``<blend>__new_source_files``: re-plan a dataset when its source files change.

It lists every dataset's source (a local file, folder or glob, or an ``s3://`` prefix, through
``sources/discovery.listing_hash``; ``hf://`` sources are pinned by revision and not watched) and requests a
``<blend>/source_split`` run for each dataset whose listing changed. The cursor holds one short hash per dataset of
its (path, size, fingerprint) list, so it stays small whatever the number of files. The fingerprint is the ETag on
S3 and the modification time on local disk (a listing never reads file contents). Re-planning registers the
dataset's new shard partitions. It only reads listings; the runs do the work.
"""

import json

import dagster as dg

from nemotron_assets.core.pipeline import Assets, BlendScope, Target
from nemotron_assets.core.records import read_manifest
from nemotron_assets.defs.sources.manifest import replan_reason
from nemotron_assets.sources.discovery import listing_hash
from nemotron_assets.sources.errors import InputError


def new_source_files_sensor(blend_scope: BlendScope, assets: Assets) -> list[dg.SensorDefinition]:
    blend, blend_file = blend_scope.blend, blend_scope.blend_file
    watched = [e for e in blend.entries() if not e.path.startswith("hf://")]
    source_split = assets["source_split"]

    @dg.sensor(name=f"{blend.name}__new_source_files", target=source_split, minimum_interval_seconds=60,
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
                requests.append(dg.RunRequest(partition_key=entry.name, asset_selection=[source_split.key]))
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(current, sort_keys=True))

    return [sensor]


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
