"""The pretraining path of one blend, as Dagster assets:

    source_split (one partition per dataset)
        -> pretrain_shard (one partition per dataset shard, ``<dataset>/shard_NNNNN``)
        -> megatron_blend (blend.json + data_path.txt)

Each asset resolves its inputs, calls pure code (``sources/``, ``pretrain/``, ``formats/``), commits
files through the storage resource and reports metadata. Shard partitions are dynamic because a dataset's
shard count comes from its size, known only once its files are listed: ``source_split`` registers them.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from pydantic import Field

from nemotron_assets.assets.reporting import bad_input_fails_without_retry, emit_partition_results, histogram_markdown
from nemotron_assets.blend import Blend
from nemotron_assets.formats import megatron
from nemotron_assets.layout import (
    ShardKey,
    harmony_partitions_name,
    manifest_path,
    pretrain_dir,
    pretrain_partitions_name,
    shard_prefix,
)
from nemotron_assets.pretrain.blend_files import build_blend_files
from nemotron_assets.pretrain.shard_step import materialize_shard
from nemotron_assets.pretrain.verify import verify_shard
from nemotron_assets.resources.storage import StorageResource
from nemotron_assets.resources.wandb_lineage import WandbLineage, blend_outputs
from nemotron_assets.sources.manifest import SCALES, SourceManifest, build_manifest
from nemotron_assets.storage import Storage
from nemotron_assets.tokenize.documents import DocumentOptions, cached_tokenizer

SHARDS_PER_RUN = 16


class SourceSplitConfig(dg.Config):
    scale: str = Field("full", description="tiny (<= 10,000 rows per dataset), small (<= 1,000,000) or full.")
    max_rows: int | None = Field(None, description="Row sample: only the first N rows of each dataset.")


class ShardConfig(dg.Config):
    force: bool = Field(False, description="Rebuild shards even when their receipt says they are up to date.")
    tokenizer_backend: str = Field("auto", description="auto (fastest exact backend), hf or fastokens.")


class MegatronBlendConfig(dg.Config):
    allow_missing_shards: bool = Field(False, description="Write the blend even if planned shards are missing.")


@dataclass(frozen=True)
class PretrainAssets:
    source_split: dg.AssetsDefinition
    pretrain_shard: dg.AssetsDefinition
    megatron_blend: dg.AssetsDefinition
    shard_checks: dg.AssetChecksDefinition
    dataset_partitions: dg.StaticPartitionsDefinition
    shard_partitions: dg.DynamicPartitionsDefinition

    @property
    def definitions(self) -> list:
        return [self.source_split, self.pretrain_shard, self.megatron_blend, self.shard_checks]


def load_manifest(store: Storage, blend: Blend, dataset: str) -> SourceManifest:
    """The dataset's current manifest; a missing one fails the step at once (a retry cannot create it)."""
    path = manifest_path(blend.name, dataset)
    if not store.exists(path):
        raise dg.Failure(f"{store.url(path)} does not exist: materialize {blend.name}/source_split partition "
                         f"{dataset!r} first", allow_retries=False)
    return SourceManifest.from_json(json.loads(store.read_bytes(path)))


def document_options(blend: Blend, backend: str = "auto") -> DocumentOptions:
    return DocumentOptions(add_bos=blend.add_bos, add_eos=blend.add_eos, eod_token=blend.eod_token,
                           max_doc_tokens=blend.max_doc_tokens, backend=backend)


