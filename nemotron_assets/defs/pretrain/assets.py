"""The pretraining path of one blend, for its datasets that name neither a ``family`` nor a ``transform``:

    source_split (defs/sources/)
        -> pretrain_shard (one partition per dataset shard, ``<dataset>/shard_NNNNN``, with its three checks)
        -> megatron_blend (blend.json + data_path.txt)

A ``pretrain_shard`` run takes any range of shards (``BackfillPolicy.single_run()``): it decides which are up to
date, loads the tokenizer once, builds the others at the same time in processes forked from the step, and commits
and reports each in partition order (core/step.py ``ShardRun``). So ``dagster asset materialize --select
<blend>/pretrain_shard --partition-range <dataset>/shard_00000...<dataset>/shard_NNNNN`` builds a whole dataset in
one run, in parallel, as the command line does. The same factory builds the sample twins (core/partitions.py).
"""

import functools

import dagster as dg
from pydantic import Field

from nemotron_assets.core.layout import ShardKey
from nemotron_assets.core.lineage import WandbLineage
from nemotron_assets.core.pipeline import Assets, BlendScope
from nemotron_assets.core.records import NotReady, require_manifest
from nemotron_assets.core.reporting import (
    CheckOutcome,
    histogram_markdown,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
    recorded_metadata,
    retry_transient_errors,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.step import Outcome, ShardBuild, ShardRun, Staged, adopt, build_output
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.pretrain.blend_files import BLEND_FILES, BlendListing, blend_files_output
from nemotron_assets.defs.pretrain.checks import CHECKS, check_shard
from nemotron_assets.defs.pretrain.layout import pretrain_dir, shard_prefix
from nemotron_assets.defs.pretrain.lineage import log_blend_lineage, log_shard_lineage
from nemotron_assets.defs.pretrain.shard import PretrainSettings, shard_build
from nemotron_assets.formats import megatron
from nemotron_assets.sources.manifest import SourceManifest
from nemotron_assets.tokenize.documents import LoadedTokenizer, ModelFileTokenizer, cached_tokenizer


class ShardConfig(dg.Config):
    force: bool = Field(False, description="Rebuild shards even when their receipt says they are up to date.")
    tokenizer_backend: str = Field("auto", description="auto (fastest exact backend), hf or fastokens.")
    build_processes: int = Field(0, description="Shards of this run built at the same time, each in a process forked "
                                                "from the step: 0 = one per core (at most 8); 1 = one after the "
                                                "other in the step.")


class MegatronBlendConfig(dg.Config):
    force: bool = Field(False, description="Write the blend files even when their receipt says they are up to date.")
    allow_missing_shards: bool = Field(False, description="Write the blend even if planned shards are missing "
                                                          "(stale shards are always refused).")


def build_pretrain_assets(blend_scope: BlendScope, upstream: Assets) -> Assets:
    """``pretrain_shard`` and ``megatron_blend`` of one blend's full build (or of its samples)."""
    blend, scope = blend_scope.blend, blend_scope.scope
    shard_key = dg.AssetKey(scope.key("pretrain_shard"))

    @partitioned_asset(
        scope.key("pretrain_shard"), group=scope.group, partitions_def=scope.dynamic("pretrain_shards"),
        kinds={"megatron"}, deps=[dg.AssetDep(upstream["source_split"], partition_mapping=dg.AllPartitionMapping())],
        checks=CHECKS, backfill_policy=dg.BackfillPolicy.single_run(),
        description="Tokenizes one shard of a dataset into a Megatron .bin/.idx pair (byte-identical to "
                    "Megatron-LM tools/preprocess_data.py --append-eod), then checks it.",
    )
    @retry_transient_errors
    def pretrain_shard(context: dg.AssetExecutionContext, config: ShardConfig, storage: StorageResource,
                       lineage: WandbLineage):
        store = storage.get()
        settings = PretrainSettings.of(blend, config.tokenizer_backend)
        manifests: dict[str, SourceManifest] = {}
        built: list[tuple[str, dict]] = []
        loaded = functools.cache(functools.partial(load_tokenizer, context, settings))  # once per step

        def build(partition: str) -> dict:
            outcome = run.outcome(partition)
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['documents']:,} documents, "
                             f"{stats['tokens']:,} tokens")
            sample, _ = scope.split(partition)
            metadata = shard_metadata(outcome, store.url(shard_prefix(scope.base(sample), ShardKey.parse(
                outcome.key))))
            built.append((outcome.key, metadata))
            return metadata

        def check(partition: str) -> list[CheckOutcome]:
            sample, shard = scope.split(partition)
            recorded = recorded_metadata(context.instance, shard_key, partition)
            problems = check_shard(store, shard_prefix(scope.base(sample), ShardKey.parse(shard)), recorded)
            return [CheckOutcome(name, not problem, {"problem": problem or "none"})
                    for name, problem in problems.items()]

        try:
            with ShardRun(store, context.log.info, force=config.force, processes=config.build_processes,
                          prepare=loaded) as run:
                if shard_key in context.selected_asset_keys:  # not when only the checks run
                    run.plan(shard_builds(store, settings, scope, context.partition_keys, manifests, loaded))
                yield from materialize_partitions(context, shard_key, context.partition_keys, build, check)
        finally:
            if not scope.samples and built:
                log_shard_lineage(lineage, context, store, blend.name, built, manifests)

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
def load_tokenizer(context: dg.AssetExecutionContext,
                   settings: PretrainSettings) -> LoadedTokenizer | ModelFileTokenizer:
    """The step's tokenizer, loaded once per process and setting; a bad tokenizer fails the step, located."""
    with permanent_errors_fail_at_once():
        tokenizer = cached_tokenizer(settings.tokenizer_model, settings.tokenizer_revision, settings.documents,
                                     settings.tiktoken)
    context.log.info(f"tokenizer {settings.tokenizer_model}: vocab {tokenizer.vocab_size:,}, backend "
                     f"{tokenizer.backend} ({tokenizer.backend_reason})")
    return tokenizer


