"""What one ``materialize`` command made, read back from its Dagster runs: the ``--json`` document (and the Python
API's return value, ``nemotron_assets.materialize``), the rows ``on_error: skip`` left out, the failed asset checks.

Every step records each partition it materialized (built, or found up to date) as an ``AssetMaterialization`` whose
metadata names the files it wrote as path values (absolute paths, or ``s3://`` URLs on an S3 root) and counts its
rows, tokens, samples. The document gathers them per asset, in the words of ``status --json``, and adds that status
of the blend after the runs (cli/reports.py, the same object ``status BLEND --json`` prints)::

    {"blend": "sample", "sample": null, "ok": true, "exit_status": 0, "error": "",
     "root": "/data/sample", "blend_json": "/data/sample/pretrain/blend.json",
     "manifests": ["/data/sample/sources/wiki/manifest.json", ...],
     "runs": [{"run_id": "...", "asset": "pretrain_shard", "partitions": ["wiki/shard_00000", "code/shard_00000"],
               "success": true, "error": "", "seconds": 5.3}, ...],
     "assets": {"pretrain_shard": {"built": ["wiki/shard_00000", ...], "up_to_date": [],
                                   "outputs": ["/data/sample/pretrain/wiki/shard_00000", ...],
                                   "counts": {"rows": 623, "documents": 623, "tokens": 101243}}, ...},
     "skipped_rows": 0, "failed_checks": [], "interrupted": "", "status": {"blend": "sample", "datasets": [...], ...}}

A run's ``partitions`` are the first and last of its range (all of them when there are two or fewer). ``error`` is
every failed run's located error (the lines the command prints last), "" on success.
"""

from pathlib import Path

import dagster as dg

from nemotron_assets.cli.reports import collect_status
from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import base_dir
from nemotron_assets.core.runs import RunOutcome
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.registry import PIPELINES

#: The counts a materialization's metadata may hold that the document sums per asset (status's words).
COUNTED = ("rows", "documents", "tokens", "samples", "bins", "written")
#: Path metadata that names a blend file or a manifest (what the next step of a recipe reads).
BLEND_JSON, MANIFEST = "blend_json", "manifest"
UP_TO_DATE = "up to date"  # a materialization's ``status`` when the step found its output done


def located_errors(outcomes: list[RunOutcome]) -> str:
    """Every failed run's located error, one paragraph each, as the command prints them last."""
    return "\n\n".join(f"error in run {o.run_id} ({o.asset}{_span(o)}):\n"
                       + "\n".join(f"  {line}" for line in o.error.splitlines())
                       for o in outcomes if not o.success)


def _span(outcome: RunOutcome) -> str:
    return f" {outcome.partitions[0]}...{outcome.partitions[-1]}" if outcome.partitions else ""


def materializations(instance: dg.DagsterInstance, run_ids: list[str]) -> list[tuple[str, str | None, dict]]:
    """(asset name, partition, metadata values) of every materialization these runs recorded, in order."""
    found = []
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            materialization = record.dagster_event.event_specific_data.materialization
            found.append((materialization.asset_key.path[-1], materialization.partition, materialization.metadata))
    return found


def skipped_rows(instance: dg.DagsterInstance, run_ids: list[str]) -> int:
    """Rows skipped (``on_error: skip``) by the shards these runs built, from their materialization metadata."""
    counted = {step.asset for pipeline in PIPELINES for step in pipeline.steps if step.skips_rows}
    total = 0
    for asset, _, metadata in materializations(instance, run_ids):
        values = {k: v.value for k, v in metadata.items()}
        if asset in counted and values.get("status") != UP_TO_DATE:
            total += sum(int(n) for n in (values.get("dropped_by_reason") or {}).values())
    return total


def failed_asset_checks(instance: dg.DagsterInstance, run_ids: list[str]) -> list[str]:
    """One line per asset check these runs evaluated as failed: asset, partition, check, what it found. A failed
    check does not fail its Dagster run, so without this the command would end "done" over a bad output."""
    lines = []
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            evaluation = record.dagster_event.event_specific_data
            if evaluation.passed:
                continue
            metadata = {k: v.value for k, v in evaluation.metadata.items()}
            found = f": {metadata['first']}" if metadata.get("first") else ""
            partition = f" {evaluation.partition}" if evaluation.partition else ""
            lines.append(f"{evaluation.asset_key.to_user_string()}{partition} {evaluation.check_name}{found}")
    return lines


def assets_made(instance: dg.DagsterInstance, run_ids: list[str], sample: str | None
                ) -> tuple[dict[str, dict], str | None, list[str]]:
    """Per asset: the partitions built and found up to date (the full build's keys, also for a sample; "" for an
    unpartitioned asset, as in ``status``), the files and folders named, the summed counts; and the blend file and
    manifests among them."""
    assets: dict[str, dict] = {}
    blend_json, manifests = None, []
    for asset, partition, metadata in materializations(instance, run_ids):
        made = assets.setdefault(asset, {"built": [], "up_to_date": [], "outputs": [], "counts": {}})
        values = {name: value.value for name, value in metadata.items()}
        key = "" if partition in (None, sample) else partition.removeprefix(f"{sample}/" if sample else "")
        made["up_to_date" if values.get("status") == UP_TO_DATE else "built"].append(key)
        for name, value in metadata.items():
            if not isinstance(value, dg.PathMetadataValue):
                continue
            made["outputs"].append(value.value)
            if name == BLEND_JSON:
                blend_json = value.value
            elif name == MANIFEST:
                manifests.append(value.value)
        for name in COUNTED:
            if isinstance(values.get(name), int):
                made["counts"][name] = made["counts"].get(name, 0) + values[name]
    return assets, blend_json, manifests


def result_document(instance: dg.DagsterInstance, store: Storage, blend: Blend, blend_file: Path,
                    sample: str | None, outcomes: list[RunOutcome], exit_status: int, interrupted: str = ""
                    ) -> dict:
    """The document (module docstring) of a command that ran ``outcomes`` and ends with ``exit_status``."""
    run_ids = [o.run_id for o in outcomes]
    assets, blend_json, manifests = assets_made(instance, run_ids, sample)
    return {
        "blend": blend.name, "sample": sample, "ok": exit_status == 0, "exit_status": exit_status,
        "error": located_errors(outcomes) or (f"interrupted by {interrupted}" if interrupted else ""),
        "root": store.url(base_dir(blend.name, sample)), "blend_json": blend_json, "manifests": manifests,
        "runs": [{"run_id": o.run_id, "asset": o.asset, "partitions": list(dict.fromkeys(o.partitions[:1]
                  + o.partitions[-1:])), "success": o.success, "error": o.error, "seconds": round(o.seconds, 3)}
                 for o in outcomes],
        "assets": assets, "skipped_rows": skipped_rows(instance, run_ids),
        "failed_checks": failed_asset_checks(instance, run_ids), "interrupted": interrupted,
        "status": collect_status(instance, store, blend, blend_file).as_json(),
    }


def error_document(blend: str, message: str, exit_status: int) -> dict:
    """The document of a command refused before any run (a bad blend, setting or command line: exit status 2)."""
    return {"blend": blend, "sample": None, "ok": False, "exit_status": exit_status, "error": message, "root": None,
            "blend_json": None, "manifests": [], "runs": [], "assets": {}, "skipped_rows": 0, "failed_checks": [],
            "interrupted": "", "status": None}