def build_pretrain_assets(blend: Blend, blend_file: Path) -> PretrainAssets:
    """Assets, checks and partitions of one blend; keys are prefixed and grouped by the blend name."""
    name = blend.name
    dataset_partitions = dg.StaticPartitionsDefinition([e.name for e in blend.entries()])
    shard_partitions = dg.DynamicPartitionsDefinition(name=pretrain_partitions_name(name))
    base_dir = blend_file.parent

    @dg.asset(
        key=[name, "source_split"], group_name=name, partitions_def=dataset_partitions,
        backfill_policy=dg.BackfillPolicy.single_run(), kinds={"python"},
        description="Resolves a dataset to an immutable file manifest (path, size, hash/ETag, rows) and plans "
                    "its shards; registers the shard partitions.",
    )
    def source_split(context: dg.AssetExecutionContext, config: SourceSplitConfig, storage: StorageResource):
        if config.scale not in SCALES:
            raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {config.scale!r}")
        limits = [x for x in (SCALES[config.scale], config.max_rows) if x is not None]
        max_rows = min(limits) if limits else None
        store = storage.get()
        per_partition = {}
        for dataset in context.partition_keys:
            with bad_input_fails_without_retry():
                manifest = build_manifest(blend, blend.entry(dataset), base_dir, max_rows=max_rows)
            store.write_bytes(manifest_path(name, dataset), manifest.to_bytes())
            partitions_name = (harmony_partitions_name(name) if blend.entry(dataset).family
                               else shard_partitions.name)  # a family dataset takes the Harmony path
            _register_shards(context.instance, partitions_name, manifest)
            context.log.info(f"{dataset}: {len(manifest.files)} file(s), {manifest.total_rows:,} rows, "
                             f"{len(manifest.shards)} shard(s)")
            per_partition[dataset] = _manifest_metadata(manifest, store.url(manifest_path(name, dataset)))
        yield from emit_partition_results(context, per_partition, {"datasets": len(per_partition)})

    @dg.asset(
        key=[name, "pretrain_shard"], group_name=name, partitions_def=shard_partitions,
        deps=[dg.AssetDep(source_split, partition_mapping=dg.AllPartitionMapping())],
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        retry_policy=dg.RetryPolicy(max_retries=2, delay=1, backoff=dg.Backoff.EXPONENTIAL),
        kinds={"megatron"},
        description="Tokenizes one shard of a dataset into a Megatron .bin/.idx pair (byte-identical to "
                    "Megatron-LM tools/preprocess_data.py --append-eod).",
    )
    def pretrain_shard(context: dg.AssetExecutionContext, config: ShardConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        with bad_input_fails_without_retry():
            tokenizer = cached_tokenizer(blend.tokenizer_model, blend.tokenizer_revision,
                                         document_options(blend, config.tokenizer_backend))
        context.log.info(f"tokenizer {blend.tokenizer_model}: vocab {tokenizer.vocab_size:,}, "
                         f"backend {tokenizer.backend} ({tokenizer.backend_reason})")
        manifests: dict[str, SourceManifest] = {}
        per_partition, totals = {}, {"tokens": 0, "documents": 0, "built": 0, "up to date": 0}
        for partition in context.partition_keys:
            key = ShardKey.parse(partition)
            if key.dataset not in manifests:
                manifests[key.dataset] = load_manifest(store, blend, key.dataset)
            manifest = manifests[key.dataset]
            if key.index >= len(manifest.shards):
                raise dg.Failure(f"{partition}: the current plan of {key.dataset!r} has only "
                                 f"{len(manifest.shards)} shard(s); re-materialize its source_split",
                                 allow_retries=False)
            with bad_input_fails_without_retry():
                outcome = materialize_shard(store, blend, manifest, key, tokenizer, force=config.force,
                                            log=context.log.info)
            stats = outcome.receipt["stats"]
            context.log.info(f"{partition}: {outcome.status}, {stats['documents']:,} documents, "
                             f"{stats['tokens']:,} tokens")
            per_partition[partition] = _shard_metadata(outcome.status, outcome.receipt,
                                                       store.url(shard_prefix(name, key)), outcome.seconds)
            totals["tokens"] += stats["tokens"]
            totals["documents"] += stats["documents"]
            totals[outcome.status] += 1
        lineage.log_shards(context, store, name, list(per_partition.items()), manifests)
        yield from emit_partition_results(context, per_partition, {"shards": len(per_partition), **totals})

    @dg.multi_asset_check(
        specs=[
            dg.AssetCheckSpec("bin_idx_consistent", asset=pretrain_shard, partitions_def=shard_partitions,
                              description="magic, version, dtype, pointers = cumulative lengths, .bin size"),
            dg.AssetCheckSpec("token_ids_below_vocab", asset=pretrain_shard, partitions_def=shard_partitions,
                              description="every token id < the tokenizer's vocabulary size"),
            dg.AssetCheckSpec("counts_match_metadata", asset=pretrain_shard, partitions_def=shard_partitions,
                              description="documents/tokens in the files equal the materialization metadata"),
        ],
        name=f"{name}__pretrain_shard_checks",
    )
    def shard_checks(context: dg.AssetCheckExecutionContext, storage: StorageResource):
        store = storage.get()
        keys = context.partition_keys if context.has_partition_key_range or context.has_partition_key else []
        problems: dict[str, list[str]] = {"bin_idx_consistent": [], "token_ids_below_vocab": [],
                                          "counts_match_metadata": []}
        for partition in keys:
            recorded = _recorded_metadata(context.instance, pretrain_shard.key, partition)
            result = verify_shard(store, name, ShardKey.parse(partition), recorded)
            for check, issue in result.items():
                if issue:
                    problems[check].append(f"{partition}: {issue}")
        for check, issues in problems.items():
            yield dg.AssetCheckResult(
                asset_key=pretrain_shard.key, check_name=check, passed=not issues,
                metadata={"shards_checked": len(keys), "problems": dg.MetadataValue.md(
                    "\n".join(f"- {i}" for i in issues) if issues else "none")},
            )

    @dg.asset(
        key=[name, "megatron_blend"], group_name=name, deps=[pretrain_shard], kinds={"json"},
        description="Megatron-Bridge blend.json (all splits) and the equivalent --data-path arguments; "
                    "lists only shards that exist and are non-empty.",
    )
    def megatron_blend(context: dg.AssetExecutionContext, config: MegatronBlendConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        manifests = {e.name: load_manifest(store, blend, e.name) for e in blend.entries() if not e.family}
        files = build_blend_files(store, blend, manifests, allow_missing=config.allow_missing_shards)
        for relative, data in files.outputs.items():
            store.write_bytes(relative, data)
        data_path = files.outputs[f"{pretrain_dir(name)}/data_path.txt"].decode()
        metadata = {
            "blend_json": dg.MetadataValue.path(store.url(f"{pretrain_dir(name)}/blend.json")),
            "data_path": dg.MetadataValue.md(f"```\n{data_path}```"),
            "shards": dg.MetadataValue.int(files.shards_listed),
            "empty_shards_left_out": dg.MetadataValue.int(files.empty_left_out),
            "tokens_by_split": dg.MetadataValue.json(files.tokens_by_split),
            "blend": dg.MetadataValue.json(megatron.blend_json(files.splits)),
        }
        lineage.log_blend(context, store, name, metadata, blend_outputs(name), manifests)
        return dg.MaterializeResult(metadata=metadata)

    return PretrainAssets(source_split, pretrain_shard, megatron_blend, shard_checks, dataset_partitions,
                          shard_partitions)


def _register_shards(instance: dg.DagsterInstance, partitions_name: str, manifest: SourceManifest) -> None:
    """Make the shard partitions match the plan: add new keys, delete keys of shards the plan dropped."""
    wanted = [str(ShardKey(manifest.dataset, s.index)) for s in manifest.shards]
    existing = instance.get_dynamic_partitions(partitions_name)
    for key in existing:
        if ShardKey.parse(key).dataset == manifest.dataset and key not in wanted:
            instance.delete_dynamic_partition(partitions_name, key)
    missing = [k for k in wanted if k not in set(existing)]
    if missing:
        instance.add_dynamic_partitions(partitions_name, missing)


def _recorded_metadata(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str) -> dict | None:
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1).records
    if not records:
        return None
    return {k: v.value for k, v in records[0].asset_materialization.metadata.items()}


def _manifest_metadata(manifest: SourceManifest, url: str) -> dict:
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


def _shard_metadata(status: str, receipt: dict, prefix_url: str, seconds: float = 0.0) -> dict:
    stats = receipt["stats"]
    return {
        "status": dg.MetadataValue.text(status),
        "seconds": dg.MetadataValue.float(round(seconds, 3)),
        "prefix": dg.MetadataValue.path(prefix_url),
        "rows": dg.MetadataValue.int(stats["rows"]),
        "documents": dg.MetadataValue.int(stats["documents"]),
        "empty_documents": dg.MetadataValue.int(stats["empty_documents"]),
        "tokens": dg.MetadataValue.int(stats["tokens"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "dropped_examples": dg.MetadataValue.md("\n".join(f"- {e}" for e in stats.get("dropped_examples", []))
                                                or "none"),
        "bin_bytes": dg.MetadataValue.int(stats["bin_bytes"]),
        "idx_bytes": dg.MetadataValue.int(stats["idx_bytes"]),
        "bin_sha256": dg.MetadataValue.text(stats["bin_sha256"]),
        "idx_sha256": dg.MetadataValue.text(stats["idx_sha256"]),
        "min_doc_tokens": dg.MetadataValue.int(stats["min_doc_tokens"]),
        "mean_doc_tokens": dg.MetadataValue.float(float(stats["mean_doc_tokens"])),
        "max_doc_tokens": dg.MetadataValue.int(stats["max_doc_tokens"]),
        "token_histogram": dg.MetadataValue.md(histogram_markdown(stats["histogram"])),
        "dtype": dg.MetadataValue.text(stats["dtype"]),
        "tokenizer_backend": dg.MetadataValue.text(stats["backend"]),
        "vocab_size": dg.MetadataValue.int(receipt["vocab_size"]),
    }