def shard_builds(store: Storage, settings: PretrainSettings, scope, partitions: list[str],
                 manifests: dict[str, SourceManifest], loaded) -> dict[str, ShardBuild | Exception]:
    """Each partition's shard in its dataset's current plan; a partition that has none gets its error, which its own
    outcome raises (the others go on)."""
    tokenizer = None
    builds: dict[str, ShardBuild | Exception] = {}
    for partition in partitions:
        sample, shard = scope.split(partition)
        key = ShardKey.parse(shard)
        try:
            if key.dataset not in manifests:
                manifests[key.dataset] = require_manifest(store, settings.blend, scope.base(sample), key.dataset)
            manifest = manifests[key.dataset]
            if key.index >= len(manifest.shards):
                raise NotReady(f"the current plan of {key.dataset!r} has only {len(manifest.shards)} shard(s); "
                               f"re-materialize {settings.blend}/source_split")
            if tokenizer is None:
                with permanent_errors_fail_at_once():
                    tokenizer = settings.tokenizer_identity()
            builds[partition] = shard_build(settings, manifest, key, scope.base(sample), tokenizer, loaded)
        except Exception as exc:  # noqa: BLE001 - reported as this partition's failure
            builds[partition] = exc
    return builds


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


# --- metadata -----------------------------------------------------------------------------------------------
def shard_metadata(outcome: Outcome, prefix_url: str) -> dict:
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
        # a list text_field: the counts above are its first field's; each field's tokens and files' prefix
        **({"tokens_by_field": dg.MetadataValue.json({name: field["tokens"]
                                                      for name, field in stats["fields"].items()}),
            "field_prefixes": dg.MetadataValue.json({name: prefix_url + field["suffix"]
                                                     for name, field in stats["fields"].items()})}
           if "fields" in stats else {}),
    }
