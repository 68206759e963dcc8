"""The packed chat SFT path of one blend, for blends with an ``sft:`` section (docs/architecture.md §4.4):

    harmony_shard (one partition per dataset shard)
        -> sft_samples (the same partitions): render, tokenize and mask the shard's rows
    sft_samples + harmony_dedup + candidate_pool
        -> sft_plan: select, split, repeat, plan the bins; registers the packed shards' partitions
        -> sft_packed (one partition per packed shard, ``<split>/shard_NNNNN``, with its three checks)
        -> sft_manifest: manifest.json, Bridge's packing_metadata.json, and the .npy files

The same factory builds the sample twins (partitions.py ``Scope``). Each asset resolves its inputs and calls one pure
step (``sft/steps/``), which commits the files and writes the receipt last, and reports per partition
(reporting.py).
"""

from dataclasses import dataclass

import dagster as dg

from nemotron_assets.core.blend import Blend
from nemotron_assets.core.layout import (
    SftShardKey,
    ShardKey,
    sft_dir,
    sft_manifest_prefix,
    sft_packed_prefix,
    sft_plan_prefix,
    sft_samples_prefix,
)
from nemotron_assets.core.lineage import (
    CandidatePoolInput,
    ScoresInput,
    WandbLineage,
    selection_artifact,
)
from nemotron_assets.core.partitions import SHARDS_PER_RUN, Scope, sft_partitions_name
from nemotron_assets.core.records import Receipt, require_manifest
from nemotron_assets.core.reporting import (
    TRANSIENT_RETRIES,
    CheckOutcome,
    histogram_markdown,
    materialize_partitions,
    outcome_metadata,
    partitioned_asset,
    permanent_errors_fail_at_once,
)
from nemotron_assets.core.resources import StorageResource
from nemotron_assets.core.storage import Storage
from nemotron_assets.defs.harmony.assets import REBUILD_WHEN_INPUTS_CHANGE, HarmonyAssets, RebuildConfig
from nemotron_assets.defs.sft import samples_file
from nemotron_assets.defs.sft.inputs import chat_identity, current_plan
from nemotron_assets.defs.sft.manifest_step import ManifestOutcome, materialize_manifest
from nemotron_assets.defs.sft.pack_checks import CHECKS, check_packed_shard
from nemotron_assets.defs.sft.pack_step import PackedOutcome, ShardSamples, materialize_packed
from nemotron_assets.defs.sft.plan_step import PlanOutcome, materialize_plan
from nemotron_assets.defs.sft.samples_step import SamplesOutcome, materialize_samples
from nemotron_assets.formats.splits import SPLITS


@dataclass(frozen=True)
class SftAssets:
    sft_samples: dg.AssetsDefinition
    sft_plan: dg.AssetsDefinition
    sft_packed: dg.AssetsDefinition
    sft_manifest: dg.AssetsDefinition
    shard_partitions: dg.DynamicPartitionsDefinition

    @property
    def definitions(self) -> list:
        return [self.sft_samples, self.sft_plan, self.sft_packed, self.sft_manifest]

    @property
    def rebuilt_when_inputs_change(self) -> list[dg.AssetsDefinition]:
        return self.definitions


