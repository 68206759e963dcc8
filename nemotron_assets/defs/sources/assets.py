"""``<blend>/source_split``: one partition per dataset of the blend, whatever path the dataset then takes.

    source_split (one partition per dataset)  -> the shards of every other pipeline

The step checks what can be checked without reading (preflight.py), measures and plans the dataset (manifest.py;
files unchanged since the last measurement are not read again), writes ``<base>/sources/<dataset>/manifest.json``
and the input files' modification times (``stamps.json``), and registers the dataset's shard partitions in the dynamic
partitions set of its path (``<blend>__pretrain_shards``, ``__harmony_shards`` or ``__jsonl_shards``), one
contiguous block per dataset, so a partition range ``<dataset>/shard_00000...<dataset>/shard_NNNNN`` covers exactly
that dataset (core/partitions.py ``register_block``).
"""

import dagster as dg

from nemotron_assets.core.layout import ShardKey, input_stamps_path, sample_rows
from nemotron_assets.core.partitions import register_block
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.records import write_manifest
from nemotron_assets.core.reporting import materialize_partitions, partitioned_asset
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.defs.sources.manifest import measure_dataset, measured_before
from nemotron_assets.defs.sources.preflight import check_before_reading
from nemotron_assets.sources.manifest import SourceManifest


def build_sources_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """``source_split`` of one blend's full build (or, with a samples scope, of its samples)."""
    blend, blend_file, scope = blend_scope.blend, blend_scope.blend_file, blend_scope.scope
    datasets = scope.partitions("datasets", dg.StaticPartitionsDefinition([e.name for e in blend.entries()]))
    asset_key = dg.AssetKey(scope.key("source_split"))

    @partitioned_asset(
        scope.key("source_split"), group=scope.group, partitions_def=datasets, kinds={"python"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Resolves a dataset to an immutable file manifest (path, size, hash/ETag, rows) and plans "
                    "its shards; registers the shard partitions.",
    )
    def source_split(context: dg.AssetExecutionContext, storage: StorageResource):
        store = storage.get()

        def plan_dataset(partition: str) -> dict:
            sample, dataset = scope.split(partition)
            entry = blend.entry(dataset)
            check_before_reading(blend, blend_file, [dataset])
            base = scope.base(sample)
            max_rows = sample_rows(sample) if sample else None
            measured = measure_dataset(blend, entry, blend_file.parent, max_rows,
                                       known=measured_before(store, base, dataset))
            manifest = measured.manifest
            relative = write_manifest(store, base, manifest)
            store.write_bytes(input_stamps_path(base, dataset), measured.stamps_bytes())
            register_shards(context.instance, scope.dynamic_name(f"{entry.kind}_shards"),
                            scope.qualify(sample, f"{dataset}/"), manifest,
                            lambda key: scope.qualify(sample, key))
            context.log.info(f"{partition}: {len(manifest.files)} file(s), {manifest.total_rows:,} rows, "
                             f"{len(manifest.shards)} shard(s)")
            return manifest_metadata(manifest, store.url(relative))

        yield from materialize_partitions(context, asset_key, context.partition_keys, plan_dataset)

    return {"source_split": source_split}


def register_shards(instance: dg.DagsterInstance, partitions_name: str, prefix: str, manifest: SourceManifest,
                    qualify) -> None:
    """The dataset's shard partitions: one contiguous block matching its plan (core/partitions.py)."""
    wanted = [qualify(str(ShardKey(manifest.dataset, shard.index))) for shard in manifest.shards]
    register_block(instance, partitions_name, prefix, wanted)


def manifest_metadata(manifest: SourceManifest, url: str) -> dict:
    schema = dg.TableSchema(columns=[
        dg.TableColumn("path", "string"), dg.TableColumn("bytes", "int"), dg.TableColumn("rows", "int"),
        dg.TableColumn("format", "string"), dg.TableColumn("fingerprint", "string")])
    records = [dg.TableRecord({"path": f.url, "bytes": f.size, "rows": f.rows,
                               "format": f.format + (f"+{f.compression}" if f.compression else ""),
                               "fingerprint": f.fingerprint}) for f in manifest.files[:500]]
    plan = ["| shard | rows | ranges (file: rows) |", "|---:|---:|:---|"]
    for shard in manifest.shards[:200]:
        ranges = ", ".join(f"{r.file_index}: {r.row_start:,}–{r.row_end:,}" for r in shard.ranges) or "empty"
        plan.append(f"| {shard.index} | {shard.rows:,} | {ranges} |")
    return {
        "manifest": dg.MetadataValue.path(url),
        "files": dg.MetadataValue.table(records, schema=schema),
        "file_count": dg.MetadataValue.int(len(manifest.files)),
        "bytes": dg.MetadataValue.int(manifest.total_bytes),
        "rows": dg.MetadataValue.int(manifest.total_rows),
        "shards": dg.MetadataValue.int(len(manifest.shards)),
        "shard_plan": dg.MetadataValue.md("\n".join(plan)),
        "revision": dg.MetadataValue.text(manifest.revision or ""),
        "max_rows": dg.MetadataValue.int(manifest.max_rows) if manifest.max_rows is not None
        else dg.MetadataValue.text("all"),
    }

