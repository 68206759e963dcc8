"""The pretraining path of one blend, for its datasets that name neither a ``family`` nor a ``transform``:

    source_split (defs/sources/)
        -> pretrain_shard (one partition per dataset shard, ``<dataset>/shard_NNNNN``, with its three checks)
        -> megatron_blend (blend.json + data_path.txt)

``pretrain_shard`` is shard.py, top to bottom: the asset, what decides a shard's bytes, and how a shard is built.
``megatron_blend`` is here, its files' contents in blend_files.py. The same factory builds the sample twins
(core/partitions.py).
"""

import dagster as dg
from pydantic import Field

from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.reporting import permanent_errors_fail_at_once
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.step import Staged, adopt, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.blend_files import BLEND_FILES, BlendListing, blend_files_output
from nemotron_assets.defs.pretrain.layout import pretrain_dir
from nemotron_assets.defs.pretrain.lineage import log_blend_lineage
from nemotron_assets.defs.pretrain.shard import PretrainSettings, pretrain_shard_asset
from nemotron_assets.formats import megatron
from nemotron_assets.sources.manifest import SourceManifest


class MegatronBlendConfig(dg.Config):
    force: bool = Field(False, description="Write the blend files even when their receipt says they are up to date.")
    allow_missing_shards: bool = Field(False, description="Write the blend even if planned shards are missing "
                                                          "(stale shards are always refused).")


def build_pretrain_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """``pretrain_shard`` and ``megatron_blend`` of one blend's full build (or of its samples)."""
    blend, scope = blend_scope.blend, blend_scope.scope
    pretrain_shard = pretrain_shard_asset(blend_scope, upstream)

    @dg.asset(
        key=scope.key("megatron_blend"), group_name=scope.group, partitions_def=scope.partitions("blend", None),
        deps=[pretrain_shard], kinds={"json"},
        description="Megatron-Bridge blend.json (train, valid and test) and the equivalent --data-path arguments; "
                    "lists only up-to-date, non-empty shards.",
    )
    def megatron_blend(context: dg.AssetExecutionContext, config: MegatronBlendConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        base = scope.base(scope.sample_of(context))
        with permanent_errors_fail_at_once():
            manifests, metadata = write_megatron_blend(store, BlendListing.of(blend), PretrainSettings.of(blend), base,
                                                       config.allow_missing_shards, config.force, context.log.info)
        if not scope.samples:
            log_blend_lineage(lineage, context, store, blend.name, metadata, manifests)
        return dg.MaterializeResult(metadata=metadata)

    return {"pretrain_shard": pretrain_shard, "megatron_blend": megatron_blend}


# --- the steps ----------------------------------------------------------------------------------------------
def write_megatron_blend(store: Storage, listing: BlendListing, settings: PretrainSettings, base: str,
                         allow_missing: bool, force: bool = False, log=print) -> tuple[dict[str, SourceManifest], dict]:
    """blend.json + data_path.txt of the shards under ``base``; refuses stale shards, naming them."""
    manifests, files, output = blend_files_output(store, listing, settings, base, allow_missing)

    contents = {name: files.outputs[f"{pretrain_dir(base)}/{name}"] for name in BLEND_FILES}
    stats = {"shards": files.shards_listed, "tokens_by_split": files.tokens_by_split}

    def write(staging) -> Staged:
        for name, data in contents.items():
            (staging / name).write_bytes(data)
        return Staged({name: staging / name for name in BLEND_FILES}, stats)

    # Trees written before the blend files had a receipt hold the same bytes: adopt them rather than rewrite them.
    outcome = (None if force else adopt(store, output, contents, stats)) or build_output(store, output, write, force,
                                                                                        log)
    data_path = files.outputs[f"{pretrain_dir(base)}/data_path.txt"].decode()
    metadata = {
        "status": dg.MetadataValue.text(outcome.status),
        "blend_json": dg.MetadataValue.path(store.url(f"{pretrain_dir(base)}/blend.json")),
        "data_path": dg.MetadataValue.md(f"```\n{data_path}```"),
        "shards": dg.MetadataValue.int(files.shards_listed),
        "empty_shards_left_out": dg.MetadataValue.int(files.empty_left_out),
        "missing_shards_left_out": dg.MetadataValue.int(files.missing_left_out),
        "tokens_by_split": dg.MetadataValue.json(files.tokens_by_split),
        "blend": dg.MetadataValue.json(megatron.blend_json(files.splits)),
    }
    return manifests, metadata