def build_sft_assets(blend: Blend, harmony: HarmonyAssets, scope: Scope | None = None,
                     selected_pool: dg.AssetsDefinition | None = None) -> SftAssets:
    """Assets of the blend's packed SFT; ``harmony`` is the same scope's Harmony path (full build or samples);
    ``selected_pool``: the same scope's scoring selections, an upstream of the plan when ``sft.from`` names one."""
    scope = scope or Scope(blend.name)
    shard_partitions = scope.partitions("sft_shards", dg.DynamicPartitionsDefinition(
        name=sft_partitions_name(blend.name)))
    blend_partitions = scope.partitions("blend", None)
    automation = None if scope.samples else REBUILD_WHEN_INPUTS_CHANGE
    every = dg.AllPartitionMapping()

    @partitioned_asset(
        scope.key("sft_samples"), group=scope.group, partitions_def=harmony.shard_partitions, kinds={"arrow"},
        deps=[harmony.harmony_shard], automation_condition=automation,
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        retry_policy=TRANSIENT_RETRIES,
        description="Renders, tokenizes and masks the rows of one Harmony shard with the blend's chat template: "
                    "token ids, unshifted assistant mask and masked-role spans per sample (an Arrow IPC file).",
    )
    def sft_samples(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        chat = chat_identity(blend)
        yield from materialize_partitions(
            context, dg.AssetKey(scope.key("sft_samples")), context.partition_keys,
            build=lambda partition: render_shard(context, store, blend, scope, chat, partition, config.force))

    @dg.asset(
        key=scope.key("sft_plan"), group_name=scope.group, partitions_def=blend_partitions,
        automation_condition=automation, kinds={"parquet"}, retry_policy=TRANSIENT_RETRIES,
        deps=[dg.AssetDep(sft_samples, partition_mapping=every),
              dg.AssetDep(harmony.harmony_dedup, partition_mapping=every),
              dg.AssetDep(harmony.candidate_pool, partition_mapping=every),
              *([dg.AssetDep(selected_pool, partition_mapping=every)]
                if selected_pool is not None and reads_selections(blend) else [])],
        description="Selects the samples (dedup, sft.from, used_in), assigns train/valid/test and repeat copies, "
                    "and plans the bins of every packed shard; registers the packed shards' partitions.",
    )
    def sft_plan(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        sample, _ = scope.split(context.partition_keys[0]) if scope.samples else (None, None)
        base = scope.base(sample)
        with permanent_errors_fail_at_once():
            outcome = materialize_plan(store, blend, base, config.force, log=context.log.info)
        register_sft_shards(context.instance, scope, sample, outcome.shard_keys)
        splits = outcome.receipt.stats["splits"]
        context.log.info(f"sft plan: {outcome.status}, " + ", ".join(
            f"{split} {splits[split]['samples']:,} samples in {splits[split]['bins']:,} bins "
            f"({splits[split]['shards']} shard(s))" for split in SPLITS))
        return dg.MaterializeResult(metadata=plan_metadata(outcome, store.url(sft_plan_prefix(base) + ".parquet")))

    @partitioned_asset(
        scope.key("sft_packed"), group=scope.group, partitions_def=shard_partitions, kinds={"parquet"},
        deps=[dg.AssetDep(sft_plan, partition_mapping=every)], checks=CHECKS, automation_condition=automation,
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=SHARDS_PER_RUN),
        retry_policy=TRANSIENT_RETRIES,
        description="Packs the planned samples of one shard into bins (Megatron-Bridge's packed Parquet: input_ids, "
                    "loss_mask, seq_start_id) plus the samples file that says which sample sits where.",
    )
    def sft_packed(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource):
        store = storage.get()
        plans: dict[str, Receipt] = {}
        read_by_build: dict[str, ShardSamples] = {}  # partition -> the samples its build read, for its checks next

        def plan_of(base: str) -> Receipt:
            if base not in plans:
                plans[base] = current_plan(store, blend, base)
            return plans[base]

        def build(partition: str) -> dict:
            sample, shard = scope.split(partition)
            base = scope.base(sample)
            outcome = materialize_packed(store, blend, base, SftShardKey.parse(shard), config.force,
                                         log=context.log.info, plan=plan_of(base))
            read_by_build.clear()  # one shard's samples at most: its checks run right after its build
            if outcome.samples is not None and context.selected_asset_check_keys:
                read_by_build[partition] = outcome.samples
            stats = outcome.receipt.stats
            context.log.info(f"{partition}: {outcome.status}, {stats['samples']:,} samples in {stats['bins']:,} bins, "
                             f"packing efficiency {stats['packing_efficiency']:.1%}")
            return packed_metadata(outcome, store.url(sft_packed_prefix(base, outcome.key) + ".parquet"))

        def check(partition: str) -> list[CheckOutcome]:
            sample, shard = scope.split(partition)
            base = scope.base(sample)
            problems = check_packed_shard(store, base, SftShardKey.parse(shard), plan_of(base),
                                          read_by_build.pop(partition, None))
            return [CheckOutcome(name, not found, {"problems": len(found), "first": "; ".join(found[:3]) or "none"})
                    for name, found in problems.items()]

        yield from materialize_partitions(context, dg.AssetKey(scope.key("sft_packed")), context.partition_keys,
                                          build, check)

    @dg.asset(
        key=scope.key("sft_manifest"), group_name=scope.group, partitions_def=blend_partitions,
        automation_condition=automation, deps=[dg.AssetDep(sft_packed, partition_mapping=every)], kinds={"json"},
        retry_policy=TRANSIENT_RETRIES,
        description="sft/manifest.json (per split: files, samples, bins, tokens, drops), Megatron-Bridge's "
                    "packing_metadata.json and, with formats [parquet, npy], one .npy per split for NeMo; refuses "
                    "packed shards that are not up to date.",
    )
    def sft_manifest(context: dg.AssetExecutionContext, config: RebuildConfig, storage: StorageResource,
                     lineage: WandbLineage):
        store = storage.get()
        sample, _ = scope.split(context.partition_keys[0]) if scope.samples else (None, None)
        base = scope.base(sample)
        with permanent_errors_fail_at_once():
            outcome, manifest = materialize_manifest(store, blend, base, config.force, log=context.log.info)
        metadata = manifest_metadata(outcome, manifest, store.url(sft_dir(base) + "/manifest.json"))
        if not scope.samples:
            manifests = {e.name: require_manifest(store, blend.name, base, e.name)
                         for e in blend.datasets_of("harmony")}
            files = [f"{sft_dir(base)}/{name}" for name in outcome.receipt.files]
            files.append(sft_manifest_prefix(base) + ".json")
            shards = [sft_packed_prefix(base, SftShardKey.parse(key)) for key in outcome.receipt.inputs["shards"]]
            lineage.log_sft(context, store, blend.name, metadata, manifests, files, shards, pools_read(blend))
        return dg.MaterializeResult(metadata=metadata)

    return SftAssets(sft_samples, sft_plan, sft_packed, sft_manifest, shard_partitions)


def pools_read(blend: Blend) -> list[ScoresInput]:
    """The pools ``sft.from`` names, as lineage inputs: a scoring selection's artifact, or a candidate pool's."""
    if blend.sft is None or blend.sft.from_ == "all":
        return []
    selections = set(blend.scoring.selections()) if blend.scoring is not None else set()
    return [selection_artifact(blend.name, name) if name in selections else CandidatePoolInput(name)
            for name in blend.sft.from_]


def reads_selections(blend: Blend) -> bool:
    """Whether ``sft.from`` names a scoring selection (``<pool>_easy``, ...), which makes ``selected_pool`` an
    upstream of the plan."""
    if blend.sft is None or blend.scoring is None or blend.sft.from_ == "all":
        return False
    return not set(blend.sft.from_).isdisjoint(blend.scoring.selections())


# --- the steps ------------------------------------------------------------------------------------------------
def render_shard(context: dg.AssetExecutionContext, store: Storage, blend: Blend, scope: Scope, chat: dict,
                 partition: str, force: bool) -> dict:
    sample, shard = scope.split(partition)
    key = ShardKey.parse(shard)
    base = scope.base(sample)
    outcome = materialize_samples(store, blend, base, key, force=force, log=context.log.info, chat=chat)
    stats = outcome.receipt.stats
    context.log.info(f"{partition}: {outcome.status}, {stats['samples']:,} samples of {stats['conversations']:,} "
                     f"conversations, {stats['tokens']:,} tokens")
    return samples_metadata(outcome, store.url(sft_samples_prefix(base, key) + samples_file.SUFFIX))


def register_sft_shards(instance: dg.DagsterInstance, scope: Scope, sample: str | None, keys: list[str]) -> None:
    """Make the packed shards' partitions match the plan: add new keys, delete keys the plan dropped (of this
    build only: a sample's keys start with its name)."""
    name = scope.shard_partitions_name("sft")
    wanted = [scope.qualify(sample, key) for key in keys]
    existing = instance.get_dynamic_partitions(name)
    mine = (lambda key: key.startswith(f"{sample}/")) if scope.samples else (lambda key: True)
    for key in existing:
        if mine(key) and key not in wanted:
            instance.delete_dynamic_partition(name, key)
    missing = [key for key in wanted if key not in set(existing)]
    if missing:
        instance.add_dynamic_partitions(name, missing)


# --- metadata -----------------------------------------------------------------------------------------------
def _examples(examples: list[str]) -> dg.MetadataValue:
    return dg.MetadataValue.md("\n".join(f"- {e}" for e in examples) or "none")


def samples_metadata(outcome: SamplesOutcome, url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "rows": dg.MetadataValue.int(stats["rows"]),
        "conversations": dg.MetadataValue.int(stats["conversations"]),
        "samples": dg.MetadataValue.int(stats["samples"]),
        "tokens": dg.MetadataValue.int(stats["tokens"]),
        "trained_tokens": dg.MetadataValue.int(stats["trained_tokens"]),
        "filtered_by_reason": dg.MetadataValue.json(stats["filtered"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "dropped_examples": _examples(stats["dropped_examples"]),
        "sample_length_histogram": dg.MetadataValue.md(histogram_markdown(stats["histogram"],
                                                                          "Sample length (tokens)")),
        "max_sample_tokens": dg.MetadataValue.int(stats["max_length"]),
        "tokenizer_backend": dg.MetadataValue.text(stats["tokenizer_backend"]),
        "bytes": dg.MetadataValue.int(stats["bytes"]),
        "sha256": dg.MetadataValue.text(stats["sha256"]),
    }


def plan_metadata(outcome: PlanOutcome, url: str) -> dict:
    stats = outcome.receipt.stats
    splits = stats["splits"]
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "samples_considered": dg.MetadataValue.int(stats["samples_considered"]),
        "excluded_by_reason": dg.MetadataValue.json(stats["excluded"]),
        "samples_per_split": dg.MetadataValue.json({s: splits[s]["samples"] for s in SPLITS}),
        "bins_per_split": dg.MetadataValue.json({s: splits[s]["bins"] for s in SPLITS}),
        "shards_per_split": dg.MetadataValue.json({s: splits[s]["shards"] for s in SPLITS}),
        "packing_efficiency": dg.MetadataValue.json({s: splits[s]["packing_efficiency"] for s in SPLITS}),
        "dropped_by_reason": dg.MetadataValue.json({s: splits[s]["dropped"] for s in SPLITS}),
        "shards": dg.MetadataValue.int(len(stats["shards"])),
    }


def packed_metadata(outcome: PackedOutcome, url: str) -> dict:
    stats = outcome.receipt.stats
    return {
        **outcome_metadata(outcome),
        "path": dg.MetadataValue.path(url),
        "bins": dg.MetadataValue.int(stats["bins"]),
        "samples": dg.MetadataValue.int(stats["samples"]),
        "tokens": dg.MetadataValue.int(stats["tokens"]),
        "trained_tokens": dg.MetadataValue.int(stats["trained_tokens"]),
        "pad_tokens": dg.MetadataValue.int(stats["pad_tokens"]),
        "truncated": dg.MetadataValue.int(stats["truncated"]),
        "packing_efficiency": dg.MetadataValue.float(round(stats["packing_efficiency"], 6)),
        "max_samples_per_bin": dg.MetadataValue.int(stats["max_samples_per_bin"]),
        "dropped_by_reason": dg.MetadataValue.json(stats["dropped"]),
        "licenses": dg.MetadataValue.json(stats["licenses"]),
        "sample_length_histogram": dg.MetadataValue.md(histogram_markdown(stats["sample_histogram"],
                                                                          "Sample length (tokens)")),
        "bin_length_histogram": dg.MetadataValue.md(histogram_markdown(stats["bin_histogram"],
                                                                       "Bin length (positions, sum of len - 1)")),
    }


def manifest_metadata(outcome: ManifestOutcome, manifest: dict, url: str) -> dict:
    splits = manifest["splits"]
    return {
        "status": dg.MetadataValue.text(outcome.status),
        "manifest": dg.MetadataValue.path(url),
        "splits": dg.MetadataValue.json({split: {key: value[key] for key in (
            "files", "npy", "samples", "bins", "tokens", "trained_tokens", "packing_efficiency", "dropped")}
            for split, value in splits.items()}),
        "before_split": dg.MetadataValue.json(manifest["before_split"]),
        "licenses": dg.MetadataValue.json(manifest["licenses"]),
        "eos_id": dg.MetadataValue.int(manifest["eos_id"]) if manifest["eos_id"] is not None
        else dg.MetadataValue.text("none"),
        "tokenizer_sha256": dg.MetadataValue.text(manifest["tokenizer_sha256"]),
        "template_sha256": dg.MetadataValue.text(manifest["template_sha256"]),
    }
