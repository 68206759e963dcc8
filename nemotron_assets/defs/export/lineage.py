"""W&B lineage of the export (core/lineage.py says how lineage works): each hf_export run uses the artifacts the
exported sets' own runs logged (``<blend>-pool-<pool>``, ``<blend>-sft``, ``<blend>-jsonl``, made here from the same
files, so they are the same versions) and logs ``<blend>-hf`` (type hf-export: README.md and the receipt,
checksummed, and the data files by reference)."""

import dagster as dg

from nemotron_assets.core.lineage import WandbLineage, files_artifact, reference
from nemotron_assets.core.records import read_receipt, receipt_path
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.export.step import CARD, CARD_PREFIX, Exported
from nemotron_assets.defs.harmony.lineage import pool_artifact
from nemotron_assets.defs.jsonl.lineage import manifest_artifact
from nemotron_assets.defs.sft.layout import SftShardKey, sft_dir, sft_manifest_prefix, sft_packed_prefix
from nemotron_assets.defs.sft.lineage import sft_artifact


def log_export(lineage: WandbLineage, context: dg.AssetExecutionContext, store: Storage, blend: str,
               exported: Exported, metadata: dict) -> None:
    kinds = {s.kind for s in exported.sets}

    def used() -> list:
        artifacts = [pool_artifact(store, blend, s.config.removeprefix("pool_")) for s in exported.sets
                     if s.kind == "pool"]
        manifest = read_receipt(store, sft_manifest_prefix(blend)) if "sft" in kinds else None
        if manifest is not None:
            files = [f"{sft_dir(blend)}/{name}" for name in manifest.files]
            files.append(receipt_path(sft_manifest_prefix(blend)))
            shards = [sft_packed_prefix(blend, SftShardKey.parse(key)) for key in manifest.inputs["shards"]]
            artifacts.append(sft_artifact(store, blend, {}, files, shards))
        if "jsonl" in kinds:
            artifacts.append(manifest_artifact(store, blend, {}))
        return artifacts

    def logged() -> list:
        folder = exported.folder
        references = [reference(folder, CARD, checksum=True),
                      reference(folder, receipt_path(CARD_PREFIX), checksum=True),
                      *(reference(folder, f.path, checksum=False) for s in exported.sets for f in s.files())]
        return [files_artifact(f"{blend}-hf", "hf-export", {"dagster_run_id": context.run_id, **metadata}, references)]

    lineage.log(context, blend, "hf_export", used=used, logged=logged)
