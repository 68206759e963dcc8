"""The pretraining path of one blend, as Dagster assets:

    source_split (one partition per dataset)
        -> pretrain_shard (one partition per dataset shard, ``<dataset>/shard_NNNNN``, with its three checks)
        -> megatron_blend (blend.json + data_path.txt)

The same factory builds the sample twins (``<blend>/samples/...``, partitions.py ``Scope``). Each asset resolves its
inputs, calls one step function below, which calls pure code (``sources/``, ``pretrain/``, ``formats/``) and commits
files through the storage resource, and reports per partition (reporting.py). Shard partitions are dynamic because a
dataset's shard count comes from its size, known only once its files are listed: ``source_split`` registers them.
"""

import functools
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
from pydantic import Field

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import ShardKey, pretrain_dir, sample_rows, shard_prefix
from nemotron_assets.core.lineage import WandbLineage, blend_outputs
from nemotron_assets.core.partitions import SHARDS_PER_RUN, Scope, pretrain_partitions_name
from nemotron_assets.core.records import NotReady, SourceManifest, require_manifest, write_manifest
from nemotron_assets.core.reporting import (
    TRANSIENT_RETRIES,
    CheckOutcome,
    histogram_markdown,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
    recorded_metadata,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.blend_files import build_blend_files
from nemotron_assets.defs.pretrain.build_host import BuildHost, command_host, measured_ahead
from nemotron_assets.defs.pretrain.inputs import blend_tokenizer_identity, document_options
from nemotron_assets.defs.pretrain.shard_checks import CHECKS, check_shard
from nemotron_assets.defs.pretrain.shard_processes import ShardRun, ShardTarget, build_processes
from nemotron_assets.defs.pretrain.shard_step import ShardOutcome
from nemotron_assets.defs.sources.preflight import check_before_reading
from nemotron_assets.formats import megatron
from nemotron_assets.sources.manifest import build_manifest
from nemotron_assets.tokenize.documents import DocumentOptions, LoadedTokenizer, TokenizerFacts, cached_tokenizer


class ShardConfig(dg.Config):
    force: bool = Field(False, description="Rebuild shards even when their receipt says they are up to date.")
    tokenizer_backend: str = Field("auto", description="auto (fastest exact backend), hf or fastokens.")
    build_processes: int = Field(0, description="Shards of this run built at the same time, each in a process forked "
                                                "from the step: 0 = one per core (at most 8); 1 = one after the "
                                                "other in the step.")


class MegatronBlendConfig(dg.Config):
    allow_missing_shards: bool = Field(False, description="Write the blend even if planned shards are missing "
                                                          "(stale shards are always refused).")


@dataclass(frozen=True)
class PretrainAssets:
    source_split: dg.AssetsDefinition
    pretrain_shard: dg.AssetsDefinition
    megatron_blend: dg.AssetsDefinition
    dataset_partitions: dg.PartitionsDefinition
    shard_partitions: dg.DynamicPartitionsDefinition
    scope: Scope

    has_text_datasets: bool = True

    @property
    def definitions(self) -> list:
        """The source split, and the pretraining assets when the blend has pretraining text datasets (neither a
        ``family`` nor a ``transform``): a blend of post-training data only has no Megatron shards to show."""
        if not self.has_text_datasets:
            return [self.source_split]
        return [self.source_split, self.pretrain_shard, self.megatron_blend]


def build_pretrain_assets(blend: Blend, blend_file: Path, scope: Scope | None = None) -> PretrainAssets:
    """Assets of one blend's full build (or, with ``Scope(blend.name, samples=True)``, of its samples)."""
    scope = scope or Scope(blend.name)
    dataset_partitions = scope.partitions("datasets", dg.StaticPartitionsDefinition([e.name for e in blend.entries()]))
    shard_partitions = scope.partitions("pretrain_shards",
                                        dg.DynamicPartitionsDefinition(name=pretrain_partitions_name(blend.name)))
    blend_partitions = scope.partitions("blend", None)

    @partitioned_asset(
        scope.key("source_split"), group=scope.group, partitions_def=dataset_partitions, kinds={"python"},
        backfill_policy=dg.BackfillPolicy.single_run(),
        description="Resolves a dataset to an immutable file manifest (path, size, hash/ETag, rows) and plans "
                    "its shards; registers the shard partitions.",
    )
    def source_split(context: dg.AssetExecutionContext, storage: StorageResource):
        store = storage.get()
        yield from materialize_partitions(context, dg.AssetKey(scope.key("source_split")), context.partition_keys,
                                          lambda partition: plan_dataset(context, store, blend, blend_file, scope,
                                                                         partition))

    @partitioned_asset(
        scope.key("pretrain_shard"), group=scope.group, partitions_def=shard_partitions, kinds={"megatron"},
        deps=[dg.AssetDep(source_split, partition_mapping=dg.AllPartitionMapping())], checks=CHECKS,
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        retry_policy=TRANSIENT_RETRIES,
        description="Tokenizes one shard of a dataset into a Megatron .bin/.idx pair (byte-identical to "
                    "Megatron-LM tools/preprocess_data.py --append-eod), then checks it.",
    )
    def pretrain_shard(context: dg.AssetExecutionContext, config: ShardConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        asset_key = dg.AssetKey(scope.key("pretrain_shard"))
        options = document_options(blend, config.tokenizer_backend)
        facts, host = shard_tokenizer(context, blend, options)
        manifests: dict[str, SourceManifest] = {}
        built: list[tuple[str, dict]] = []
        targets, unresolved = resolve_targets(store, blend, scope, manifests, context.partition_keys)
        shard_run = ShardRun(store, blend, facts, functools.partial(load_blend_tokenizer, blend, options),
                             build_processes(config.build_processes), context.log.info, force=config.force, host=host)

        def build(partition: str) -> dict:
            if partition in unresolved:
                raise unresolved[partition]
            outcome = shard_run.outcome(partition)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['documents']:,} documents, "
                             f"{stats['tokens']:,} tokens")
            sample = scope.split(partition)[0]
            metadata = shard_metadata(outcome, store.url(shard_prefix(scope.base(sample), outcome.key)))
            built.append((str(outcome.key), metadata))
            return metadata

        def check(partition: str) -> list[CheckOutcome]:
            sample, shard = scope.split(partition)
            recorded = recorded_metadata(context.instance, asset_key, partition)
            problems = check_shard(store, shard_prefix(scope.base(sample), ShardKey.parse(shard)), recorded)
            return [CheckOutcome(name, not problem, {"problem": problem or "none"})
                    for name, problem in problems.items()]

        try:
            with shard_run:
                if asset_key in context.selected_asset_keys:  # not when only the checks run
                    shard_run.plan(targets)
                yield from materialize_partitions(context, asset_key, context.partition_keys, build, check)
        finally:
            if not scope.samples and built:
                lineage.log_shards(context, store, blend.name, built, manifests)

    @dg.asset(
        key=scope.key("megatron_blend"), group_name=scope.group, partitions_def=blend_partitions,
        deps=[pretrain_shard], kinds={"json"},
        description="Megatron-Bridge blend.json (train, valid and test) and the equivalent --data-path arguments; "
                    "lists only up-to-date, non-empty shards.",
    )
    def megatron_blend(context: dg.AssetExecutionContext, config: MegatronBlendConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        sample, _ = scope.split(context.partition_keys[0]) if scope.samples else (None, None)
        with permanent_errors_fail_at_once():
            manifests, metadata = write_megatron_blend(store, blend, scope.base(sample), config.allow_missing_shards)
        if not scope.samples:
            lineage.log_blend(context, store, blend.name, metadata, blend_outputs(blend.name), manifests)
        return dg.MaterializeResult(metadata=metadata)

    return PretrainAssets(source_split, pretrain_shard, megatron_blend, dataset_partitions, shard_partitions, scope,
                          has_text_datasets=bool(blend.datasets_of("pretrain")))


# --- the steps ----------------------------------------------------------------------------------------------
def plan_dataset(context: dg.AssetExecutionContext, store: Storage, blend: Blend, blend_file: Path, scope: Scope,
                 partition: str) -> dict:
    """source_split of one dataset: check what can be checked without reading, measure and plan (or take the plan
    the command's build host measured ahead, pretrain/build_host.py), write the manifest, register the dataset's
    shard partitions."""
    sample, dataset = scope.split(partition)
    entry = blend.entry(dataset)
    check_before_reading(blend, blend_file, [dataset])
    manifest = None if sample else measured_ahead(blend, dataset, blend_file.parent)
    ahead = manifest is not None
    if manifest is None:
        manifest = build_manifest(blend, entry, blend_file.parent, max_rows=sample_rows(sample) if sample else None)
    relative = write_manifest(store, scope.base(sample), manifest)
    register_shards(context.instance, scope, entry.kind, sample, manifest)
    context.log.info(f"{partition}: {len(manifest.files)} file(s), {manifest.total_rows:,} rows, "
                     f"{len(manifest.shards)} shard(s){', measured by the build host' if ahead else ''}")
    return manifest_metadata(manifest, store.url(relative))


def register_shards(instance: dg.DagsterInstance, scope: Scope, kind: str, sample: str | None,
                    manifest: SourceManifest) -> None:
    """Make the dataset's shard partitions match its plan: add new keys, delete keys the plan dropped."""
    partitions_name = scope.shard_partitions_name(kind)
    wanted = [scope.qualify(sample, str(ShardKey(manifest.dataset, s.index))) for s in manifest.shards]
    mine = scope.qualify(sample, f"{manifest.dataset}/")  # the prefix of this dataset's keys
    existing = instance.get_dynamic_partitions(partitions_name)
    for key in existing:
        if key.startswith(mine) and key not in wanted:
            instance.delete_dynamic_partition(partitions_name, key)
    missing = [k for k in wanted if k not in set(existing)]
    if missing:
        instance.add_dynamic_partitions(partitions_name, missing)


def shard_tokenizer(context: dg.AssetExecutionContext, blend: Blend,
                    options: DocumentOptions) -> tuple[TokenizerFacts, BuildHost | None]:
    """The facts of the blend's tokenizer, and the command's build host when it has the tokenizer loaded (then the
    step never loads it; pretrain/build_host.py). Without a host, or when its load failed, the tokenizer is loaded
    here, and a bad tokenizer fails the step with its located error."""
    host = command_host(blend.tokenizer_model, blend.tokenizer_revision, options)
    facts = host.facts() if host is not None else None
    if facts is None:
        host, facts = None, load_blend_tokenizer(blend, options).facts
    context.log.info(f"tokenizer {blend.tokenizer_model}: vocab {facts.vocab_size:,}, backend {facts.backend} "
                     f"({facts.backend_reason}){', loaded by the build host' if host else ''}")
    return facts, host


def load_blend_tokenizer(blend: Blend, options: DocumentOptions) -> LoadedTokenizer:
    with permanent_errors_fail_at_once():
        return cached_tokenizer(blend.tokenizer_model, blend.tokenizer_revision, options)


def resolve_targets(store: Storage, blend: Blend, scope: Scope, manifests: dict[str, SourceManifest],
                    partitions: list[str]) -> tuple[list[ShardTarget], dict[str, Exception]]:
    """The shard of each partition in its dataset's current plan; a partition that has none gets its error, which
    its own build raises (the others go on)."""
    targets, unresolved = [], {}
    for partition in partitions:
        sample, shard = scope.split(partition)
        key = ShardKey.parse(shard)
        try:
            if key.dataset not in manifests:
                manifests[key.dataset] = require_manifest(store, blend.name, scope.base(sample), key.dataset)
            manifest = manifests[key.dataset]
            if key.index >= len(manifest.shards):
                raise NotReady(f"the current plan of {key.dataset!r} has only {len(manifest.shards)} shard(s); "
                               f"re-materialize {blend.name}/source_split")
        except Exception as exc:  # noqa: BLE001 - reported as this partition's failure
            unresolved[partition] = exc
            continue
        targets.append(ShardTarget(partition, manifest, key, scope.base(sample)))
    return targets, unresolved


def write_megatron_blend(store: Storage, blend: Blend, base: str, allow_missing: bool
                         ) -> tuple[dict[str, SourceManifest], dict]:
    """blend.json + data_path.txt of the shards under ``base``; refuses stale shards, naming them."""
    manifests = {e.name: require_manifest(store, blend.name, base, e.name) for e in blend.datasets_of("pretrain")}
    tokenizer = blend_tokenizer_identity(blend)
    files = build_blend_files(store, blend, manifests, tokenizer, base=base, allow_missing=allow_missing)
    for relative, data in files.outputs.items():
        store.write_bytes(relative, data)
    data_path = files.outputs[f"{pretrain_dir(base)}/data_path.txt"].decode()
    metadata = {
        "blend_json": dg.MetadataValue.path(store.url(f"{pretrain_dir(base)}/blend.json")),
        "data_path": dg.MetadataValue.md(f"```\n{data_path}```"),
        "shards": dg.MetadataValue.int(files.shards_listed),
        "empty_shards_left_out": dg.MetadataValue.int(files.empty_left_out),
        "missing_shards_left_out": dg.MetadataValue.int(files.missing_left_out),
        "tokens_by_split": dg.MetadataValue.json(files.tokens_by_split),
        "blend": dg.MetadataValue.json(megatron.blend_json(files.splits)),
    }
    return manifests, metadata


# --- metadata -----------------------------------------------------------------------------------------------
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


def shard_metadata(outcome: ShardOutcome, prefix_url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "seconds": dg.MetadataValue.float(round(outcome.seconds, 3)),
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
        "long_documents": dg.MetadataValue.json(stats.get("long_documents", {})),
        "vocab_size": dg.MetadataValue.int(stats["vocab_size"]),
    }
