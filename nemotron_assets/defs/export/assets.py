"""The asset ``<blend>/hf_export``: the blend's pools, packed SFT and JSONL as one Hugging Face folder (step.py).

It follows what it exports (``candidate_pool``, ``sft_packed``, ``jsonl_shard``: lineage in the UI, and in W&B with
lineage on) and is built only by ``python -m nemotron_assets export BLEND`` (or by hand in the UI): never by a plain
``materialize``, a sensor or a schedule (pipeline.py). The sample twins have no export.
"""

import dagster as dg
from pydantic import Field

from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.reporting import permanent_errors_fail_at_once, retry_transient_errors
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.export.lineage import log_export
from nemotron_assets.defs.export.step import CARD, Exported, hard_links, materialize_export
from nemotron_assets.defs.harmony.assets import RebuildConfig

EXPORTED = ("candidate_pool", "sft_packed", "jsonl_shard")


class ExportConfig(RebuildConfig):
    hf_dir: str | None = Field(None, description="The export folder: a local folder or an s3:// URL (default "
                                                 "<root>/<blend>/hf). An existing folder must be an export of this "
                                                 "blend.")


def build_export_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    blend, scope = blend_scope.blend, blend_scope.scope
    if scope.samples:
        return {}

    @dg.asset(
        key=scope.key("hf_export"), group_name=scope.group, kinds={"huggingface"},
        deps=[upstream[name] for name in EXPORTED if name in upstream],
        description="A Hugging Face dataset folder (default <root>/<blend>/hf/): one config per candidate pool, the "
                    "packed SFT and each JSONL dataset, the committed files hard-linked or copied as they are, and a "
                    "README.md dataset card. Built only by `python -m nemotron_assets export`.",
    )
    @retry_transient_errors
    def hf_export(context: dg.AssetExecutionContext, config: ExportConfig, storage: StorageResource,
                  lineage: WandbLineage):
        store = storage.get()
        with permanent_errors_fail_at_once():
            exported = materialize_export(store, blend, config.hf_dir, config.force, context.log.info)
        metadata = export_metadata(exported, hard_links(store, exported))
        context.log.info(f"{exported.folder.root}: {exported.outcome.status}, "
                         f"{len(exported.outcome.receipt.stats['configs'])} config(s)")
        log_export(lineage, context, store, blend.name, exported, metadata)
        return dg.MaterializeResult(metadata=metadata)

    return {"hf_export": hf_export}


def export_metadata(exported: Exported, linked: int) -> dict:
    stats = exported.outcome.receipt.stats
    return {
        "status": dg.MetadataValue.text(exported.outcome.status),
        "folder": dg.MetadataValue.path(exported.folder.root),
        "card": dg.MetadataValue.path(exported.folder.url(CARD)),
        "configs": dg.MetadataValue.json(stats["configs"]),
        "licenses": dg.MetadataValue.json(stats["licenses"]),
        "files": dg.MetadataValue.int(stats["files"]),
        "hard_links": dg.MetadataValue.int(linked),
        "bytes": dg.MetadataValue.int(stats["bytes"]),
    }
